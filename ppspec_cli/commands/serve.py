"""`ppspec serve`: check, place, launch and supervise one node's engine; or print every node's
launch (`--dry-run`), both engines' for a disaggregated profile."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from ppspec_cli.commands.common import progress
from ppspec_cli.errors import PpspecError
from ppspec_cli.io import shellout


def run(profile: str, dry_run: bool, node_rank, json_out: bool, offline: bool, run_dir, health_timeout, where: dict, role=None, verbose: bool = False) -> int:
    """`ppspec serve` (or its dry run): the exit code (documented in cli.py's serve)."""
    if role is not None and role not in ("prefill", "decode"):
        raise PpspecError(f"--role {role[:40]!r} is not a role", where="--role", fix="use --role prefill or --role decode")
    if dry_run:
        return _serve(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role)
    return _with_signals(lambda: _serve(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role, verbose))


class _Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP before the engine supervisor took over. A BaseException, so no
    `except Exception` on the way (vLLM's import, the probes) can swallow it and launch anyway."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _with_signals(fn) -> int:
    """Run `serve` so that a stop signal before the engine starts ends it cleanly: nothing has been
    launched then, so the message says so and the exit code is 128+N (130 Ctrl-C, 143 SIGTERM)."""
    import signal

    def _raise(signum, _frame):
        raise _Interrupted(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, _raise) for s in sigs}
    try:
        return fn()
    except _Interrupted as e:
        progress(f"interrupted by {signal.Signals(e.signum).name} before the engine started: nothing was launched")
        return 128 + e.signum
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def placed(prof, profile_path: str, offline: bool, node_rank, run_dir, where: dict, environ=None, role=None, launching=False):
    """Load the profile (one role's engine of a disaggregated one), fill in the command line's and
    SLURM's placement (cluster.place), resolve."""
    from ppspec_cli.running.cluster import place
    from ppspec_cli.planning.pd import role_profile
    from ppspec_cli.planning.resolve import resolve

    if role is not None:
        prof = role_profile(prof, role)
    prof, placement = place(prof, node_rank=node_rank, run_dir=run_dir, environ=environ, launching=launching, **where)
    for note in placement.notes:
        progress(note)
    return resolve(prof, profile_path=profile_path, offline=offline, progress=progress), placement


def _verify_line(prof, profile: str, url: str) -> str:
    """The `ppspec verify` command for the server being started, pasteable from any directory (the
    profile's absolute path), with --endpoint when the server is not where the profile file alone
    points verify (--host, a role's own server)."""
    from ppspec_cli.verify.client import endpoint_from_host_port, normalize_endpoint

    top = prof.server
    args = ["verify", os.path.abspath(profile)]
    if normalize_endpoint(endpoint_from_host_port(top.host, top.port)) != normalize_endpoint(url):
        args += ["--endpoint", url]
    return shellout.command(shellout.ppspec_argv() + args)


@dataclass
class Prepared:
    """A profile checked and placed for launch on this node: what `launch` starts."""

    profile_path: str
    prof: object  # the profile as loaded (planning.profile.Profile), before placement
    r: object  # planning.resolve.Resolved
    spec: object  # running.launch.LaunchSpec
    node: object  # running.launch.NodeLaunch
    findings: list
    timeout_s: float


def _checked(prof, profile: str, offline: bool, node_rank, run_dir, where: dict, role, dry_run: bool):
    """Resolve, place and check: (resolved, placement, findings, the errors serve refuses on)."""
    from ppspec_cli.planning.engine_options import refusals, unknown_engine_options
    from ppspec_cli.planning.rules import run_rules

    r, placement = placed(prof, profile, offline, node_rank, run_dir, where, role=role, launching=not dry_run)
    if role is not None:
        from ppspec_cli.planning.pd import resolve_roles, run_pd_rules

        findings = run_pd_rules(resolve_roles(prof, profile_path=profile, offline=offline, progress=progress, given={role: r}))
    else:
        findings = run_rules(r)
    errors = refusals(findings, launching=not dry_run)  # a dry run gives `check`'s verdict...
    if dry_run:
        from ppspec_cli.planning.engine_options import DRY_RUN_REFUSES

        errors += [f for f in findings if f.code in DRY_RUN_REFUSES and f not in errors]  # ...but prints no launch that cannot run
        # A dry run previews the launch for the nodes that will serve it, which may not be this
        # machine: that this machine's vLLM build cannot serve the platform is printed, not fatal.
        errors = [f for f in errors if f.code != "platform-not-served"]
    if not errors and not dry_run:
        errors = unknown_engine_options(r.profile.engine)  # imports vLLM's parser: seconds (`check --probes` runs it too)
    return r, placement, findings, errors


def _refuse(r, errors) -> int:
    from ppspec_cli.commands.render import render_findings
    from ppspec_cli.io.terminal import console, styled

    con = console(stderr=True)
    con.print(styled("[bold red]ppspec: refusing to launch {}[/bold red]: {} reason(s) (`ppspec check` reports them too)", r.profile.name, len(errors)))
    render_findings(con, errors)
    return 1


def _node_rank_in_range(r, node_rank) -> None:
    t = r.profile.topology
    if node_rank is not None and not (0 <= node_rank < t.nodes):
        raise PpspecError(f"--node-rank {node_rank} is outside 0..{t.nodes - 1}", where="--node-rank", fix=f"the profile has {t.nodes} node(s)")


def prepare(prof, profile: str, *, offline: bool = False, node_rank=None, run_dir=None, health_timeout=None, where: dict | None = None, role=None) -> "Prepared | int":
    """Everything `serve` does before it starts the engine: check (refusing on errors: prints why
    and returns 1), place, build the launch. `prof`: the loaded profile, or a changed copy of it
    (`ppspec bench`'s arms); the file `profile` anchors relative paths and messages."""
    from ppspec_cli.running.launch import build_launch

    where = where or {"master_addr": None, "master_port": None, "host": None}
    r, placement, findings, errors = _checked(prof, profile, offline, node_rank, run_dir, where, role, False)
    if errors:
        return _refuse(r, errors)
    spec = build_launch(r, run_dir=placement.run_dir)
    _node_rank_in_range(r, placement.node_rank)
    return Prepared(profile, prof, r, spec, spec.nodes[placement.node_rank or 0], findings, health_timeout or r.profile.launch.health_timeout_s)


def launch(p: Prepared, *, workload=None, stream: bool = True, verify_line: str | None = None, verbose: bool = False):
    """Start and supervise the prepared engine (supervise.run_engine): its ServeResult. The same
    pre-launch checks as `serve`: port free, Ray cluster, warnings printed, multi-node roll call."""
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
    roll = _roll_call(r.profile, node, p.timeout_s)
    try:
        return run_engine(
            spec, node, health_timeout_s=p.timeout_s, drafter_revision=r.profile.drafter.revision if r.profile.drafter else None,
            log=progress, roll=roll, verify_line=verify_line, stream=stream, workload=workload, verbose=verbose,
        )
    finally:
        if roll is not None:
            roll.close()


def _serve(profile: str, dry_run: bool, node_rank, json_out: bool, offline: bool, run_dir, health_timeout, where: dict, role=None, verbose: bool = False) -> int:
    from ppspec_cli.running.launch import build_launch
    from ppspec_cli.planning.profile import load_profile

    prof = load_profile(profile)
    if role is not None and not prof.disaggregated:
        raise PpspecError("--role is for disaggregated profiles (with `roles:`); this one runs one engine", where="--role", fix="drop --role")
    if prof.disaggregated and role is None:
        if not dry_run:
            raise PpspecError(
                "this profile runs two engines (roles prefill and decode): start each with --role",
                where="--role",
                fix=f"ppspec serve {profile} --role prefill (and --role decode); --dry-run without --role prints both and the router",
            )
        return _pd_dry_run(prof, profile, offline, run_dir, json_out, where)
    if dry_run:
        r, placement, findings, errors = _checked(prof, profile, offline, node_rank, run_dir, where, role, True)
        spec = build_launch(r, run_dir=placement.run_dir)
        _node_rank_in_range(r, placement.node_rank)
        return _print_dry_run(r, spec, findings, errors, placement.node_rank, json_out)
    p = prepare(prof, profile, offline=offline, node_rank=node_rank, run_dir=run_dir, health_timeout=health_timeout, where=where, role=role)
    if isinstance(p, int):
        return p
    res = launch(p, verify_line=_verify_line(prof, profile, p.spec.url), verbose=verbose)
    try:
        if res.exit_code == 1:
            print(f"error: {res.reason}", file=sys.stderr, flush=True)
        else:
            progress(res.reason)  # 128+N: stopped by signal N (while serving or before ready)
    except (OSError, ValueError):
        pass  # our stderr is gone (a closed pipe): the exit code still tells
    return res.exit_code


def _print_dry_run(r, spec, findings, errors, node_rank, json_out: bool) -> int:
    """Every node's command line and environment (or one node's), as shell lines or JSON."""
    t = r.profile.topology
    nodes = spec.nodes if node_rank is None else [spec.nodes[node_rank]]
    if json_out:
        d = spec.to_json()
        d["nodes"] = [n for n in d["nodes"] if node_rank is None or n["node_rank"] == node_rank]
        d["plan_data"] = spec.plan_data
        d["findings"] = [f.to_json() for f in findings]
        d["ok"] = not errors
        d["refused_by"] = sorted({f.code for f in errors})
        print(json.dumps(d, indent=2))
    else:
        _print_dry_run_findings(findings, "ppspec serve")
        if spec.overlay:
            print(shellout.comment(f"drafter served through a config overlay built at launch in {spec.overlay_dir}: {json.dumps(spec.overlay)}"))
        print(shellout.comment(f"plan file for the ppspec plugin (written at launch): {spec.plan_file}"))
        if t.nodes > 1:
            print(shellout.comment("every node needs the same ppspec and vLLM installed (the plugin runs in every worker)"))
            if r.profile.launch.executor == "mp":
                from ppspec_cli.running.rollcall import rollcall_port

                lp = r.profile.launch
                print(shellout.comment(f"the nodes reach the head on ports {lp.master_port} (vLLM) and {rollcall_port(lp.master_port)} (ppspec's roll call)"))
                if node_rank is None:
                    print(shellout.comment("on node i, `ppspec serve` adds GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP from its route to the head (unless env: sets them), and keeps its files in its own run directory (HOST-nodeI): `ppspec serve PROFILE --dry-run --node-rank i` there shows that node's exact launch"))
        for n in nodes:
            print(shellout.comment(f"node {n.node_rank} ({n.role})"))
            print(n.shell_line())
    return 1 if errors else 0


def _print_dry_run_findings(findings, command: str) -> None:
    """A dry run's errors and warnings as shell comments, and whether `command` would refuse (the
    verdict `check` and `export` give: engine_options.refusals)."""
    from ppspec_cli.planning.engine_options import refusals

    for f in findings:
        if f.severity in ("error", "warning"):
            print(shellout.comment(f"{f.severity} {f.code}: {f.message}"))
    errors = refusals(findings)
    if errors:
        codes = ", ".join(sorted({f.code for f in errors}))
        print(shellout.comment(f"`{command}` would refuse this profile: {len(errors)} error(s): {codes} (see `ppspec check`)"))


def _pd_dry_run(prof, profile_path: str, offline: bool, run_dir, json_out: bool, where: dict) -> int:
    """`serve --dry-run` of a disaggregated profile without --role: both engines' launches (each
    with its --kv-transfer-config) and the router line. Exit 1 when `check` finds errors."""
    from pathlib import Path

    from ppspec_cli.running.cluster import place
    from ppspec_cli.running.launch import build_launch
    from ppspec_cli.planning.pd import resolve_roles, role_profile, router_command, run_pd_rules
    from ppspec_cli.planning.resolve import resolve

    given = {}
    for role in ("prefill", "decode"):
        placed, _ = place(role_profile(prof, role), environ={}, **where)
        given[role] = resolve(placed, profile_path=profile_path, offline=offline, progress=progress)
    d = resolve_roles(prof, given=given)
    findings = run_pd_rules(d)
    from ppspec_cli.planning.engine_options import refusals

    errors = refusals(findings)
    specs = {role: build_launch(r, run_dir=Path(run_dir) / role if run_dir else None) for role, r in d.roles.items()}
    router, script = router_command(d)
    if json_out:
        print(
            json.dumps(
                {
                    "ok": not errors,
                    "findings": [f.to_json() for f in findings],
                    "roles": {role: {**spec.to_json(), "plan_data": spec.plan_data} for role, spec in specs.items()},
                    "router": {"shell": router, "script": script, "source": "vLLM's source tree (not in the wheel)"},
                },
                indent=2,
            )
        )
    else:
        _print_dry_run_findings(findings, "ppspec serve --role ...")
        for role, spec in specs.items():
            print(shellout.comment(f"===== {role} engine: ppspec serve {profile_path} --role {role}" + (" --node-rank i" if len(spec.nodes) > 1 else "")))
            for n in spec.nodes:
                print(shellout.comment(f"node {n.node_rank} ({n.role})"))
                print(n.shell_line())
        print(shellout.comment(f"===== router: the proxy vLLM ships for {d.connector_name}, {script} in vLLM's source tree (the wheel does not carry it); VLLM_SRC = a vLLM source checkout of the same version"))
        print(router)
    return 1 if errors else 0


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
        raise PpspecError("launch.executor is `ray` but Ray is not installed", where="launch.executor", fix="pip install ray, start the cluster (`ray start --head`), or use executor: mp") from None
    try:
        ray.init(address="auto", logging_level="ERROR")
        gpus = int(ray.cluster_resources().get("GPU", 0))
    except Exception as e:  # noqa: BLE001
        raise PpspecError(f"no running Ray cluster reachable ({type(e).__name__})", where="launch.executor", fix="start it with `ray start --head` on the head node and `ray start --address HEAD:6379` on the others", exit_code=1) from None
    finally:
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
    if gpus < world:
        raise PpspecError(f"the Ray cluster has {gpus} GPU(s) but the profile needs {world}", where="topology", fix="add nodes to the cluster or shrink the topology", exit_code=1)
