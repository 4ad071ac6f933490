"""Gather: the only I/O of a run. From an Operation it reads, once, everything the judge needs:
the profile as written, its checkpoints' metadata, the installed vLLM (and, where it serves the
profile, its architecture table read by value), the caller's environment, the placement the
command line and SLURM give, this host's name and network view, the `vllm` command and the runs
directory; and, only when the operation asks for them, the installed parser's option names and the
behaviour probes' findings (`engine_answers`). Terraform's backend gathers the context once and
hands it to a pure core; this is that step (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ppspec_cli.checkpoint.reader import load_checkpoint
from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.findings import Finding, guard
from ppspec_cli.findings.codes import PROBE_CRASHED
from ppspec_cli.io import env as env_io
from ppspec_cli.io import netinfo
from ppspec_cli.knowledge import archtable
from ppspec_cli.knowledge.engine import VllmInstall, installed_vllm, serve_option_names, vllm_executable
from ppspec_cli.operation.operation import Operation
from ppspec_cli.planning import profile as profiles
from ppspec_cli.planning.facts import CheckpointRead, Facts, HostView, Ref, serves
from ppspec_cli.planning.pd import role_profile
from ppspec_cli.planning.placement import Slurm, head_address, node_of
from ppspec_cli.planning.profile import ROLES, Profile
from ppspec_cli.planning.resolve import Resolved
from ppspec_cli.running.cluster import slurm_from_env, slurm_hostnames
from ppspec_cli.running.serve.rundir import runs_root

#: The operations that place a node: they read SLURM and this node's route towards the head.
PLACING = ("serve", "dry_run", "bench")
#: `gather_facts(install=HERE)`: read the vLLM installed here (a test passes the install it judges on).
HERE = object()


def gather_facts(
    op: Operation,
    progress: Callable[[str], None] | None = None,
    *,
    install: VllmInstall | None | object = HERE,
    environ: Mapping[str, str] | None = None,
) -> Facts:
    """The facts of `op` (module doc). Raises PpspecError only for what no verdict can be given on:
    an unreadable profile, a SLURM environment that is not one, a placement argument that is not a
    host; a checkpoint that cannot be read is a fact (its finding comes from the judge). `install`
    and `environ` stand for this machine's where a caller (a test) judges on others."""
    profile = op.profile if op.profile is not None else profiles.load_profile(op.profile_path)
    if op.hardware is not None:  # --hardware over the profile's own `hardware:`
        profile = profile.model_copy(update={"hardware": op.hardware})
    environ = env_io.snapshot() if environ is None else dict(environ)
    install = installed_vllm() if install is HERE else install
    assert install is None or isinstance(install, VllmInstall)
    engine = _engine_table(profile, install)
    placed = _placed_profile(profile, op)
    slurm = _slurm(placed, op, environ)
    node = node_of(placed, op.placement, slurm)
    return Facts(
        profile=profile,
        profile_path=op.profile_path,
        checkpoints=_checkpoints(profile, op, progress),
        install=install,
        environ=environ,
        host=_host_view(profile, op, slurm),
        run_root=runs_root(),
        executable=vllm_executable() if op.kind not in ("check", "plan") else "vllm",
        engine_table=engine,
        placement=op.placement,
        slurm=slurm,
        node_net=netinfo.pick(node.head, is_head=node.rank == 0)
        if node.wants_net and node.head and op.kind in PLACING and not placed.disaggregated
        else None,
    )


def engine_answers(facts: Facts, r: Resolved | None, *, probes: bool) -> Facts:
    """`facts` with what the installed engine itself answers: its parser's option names (seconds the
    first time: then cached per install), and with `probes` its behaviour probes' findings for the
    engine `r` (check --probes; in the engine processes `serve` starts, the plugin asserts them)."""
    names = serve_option_names()
    found = _probe_findings(r) if probes and r is not None and r.vllm is not None else None
    return replace(facts, option_names=names, probe_findings=found)


def _engine_table(profile: Profile, install) -> archtable.ArchTable | Exception | None:
    """The installed engine's architecture table, where it serves the profile's platform; a broken
    table or a source the scanner cannot read is kept as the error (the verdict then says unknown)."""
    if not serves(profile.platform, install):
        return None
    try:
        return archtable.engine_table(install)
    except Exception as e:  # noqa: BLE001 - a damaged table or a fork's source the walker cannot read: unknown
        return e


