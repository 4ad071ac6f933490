"""Start what an Outcome says to start: this node's engine, supervised (supervise.run_engine),
after the checks only a start makes: the run directory free, the port free, the Ray cluster there,
the `demo:` models built, the multi-node roll call. `serve` and `bench` call `start`; everything
before it (the facts, the verdict, the launch) is the Outcome's."""

from __future__ import annotations

from typing import Callable

from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.planning.profile import Profile


def build_demo_models(p: Profile, progress: Callable[[str], None]) -> None:
    """Build the profile's `demo:` models the launch names (once; cached): the one place a run builds
    weights. check, plan, --predict, the dry run and the exports read their description instead."""
    from ppspec_cli import demo

    for ref in (p.target.model, p.drafter.model if p.drafter else None):
        if ref and demo.is_demo_ref(ref):
            demo.ensure_demo_model(ref, progress=progress)


def start(
    outcome,
    *,
    progress: Callable[[str], None],
    health_timeout: float | None = None,
    workload=None,
    stream: bool = True,
    verify_line: str | None = None,
    verbose: bool = False,
):
    """Start and supervise the engine of an Outcome that is not refused here (operation.run with a
    `serve` or `bench` Operation): its ServeResult. The checks only a start makes: run directory
    and port free, Ray cluster, warnings printed, multi-node roll call."""
    from ppspec_cli.running.serve import port_free, run_engine
    from ppspec_cli.running.serve.supervise import Supervision

    r, spec, node = outcome.resolved, outcome.launch, outcome.node
    assert r is not None and spec is not None and node is not None and not outcome.refused
    timeout_s = health_timeout or r.profile.launch.health_timeout_s
    t = r.profile.topology
    from ppspec_cli.running.serve.rundir import in_use_by

    holder = in_use_by(spec.run_dir)  # before the port: the same serve holds both, and the run dir is what to change
    if holder is not None:
        raise PpspecError(
            f"{holder} is using the run directory {spec.run_dir}",
            where="--run-dir",
            fix="stop that server first, or give this one its own --run-dir (multi-node profiles get one per host "
            "and node by default)",
            exit_code=EXIT_REFUSED,
        )
    if node.role == "head" and not port_free(r.profile.server.host, r.profile.server.port):
        raise PpspecError(
            f"port {r.profile.server.port} on {r.profile.server.host} is already in use",
            where="server.port",
            fix="stop the other server or set server.port to a free port",
            exit_code=EXIT_REFUSED,
        )
    if r.profile.launch.executor == "ray" and node.role == "head":
        _check_ray(t.tensor_parallel * t.pipeline_parallel * t.data_parallel)
    for f in outcome.judgment.findings + outcome.judgment.here:
        if f.severity == "warning":
            progress(f"warning {f.code}: {f.message}")
    build_demo_models(r.profile, progress)
    roll = _roll_call(r.profile, node, timeout_s)
    try:
        run = Supervision(
            health_timeout_s=timeout_s,
            drafter_revision=r.profile.drafter.revision if r.profile.drafter else None,
            log=progress,
            roll=roll,
            verify_line=verify_line,
            stream=stream,
            workload=workload,
            verbose=verbose,
        )
        return run_engine(spec, node, run)
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
            exit_code=EXIT_REFUSED,
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
            exit_code=EXIT_REFUSED,
        )
