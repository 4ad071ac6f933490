"""Where one node of a launch stands, decided purely from what was gathered: the head's address,
port and bind host given on the command line, and, inside a SLURM allocation, the head and this
node's rank as SLURM says (operation/gather.py reads the allocation and the routes; nothing here
does I/O). Precedence: command line > profile > SLURM.

`place` gives the profile the launch runs (the head address filled in, the interface variables of
a multi-node `mp` node added to its env) and the node's placement; the profile as written is kept
by the facts, and the verdict judges the placed one, so `check`, `serve`, its dry run and the
exports see the same values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ppspec_cli.errors import EXIT_REFUSED, EXIT_USAGE, PpspecError
from ppspec_cli.io.netinfo import NodeNet
from ppspec_cli.planning.profile import Profile

#: A host name, or an IPv4 / IPv6 address: what may stand for a node in argv, scripts and manifests.
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
_IPV6 = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")

#: What ppspec sets from the route to the head, on every node of a multi-node `mp` launch, unless the
#: profile's `env:` sets it: Gloo (CPU process groups) and NCCL bind and advertise this interface;
#: vLLM's message queues and its own address use VLLM_HOST_IP. Without them Gloo takes the address
#: the host name resolves to, which a stock /etc/hosts maps to 127.0.1.1.
NET_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP")


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
        exit_code=EXIT_USAGE,
    )


@dataclass(frozen=True)
class PlacementArgs:
    """The command line's placement: `--master-addr`, `--master-port`, `--host`, `--node-rank`,
    `--run-dir`; `launching`: a real start (not a dry run of every node)."""

    master_addr: str | None = None
    master_port: int | None = None
    host: str | None = None
    node_rank: int | None = None
    run_dir: str | None = None
    launching: bool = False


@dataclass(frozen=True)
class Slurm:
    """The SLURM allocation this process runs in (from the variables srun/sbatch set)."""

    job_id: str
    node_id: int  # this node's index in the allocation (SLURM_NODEID), 0 = first host of the node list
    nnodes: int  # SLURM_JOB_NUM_NODES / SLURM_NNODES
    nodelist: str  # SLURM_JOB_NODELIST, compressed form (`node[01-04]`)
    hosts: tuple[str, ...] | None = None  # `scontrol show hostnames`, when the head is SLURM's to name


@dataclass(frozen=True)
class Placement:
    """What the command line and SLURM decided for this process."""

    node_rank: int | None  # None: not decided (dry run of every node)
    run_dir: Path | None  # None: the default run directory
    notes: tuple[str, ...] = ()  # one line each, printed as progress
    net: NodeNet | None = None  # this node's interface/address for vLLM's process groups (multi-node mp)


def node_run_dir(run_root: Path, host: str, profile_name: str, node_rank: int, job: str | None = None) -> Path:
    """The default run directory of node `node_rank` of a multi-node profile on host `host`: homes
    are usually shared between a cluster's nodes (NFS), so each host and node rank (and SLURM job)
    gets its own, and the nodes' locks and plan files never collide."""
    leaf = f"{host}-node{node_rank}"
    return (
        run_root
        / profile_name
        / (f"slurm-{re.sub(r'[^A-Za-z0-9_.-]', '_', job)[:64] or 'job'}-{leaf}" if job else leaf)
    )


def head_address(profile: Profile, args: PlacementArgs, slurm: Slurm | None) -> str | None:
    """The head's address after the command line, the profile and SLURM (in that order)."""
    if args.master_addr is not None:
        return check_host(args.master_addr, "--master-addr")
    if profile.launch.master_addr:
        return profile.launch.master_addr
    if slurm is not None and slurm.hosts:
        return check_host(slurm.hosts[0], "SLURM_JOB_NODELIST")
    return None


def node_rank(profile: Profile, args: PlacementArgs, slurm: Slurm | None) -> int | None:
    """This process's node rank: the command line's, else SLURM's, else 0 for a real start of a
    multi-node profile (`serve` without --node-rank starts the head), else undecided."""
    if args.node_rank is not None:
        return args.node_rank
    if slurm is not None:
        return slurm.node_id
    return 0 if args.launching and profile.topology.nodes > 1 else None


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
    args: PlacementArgs,
    slurm: Slurm | None,
    net: NodeNet | None,
    *,
    run_root: Path,
    host: str,
) -> tuple[Profile, Placement]:
    """The profile with the command line's and SLURM's values filled in, and this node's placement.
    On a node of a multi-node `mp` launch (node rank known) the interface and address towards the
    head (`net`, gathered) are added to the profile's env (node_net_env)."""
    t = profile.topology
    notes: list[str] = []
    launch: dict = {}
    if args.master_port is not None:
        launch["master_port"] = args.master_port
    if slurm is not None:
        if slurm.nnodes != t.nodes:
            raise PpspecError(
                f"the SLURM allocation has {slurm.nnodes} node(s) but the profile's topology.nodes is {t.nodes}",
                where="topology.nodes",
                fix=f"allocate {t.nodes} nodes (sbatch --nodes={t.nodes}; `ppspec export slurm PROFILE` writes the "
                "script) or change topology.nodes",
                exit_code=EXIT_REFUSED,
            )
        if args.node_rank is None:
            notes.append(f"node rank {slurm.node_id} from SLURM_NODEID")
    head = head_address(profile, args, slurm)
    if head is not None and head != profile.launch.master_addr:
        launch["master_addr"] = head
        if args.master_addr is None and slurm is not None and slurm.hosts:
            notes.append(f"head node {slurm.hosts[0]} (the first host of SLURM_JOB_NODELIST)")
    rank = node_rank(profile, args, slurm)
    rd = Path(args.run_dir) if args.run_dir else None
    if rd is None and rank is not None and t.nodes > 1:
        rd = node_run_dir(run_root, host, profile.name, rank, slurm.job_id if slurm is not None else None)
    if launch:
        profile = profile.model_copy(update={"launch": profile.launch.model_copy(update=launch)})
    if net is not None:
        add = node_net_env(net, profile.env)
        if add:
            profile = profile.model_copy(update={"env": {**profile.env, **add}})
            notes.append(f"{', '.join(f'{k}={v}' for k, v in add.items())}: {net.how}")
        elif not net.ifname:
            notes.append(f"no interface chosen for vLLM's process groups: {net.how}")
    if args.host is not None:
        server = profile.server.model_copy(update={"host": check_host(args.host, "--host")})
        profile = profile.model_copy(update={"server": server})
    return profile, Placement(node_rank=rank, run_dir=rd, notes=tuple(notes), net=net)


@dataclass(frozen=True)
class Node:
    """What the gatherer needs to know of this node before it reads the network: the head's address,
    this node's rank, and whether its interface towards the head is wanted (a node of a multi-node
    `mp` launch whose rank and head are known)."""

    head: str | None
    rank: int | None
    wants_net: bool


def node_of(profile: Profile, args: PlacementArgs, slurm: Slurm | None) -> Node:
    head, rank = head_address(profile, args, slurm), node_rank(profile, args, slurm)
    multi = profile.topology.nodes > 1 and profile.launch.executor == "mp"
    return Node(head, rank, multi and rank is not None and bool(head))
