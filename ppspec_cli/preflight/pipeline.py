"""What `serve`, `serve --dry-run`, `export` and `bench` share below the commands: place the
profile (the command line's and the scheduler's placement), run the one preflight, and, for a
launch, build it and start it. Commands render what this returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ppspec_cli.errors import PpspecError
from ppspec_cli.preflight.core import Preflight, launch_findings, preflight
from ppspec_cli.preflight.verdict import Verdict


def placed(
    prof,
    profile_path: str,
    offline: bool,
    node_rank,
    run_dir,
    where: dict,
    progress: Callable[[str], None],
    environ=None,
    role=None,
    launching=False,
):
    """One engine's profile (a role's of a disaggregated one) with the command line's and SLURM's
    placement filled in (cluster.place), resolved: (resolved, placement)."""
    from ppspec_cli.planning.pd import role_profile
    from ppspec_cli.planning.resolve import resolve
    from ppspec_cli.running.cluster import place

    if role is not None:
        prof = role_profile(prof, role)
    prof, placement = place(prof, node_rank=node_rank, run_dir=run_dir, environ=environ, launching=launching, **where)
    for note in placement.notes:
        progress(note)
    return resolve(prof, profile_path=profile_path, offline=offline, progress=progress), placement


@dataclass(frozen=True)
class Checked:
    """A placed profile and its preflight: what a dry run, an export or a launch renders."""

    preflight: Preflight
    resolved: object  # planning.resolve.Resolved: the engine placed for this node (or the export)
    placement: object  # running.cluster.Placement

    @property
    def profile(self) -> Verdict:
        return self.preflight.profile_verdict

    @property
    def here(self) -> Verdict:
        return self.preflight.here_verdict


def checked(
    prof,
    profile_path: str,
    *,
    offline: bool,
    node_rank=None,
    run_dir=None,
    where: dict,
    progress: Callable[[str], None],
    role=None,
    launching=False,
    environ=None,
) -> Checked:
    """Place, resolve and run the preflight (a role's engine: the P/D rules over both engines)."""
    r, placement = placed(
        prof,
        profile_path,
        offline,
        node_rank,
        run_dir,
        where,
        progress,
        environ=environ,
        role=role,
        launching=launching,
    )
    if role is not None:
        pf = preflight(prof, profile_path, offline=offline, given={role: r}, progress=progress)
    else:
        pf = preflight(prof, profile_path, offline=offline, resolved=r, progress=progress)
    return Checked(pf, r, placement)


@dataclass(frozen=True)
class DryRun:
    """What `serve --dry-run` prints: the preflight as `serve` would have it here (its option names
    checked when nothing else refuses), the placed engine, its launch, the node asked for."""

    preflight: Preflight
    resolved: object
    spec: object  # running.launch.LaunchSpec
    node_rank: int | None


def dry_run(
    prof, profile: str, *, offline: bool, node_rank, run_dir, where: dict, progress: Callable[[str], None], role=None
) -> DryRun:
    from ppspec_cli.running.launch import build_launch

    c = checked(
        prof, profile, offline=offline, node_rank=node_rank, run_dir=run_dir, where=where, progress=progress, role=role
    )
    pf = (
        launch_findings(c.preflight) if c.here.ok else c.preflight
    )  # as `serve` does: the dry run's `ok` is serve's answer
    spec = build_launch(c.resolved, run_dir=c.placement.run_dir)
    node_rank_in_range(c.resolved, c.placement.node_rank)
    return DryRun(pf, c.resolved, spec, c.placement.node_rank)


@dataclass(frozen=True)
class PdDryRun:
    """`serve --dry-run` of a disaggregated profile: both engines' launches and the router."""

    preflight: Preflight
    specs: dict  # role -> running.launch.LaunchSpec
    router: str
    script: str


def pd_dry_run(
    prof, profile_path: str, *, offline: bool, run_dir, where: dict, progress: Callable[[str], None]
) -> PdDryRun:
    from pathlib import Path

    from ppspec_cli.planning.pd import router_command
    from ppspec_cli.running.launch import build_launch

    given = {
        role: placed(prof, profile_path, offline, None, None, where, progress, environ={}, role=role)[0]
        for role in ("prefill", "decode")
    }
    pf = preflight(prof, profile_path, offline=offline, given=given, progress=progress)
    if pf.here_verdict.ok:
        pf = launch_findings(pf)
    d = pf.deployment
    specs = {role: build_launch(r, run_dir=Path(run_dir) / role if run_dir else None) for role, r in d.roles.items()}
    router, script = router_command(d)
    return PdDryRun(pf, specs, router, script)


@dataclass(frozen=True)
class Prepared:
    """A profile checked and placed for launch on this node: what `launch` starts."""

    profile_path: str
    prof: object  # the profile as loaded (planning.profile.Profile), before placement
    r: object  # planning.resolve.Resolved
    spec: object  # running.launch.LaunchSpec
    node: object  # running.launch.NodeLaunch
    findings: list
    timeout_s: float


@dataclass(frozen=True)
class Refused:
    """`serve` would not start this here: the resolved engine and the verdict that says why."""

    r: object
    verdict: Verdict


def node_rank_in_range(r, node_rank) -> None:
    t = r.profile.topology
    if node_rank is not None and not (0 <= node_rank < t.nodes):
        raise PpspecError(
            f"--node-rank {node_rank} is outside 0..{t.nodes - 1}",
            where="--node-rank",
            fix=f"the profile has {t.nodes} node(s)",
        )


def prepare(
    prof,
    profile: str,
    *,
    progress: Callable[[str], None],
    offline: bool = False,
    node_rank=None,
    run_dir=None,
    health_timeout=None,
    where: dict | None = None,
    role=None,
) -> Prepared | Refused:
    """Everything `serve` does before it starts the engine: place, preflight, the here-verdict
    (Refused: render it), build the launch. `prof`: the loaded profile, or a changed copy of it
    (`ppspec bench`'s arms); the file `profile` anchors relative paths and messages."""
    from ppspec_cli.running.launch import build_launch

    where = where or {"master_addr": None, "master_port": None, "host": None}
    c = checked(
        prof,
        profile,
        offline=offline,
        node_rank=node_rank,
        run_dir=run_dir,
        where=where,
        progress=progress,
        role=role,
        launching=True,
    )
    pf = c.preflight
    if c.here.ok:
        pf = launch_findings(pf)  # the installed parser's option names: only when nothing else refuses (seconds)
    v = pf.here_verdict
    if not v.ok:
        return Refused(c.resolved, v)
    r = c.resolved
    spec = build_launch(r, run_dir=c.placement.run_dir)
    node_rank_in_range(r, c.placement.node_rank)
    return Prepared(
        profile,
        prof,
        r,
        spec,
        spec.nodes[c.placement.node_rank or 0],
        list(pf.findings + pf.here),
        health_timeout or r.profile.launch.health_timeout_s,
    )


def launch(
    p: Prepared,
    *,
    progress: Callable[[str], None],
    workload=None,
    stream: bool = True,
    verify_line: str | None = None,
    verbose: bool = False,
):
    """Start and supervise the prepared engine (supervise.run_engine): its ServeResult. The same
    pre-launch checks as `serve`: port free, Ray cluster, warnings printed, multi-node roll call."""
    from ppspec_cli.running.launch import build_demo_models
    from ppspec_cli.running.serve import port_free, run_engine

    r, spec, node = p.r, p.spec, p.node
    t = r.profile.topology
    from ppspec_cli.running.serve.rundir import in_use_by

    holder = in_use_by(spec.run_dir)  # before the port: the same serve holds both, and the run dir is what to change
    if holder is not None:
        raise PpspecError(
            f"{holder} is using the run directory {spec.run_dir}",
            where="--run-dir",
            fix="stop that server first, or give this one its own --run-dir (multi-node profiles get one per host and node by default)",
            exit_code=1,
        )
    if node.role == "head" and not port_free(r.profile.server.host, r.profile.server.port):
        raise PpspecError(
            f"port {r.profile.server.port} on {r.profile.server.host} is already in use",
            where="server.port",
            fix="stop the other server or set server.port to a free port",
            exit_code=1,
        )
    if r.profile.launch.executor == "ray" and node.role == "head":
        _check_ray(t.tensor_parallel * t.pipeline_parallel * t.data_parallel)
    for f in p.findings:
        if f.severity == "warning":
            progress(f"warning {f.code}: {f.message}")
    build_demo_models(r.profile, progress)
    roll = _roll_call(r.profile, node, p.timeout_s)
    try:
        return run_engine(
            spec,
            node,
            health_timeout_s=p.timeout_s,
            drafter_revision=r.profile.drafter.revision if r.profile.drafter else None,
            log=progress,
            roll=roll,
            verify_line=verify_line,
            stream=stream,
            workload=workload,
            verbose=verbose,
        )
    finally:
        if roll is not None:
            roll.close()


def _roll_call(prof, node, timeout_s: float):
    """Multi-node `mp`: the head listens for the other nodes' ppspec (rollcall.py); a worker joins
    it while its engine starts. None for one node or Ray."""
    if prof.topology.nodes < 2 or prof.launch.executor != "mp":
        return None
    from ppspec_cli.running.rollcall import Head, Worker, rollcall_port

    addr, port = prof.launch.master_addr, rollcall_port(prof.launch.master_port)
    if node.role == "head":
        return Head(prof.topology.nodes, addr, port)
    w = Worker(node.node_rank, prof.topology.nodes, addr, port)
    w.start(timeout_s)
    return w


def _check_ray(world: int) -> None:
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise PpspecError(
            "launch.executor is `ray` but Ray is not installed",
            where="launch.executor",
            fix="pip install ray, start the cluster (`ray start --head`), or use executor: mp",
        ) from None
    try:
        ray.init(address="auto", logging_level="ERROR")
        gpus = int(ray.cluster_resources().get("GPU", 0))
    except Exception as e:  # noqa: BLE001
        raise PpspecError(
            f"no running Ray cluster reachable ({type(e).__name__})",
            where="launch.executor",
            fix="start it with `ray start --head` on the head node and `ray start --address HEAD:6379` on the others",
            exit_code=1,
        ) from None
    finally:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
    if gpus < world:
        raise PpspecError(
            f"the Ray cluster has {gpus} GPU(s) but the profile needs {world}",
            where="topology",
            fix="add nodes to the cluster or shrink the topology",
            exit_code=1,
        )