def _refs(profile: Profile) -> list[Ref]:
    refs: list[Ref] = [(profile.target.model, profile.target.revision)]
    if profile.drafter is not None and profile.drafter.model:
        refs.append((profile.drafter.model, profile.drafter.revision))
    return refs


def _checkpoints(profile: Profile, op: Operation, progress) -> dict[Ref, CheckpointRead]:
    """Every model reference the profile names, read once (the roles of a disaggregated profile
    share them); relative paths against the profile's folder."""
    base = Path(op.profile_path).resolve().parent if op.profile_path else None
    out: dict[Ref, CheckpointRead] = {}
    for ref in _refs(profile):
        if ref in out:
            continue
        try:
            ck = load_checkpoint(
                ref[0], ref[1], offline=op.offline, base_dir=base, read_headers=op.read_headers, progress=progress
            )
            out[ref] = CheckpointRead(ck)
        except PpspecError as e:
            out[ref] = CheckpointRead(None, e)
    return out


def _placed_profile(profile: Profile, op: Operation) -> Profile:
    """The single-engine profile this process would place (a role's, of a disaggregated profile)."""
    if op.role is not None and profile.disaggregated and op.role in ROLES:
        return role_profile(profile, op.role)
    return profile


def _slurm(profile: Profile, op: Operation, environ) -> Slurm | None:
    """The SLURM allocation, for an operation that places a node of a multi-node profile (an export
    is for the scheduler to fill in; a disaggregated dry run without --role places no node)."""
    if op.kind not in PLACING or profile.topology.nodes < 2 or profile.disaggregated:
        return None
    s = slurm_from_env(environ)
    if s is None:
        return None
    if s.nnodes == profile.topology.nodes and op.placement.master_addr is None and not profile.launch.master_addr:
        hosts = slurm_hostnames(s.nodelist, environ)  # (an allocation of another size is refused by the placement)
        if len(hosts) != s.nnodes:
            raise PpspecError(
                f"`scontrol show hostnames` listed {len(hosts)} host(s) for a {s.nnodes}-node allocation",
                where="SLURM_JOB_NODELIST",
                fix="pass the head node's address with --master-addr",
                exit_code=EXIT_REFUSED,
            )
        s = replace(s, hosts=tuple(hosts))
    return s


def _host_view(profile: Profile, op: Operation, slurm: Slurm | None) -> HostView:
    """This host's name; for a multi-node `mp` engine (a disaggregated profile's roles each) also
    what the name resolves to and the route towards each head (the `here` question's network rules:
    DNS and routes are asked here only)."""
    me = netinfo.host_name()
    engines = [role_profile(profile, x) for x in ROLES] if profile.disaggregated else [profile]
    multi = [p for p in engines if p.topology.nodes > 1 and p.launch.executor == "mp"]
    if not multi or op.kind == "export":
        return HostView(me)
    own = tuple(netinfo.resolve(me) or ())
    routes = {}
    for p in multi:
        head = head_address(p, op.placement, slurm)
        if head and not head.endswith(".invalid") and head not in routes:
            addrs = netinfo.resolve(head) or []
            here = bool(addrs) and all(
                netinfo.is_loopback(a) or ((rt := netinfo.route_to(a)) is not None and rt.local) for a in addrs
            )
            routes[head] = netinfo.pick(head, is_head=here)
    return HostView(me, own, routes)


def _probe_findings(r: Resolved) -> tuple[Finding, ...]:
    """The installed engine's behaviour probes (running/engine/probes.py) as findings, in the guard."""
    from ppspec_cli.running.engine import probes as probes_mod

    out: list[Finding] = []
    with guard(out, "the engine probes", code=PROBE_CRASHED, field="platform", fix="run with --no-probes; report this"):
        names = r.drafter.tensor_names() if r.drafter is not None else None
        results = probes_mod.run_probes(
            target_arch=r.target.architectures[0] if r.target and r.target.architectures else None,
            method=r.method,
            num_layers=r.target.num_layers if r.target else None,
            pp=r.pp,
            partition=list(r.plan.partition) if r.plan else None,
            drafter_config=r.drafter_view,
            pack=r.pack,
            family=r.family,
            drafter_has_embed=None if names is None else any(x.endswith("embed_tokens.weight") for x in names),
        )
        out.extend(f for f in (p.finding() for p in results) if f is not None)
    return tuple(out)
