"""Where one node of a multi-node launch stands: the head's address, port and bind host given on the
command line, and, inside a SLURM allocation, the head and this node's rank read from SLURM.

Applied to the profile before `check` runs, so `check`'s rules, `serve`, `serve --dry-run` and the
exports all see the same values. Precedence: command line > profile > SLURM's environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import env as env_io
from ppspec_cli.io import spawn
from ppspec_cli.io.netinfo import NodeNet
from ppspec_cli.planning.profile import Profile

#: A host name, or an IPv4 / IPv6 address: what may stand for a node in argv, scripts and manifests.
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
_IPV6 = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")
#: `scontrol` answers in well under a second; a hung controller must not hang `serve`.
SCONTROL_TIMEOUT_S = 15.0
_SCONTROL_MAX_BYTES = 1 << 20


def check_host(value: str, where: str) -> str:
    """`value` when it is a host name or an IP address, else a PpspecError (never a shell word or an option)."""
    if isinstance(value, str) and (
        _HOSTNAME.fullmatch(value) or (":" in value and _IPV6.fullmatch(value))
    ):  # fullmatch: `$` would take a trailing newline
        return value
    raise PpspecError(
        f"{where} {str(value)[:80]!r} is not a host name or IP address",
        where=where,
        fix="give the head node's host name (letters, digits, `.`, `-`) or its IP address",
        exit_code=2,
    )


@dataclass
class Slurm:
    """The SLURM allocation this process runs in (from the variables srun/sbatch set)."""

    job_id: str
    node_id: int  # this node's index in the allocation (SLURM_NODEID), 0 = first host of the node list
    nnodes: int  # SLURM_JOB_NUM_NODES / SLURM_NNODES
    nodelist: str  # SLURM_JOB_NODELIST, compressed form (`node[01-04]`)


#: A SLURM host list (`node[01-04,07],gpu-a1`): host-name characters, brackets, ranges, commas;
#: never a leading `-` (it reaches `scontrol show hostnames` as an argument).
_NODELIST = re.compile(r"[A-Za-z0-9_.\[][A-Za-z0-9_.\[\],-]*")
#: The longest host list ppspec reads: SLURM's compressed form of a 10,000-node allocation is far
#: shorter; 64 KiB is the bound the environment reader already gives a variable.
NODELIST_MAX = 65536


def _slurm_int(environ: Mapping[str, str], *names: str) -> int:
    for n in names:
        v = environ.get(n)
        if v is not None:
            if not re.fullmatch(r"[0-9]{1,6}", v):  # ASCII digits only: str.isdigit() takes '²' and '٣'
                raise PpspecError(
                    f"{n}={v[:40]!r} in the environment is not a node number",
                    where=n,
                    fix="run inside a SLURM allocation (srun/sbatch set it), or unset SLURM_JOB_ID",
                    exit_code=2,
                )
            return int(v)
    raise PpspecError(
        f"SLURM_JOB_ID is set but {names[0]} is not",
        where=names[0],
        fix="start each node with `srun` (it sets the node variables), or pass --node-rank and --master-addr",
        exit_code=1,
    )


def slurm_from_env(environ: Mapping[str, str]) -> Slurm | None:
    """The allocation, or None outside SLURM (no SLURM_JOB_ID)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
    if not nodelist:
        raise PpspecError(
            "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is not",
            where="SLURM_JOB_NODELIST",
            fix="run inside a SLURM allocation, or pass --master-addr",
            exit_code=1,
        )
    if len(nodelist) > NODELIST_MAX or not _NODELIST.fullmatch(nodelist):
        raise PpspecError(
            f"SLURM_JOB_NODELIST={nodelist[:40]!r} in the environment is not a SLURM host list",
            where="SLURM_JOB_NODELIST",
            fix="run inside a SLURM allocation (it sets e.g. `node[01-04]`), or pass --master-addr",
            exit_code=2,
        )
    s = Slurm(
        job_id=job[:64],
        node_id=_slurm_int(environ, "SLURM_NODEID"),
        nnodes=_slurm_int(environ, "SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
        nodelist=nodelist,
    )
    if s.node_id >= s.nnodes:
        raise PpspecError(
            f"SLURM_NODEID={s.node_id} is not a node of this {s.nnodes}-node allocation (0..{s.nnodes - 1})",
            where="SLURM_NODEID",
            fix="start each node with `srun` inside the allocation (it sets SLURM_NODEID), or pass --node-rank",
            exit_code=2,
        )
    return s


def slurm_hostnames(nodelist: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """`scontrol show hostnames NODELIST`: the allocation's hosts in SLURM's order (bounded, with a deadline)."""
    fix = "run `ppspec serve` where SLURM's `scontrol` works (a node of the allocation), or pass --master-addr"
    try:
        out = spawn.run(  # fixed argv, no shell
            ["scontrol", "show", "hostnames", nodelist],
            check=False,
            capture_output=True,
            timeout=SCONTROL_TIMEOUT_S,
            env=None if environ is None else dict(environ),
            stdin=spawn.DEVNULL,
        )
    except FileNotFoundError:
        raise PpspecError(
            "SLURM_JOB_NODELIST is set but `scontrol` is not on PATH", where="scontrol", fix=fix, exit_code=1
        ) from None
    except spawn.TimeoutExpired:
        raise PpspecError(
            f"`scontrol show hostnames` did not answer within {SCONTROL_TIMEOUT_S:.0f}s",
            where="scontrol",
            fix=fix,
            exit_code=1,
        ) from None
    except OSError as e:
        raise PpspecError(f"cannot run `scontrol`: {e.strerror or e}", where="scontrol", fix=fix, exit_code=1) from None
    if out.returncode != 0:
        raise PpspecError(
            f"`scontrol show hostnames` failed with exit code {out.returncode}", where="scontrol", fix=fix, exit_code=1
        )
    text = out.stdout[:_SCONTROL_MAX_BYTES].decode("utf-8", "replace")
    return [h.strip() for h in text.splitlines() if h.strip()]


@dataclass
class Placement:
    """What the command line and SLURM decided for this process."""

    node_rank: int | None  # None: not decided (dry run of every node)
    run_dir: Path | None  # None: the default run directory
    notes: list[str] = field(default_factory=list)  # one line each, printed as progress
    net: NodeNet | None = None  # this node's interface/address for vLLM's process groups (multi-node mp)


#: What ppspec sets from the route to the head, on every node of a multi-node `mp` launch, unless the
#: profile's `env:` sets it: Gloo (CPU process groups) and NCCL bind and advertise this interface;
#: vLLM's message queues and its own address use VLLM_HOST_IP. Without them Gloo takes the address
#: the host name resolves to, which a stock /etc/hosts maps to 127.0.1.1.
NET_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP")


def node_net_env(net: NodeNet | None, profile_env: Mapping[str, str]) -> dict[str, str]:
    """The variables of NET_ENV this node gets: from `net`, except those the profile sets."""
    if net is None:
        return {}
    out = {}
    if net.ifname:
        out["GLOO_SOCKET_IFNAME"] = out["NCCL_SOCKET_IFNAME"] = net.ifname
    if net.addr:
        out["VLLM_HOST_IP"] = net.addr
    return {k: v for k, v in out.items() if k not in profile_env}


def place(
    profile: Profile,
    *,
    master_addr: str | None = None,
    master_port: int | None = None,
    host: str | None = None,
    node_rank: int | None = None,
    run_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
    launching: bool = False,
) -> tuple[Profile, Placement]:
    """The profile with the command line's and SLURM's values filled in, and this node's placement.
    On a node of a multi-node `mp` launch (node rank known) the interface and address towards the
    head are added to the profile's env (node_net_env). `launching`: a real start (not a dry run of
    every node): without a rank from the command line or SLURM, this is node 0."""
    environ = env_io.snapshot() if environ is None else environ
    launch: dict = {}
    server: dict = {}
    notes: list[str] = []
    if master_addr is not None:
        launch["master_addr"] = check_host(master_addr, "--master-addr")
    if master_port is not None:
        launch["master_port"] = master_port
    if host is not None:
        server["host"] = check_host(host, "--host")
    t = profile.topology
    rd = Path(run_dir) if run_dir else None
    slurm = slurm_from_env(environ) if t.nodes > 1 else None
    if slurm is not None:
        if slurm.nnodes != t.nodes:
            raise PpspecError(
                f"the SLURM allocation has {slurm.nnodes} node(s) but the profile's topology.nodes is {t.nodes}",
                where="topology.nodes",
                fix=f"allocate {t.nodes} nodes (sbatch --nodes={t.nodes}; `ppspec export slurm PROFILE` writes the script) or change topology.nodes",
                exit_code=1,
            )
        if node_rank is None:
            node_rank = slurm.node_id
            notes.append(f"node rank {node_rank} from SLURM_NODEID")
        if "master_addr" not in launch and not profile.launch.master_addr:
            hosts = slurm_hostnames(slurm.nodelist, environ)
            if len(hosts) != slurm.nnodes:
                raise PpspecError(
                    f"`scontrol show hostnames` listed {len(hosts)} host(s) for a {slurm.nnodes}-node allocation",
                    where="SLURM_JOB_NODELIST",
                    fix="pass the head node's address with --master-addr",
                    exit_code=1,
                )
            launch["master_addr"] = check_host(hosts[0], "SLURM_JOB_NODELIST")
            notes.append(f"head node {hosts[0]} (the first host of SLURM_JOB_NODELIST)")
    if launching and node_rank is None and t.nodes > 1:
        node_rank = 0  # `serve` without --node-rank (and outside SLURM) starts the head
    if rd is None and node_rank is not None and t.nodes > 1:
        from ppspec_cli.running.launch import node_run_dir

        rd = node_run_dir(profile.name, node_rank, slurm.job_id if slurm is not None else None)
    if launch:
        profile = profile.model_copy(update={"launch": profile.launch.model_copy(update=launch)})
    net = None
    head = profile.launch.master_addr
    if t.nodes > 1 and profile.launch.executor == "mp" and node_rank is not None and head:
        from ppspec_cli.io import netinfo

        net = netinfo.pick(head, is_head=node_rank == 0)
        add = node_net_env(net, profile.env)
        if add:
            profile = profile.model_copy(update={"env": {**profile.env, **add}})
            notes.append(f"{', '.join(f'{k}={v}' for k, v in add.items())}: {net.how}")
        elif not net.ifname:
            notes.append(f"no interface chosen for vLLM's process groups: {net.how}")
    if server:
        profile = profile.model_copy(update={"server": profile.server.model_copy(update=server)})
    return profile, Placement(node_rank=node_rank, run_dir=rd, notes=notes, net=net)
