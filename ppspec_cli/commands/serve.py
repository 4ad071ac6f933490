"""`ppspec serve`: check, place, launch and supervise one node's engine; or print every node's
launch (`--dry-run`), both engines' for a disaggregated profile."""

from __future__ import annotations

import json
import os
import sys

from ppspec_cli.commands.common import progress
from ppspec_cli.errors import EXIT_OK, exit_for_signal
from ppspec_cli.io import shellout


def run(
    profile: str,
    dry_run: bool,
    node_rank,
    json_out: bool,
    offline: bool,
    run_dir,
    health_timeout,
    where: dict,
    role=None,
    verbose: bool = False,
) -> int:
    """`ppspec serve` (or its dry run): the exit code (documented in cli.py's serve)."""
    from ppspec_cli import operation

    placement = operation.PlacementArgs(node_rank=node_rank, run_dir=run_dir, launching=not dry_run, **where)
    if dry_run:
        return _dry_run(operation.Operation("dry_run", profile, placement, role=role, offline=offline), json_out)
    stop = _StopBeforeStart()
    with stop:
        return _serve(
            operation.Operation("serve", profile, placement, role=role, offline=offline), health_timeout, verbose
        )
    return stop.exit_code  # a stop signal came before the engine started


class _Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP before the engine supervisor took over. A BaseException, so no
    `except Exception` on the way (vLLM's import, the probes) can swallow it and launch anyway."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _StopBeforeStart:
    """Around `serve`: a stop signal before the engine starts ends it cleanly (nothing has been
    launched then): the message says so, and `exit_code` is 128+N (130 Ctrl-C, 143 SIGTERM)."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.exit_code = EXIT_OK
        self._old: dict = {}

    def __enter__(self) -> "_StopBeforeStart":
        import signal

        def _raise(signum, _frame):
            raise _Interrupted(signum)

        self._old = {s: signal.signal(s, _raise) for s in (getattr(signal, n) for n in self.SIGNALS)}
        return self

    def __exit__(self, kind, e, _tb) -> bool:
        import signal

        for s, h in self._old.items():
            signal.signal(s, h)
        if isinstance(e, _Interrupted):
            progress(f"interrupted by {signal.Signals(e.signum).name} before the engine started: nothing was launched")
            self.exit_code = exit_for_signal(e.signum)
            return True
        return False


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


def _serve(op, health_timeout, verbose: bool) -> int:
    """Judge, then start this node's engine (running/serve/start.py) or say why not."""
    from ppspec_cli import operation
    from ppspec_cli.commands.render import render_refusal
    from ppspec_cli.running.serve.start import start

    o = operation.run(op, progress)
    if o.refused:
        return render_refusal(o)
    assert o.resolved is not None and o.launch is not None
    line = _verify_line(o.resolved.profile, op.profile_path, o.launch.url)
    res = start(o, progress=progress, health_timeout=health_timeout, verify_line=line, verbose=verbose)
    try:
        if res.exit_code == 1:
            print(f"error: {res.reason}", file=sys.stderr, flush=True)
        else:
            progress(res.reason)  # 128+N: stopped by signal N (while serving or before ready)
    except (OSError, ValueError):
        pass  # our stderr is gone (a closed pipe): the exit code still tells
    return res.exit_code


def _dry_run(op, json_out: bool) -> int:
    """The launch `serve` would start, printed: the exit code is the profile verdict (as `check`'s);
    `ok` / `refused_by` and the header say whether `serve` would start it here. A disaggregated
    profile without --role: both engines' launches and the router line."""
    from ppspec_cli import operation

    o = operation.run(op, progress)
    if o.launch is None:
        return _print_pd_dry_run(o, json_out)
    assert o.resolved is not None
    return _print_dry_run(o.resolved, o.launch, o.judgment, o.node_rank, json_out, o.exit_code)


def _print_dry_run(r, spec, pf, node_rank, json_out: bool, exit_code: int) -> int:
    """Every node's command line and environment (or one node's), as shell lines or JSON."""
    t = r.profile.topology
    findings = list(pf.findings + pf.here)
    nodes = spec.nodes if node_rank is None else [spec.nodes[node_rank]]
    if json_out:
        d = spec.to_json()
        d["nodes"] = [n for n in d["nodes"] if node_rank is None or n["node_rank"] == node_rank]
        d["plan_data"] = spec.plan_data
        d["findings"] = [f.to_json() for f in findings]
        d.update(_verdicts_json(pf))
        print(json.dumps(d, indent=2))
    else:
        _print_dry_run_findings(pf, "ppspec serve")
        if spec.overlay:
            print(
                _comment(
                    f"drafter served through a config overlay built at launch in {spec.overlay_dir}: "
                    f"{json.dumps(spec.overlay)}"
                )
            )
        print(_comment(f"plan file for the ppspec plugin (written at launch): {spec.plan_file}"))
        if t.nodes > 1:
            print(_comment("every node needs the same ppspec and vLLM installed (the plugin runs in every worker)"))
            if r.profile.launch.executor == "mp":
                from ppspec_cli.running.rollcall import rollcall_port

                lp = r.profile.launch
                print(
                    _comment(
                        f"the nodes reach the head on ports {lp.master_port} (vLLM) and "
                        f"{rollcall_port(lp.master_port)} (ppspec's roll call)"
                    )
                )
                if node_rank is None:
                    print(
                        _comment(
                            "on node i, `ppspec serve` adds GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP "
                            "from its route to the head (unless env: sets them), and keeps its files in its own run "
                            "directory (HOST-nodeI): `ppspec serve PROFILE --dry-run --node-rank i` there shows that "
                            "node's exact launch"
                        )
                    )
        for n in nodes:
            print(_comment(f"node {n.node_rank} ({n.role})"))
            print(n.shell_line())
    return exit_code


def _comment(text: str) -> str:
    """A dry run's `#` comment, wrapped between words at the terminal's width (io.terminal.wrap_width)."""
    from ppspec_cli.io import terminal

    return shellout.comment(text, terminal.wrap_width(stderr=False))


def _verdicts_json(pf) -> dict:
    """A dry run's answers: `ok` / `refused_by` are what `serve` does here (the here verdict);
    `profile` is the verdict `check`, `plan` and `export` give (the exit code)."""
    here, prof = pf.here_verdict, pf.profile_verdict
    return {**here.to_json(), "profile_verdict": prof.to_json()}


def _print_dry_run_findings(pf, command: str) -> None:
    """A dry run's errors and warnings as shell comments, then both verdicts: the profile's (the
    exit code, as `check`'s) and whether `command` would start it on this machine."""
    for f in pf.findings + pf.here:
        if f.severity in ("error", "warning"):
            print(_comment(f"{f.severity} {f.code}: {f.message}"))
    prof, here = pf.profile_verdict, pf.here_verdict
    if not prof.ok:
        print(
            _comment(
                f"`{command}` would refuse this profile: {len(prof.refused)} error(s): {', '.join(prof.refused_by)} "
                "(see `ppspec check`)"
            )
        )
    elif not here.ok:
        print(
            _comment(
                f"`{command}` would refuse to start it on this machine: {', '.join(here.refused_by)} (the profile "
                "itself passes: the nodes that serve it decide)"
            )
        )


def _print_pd_dry_run(o, json_out: bool) -> int:
    """`serve --dry-run` of a disaggregated profile without --role: both engines' launches (each
    with its --kv-transfer-config) and the router line. The exit code is the profile verdict."""
    pf, specs, d, profile_path = o.judgment, o.launches, o.judgment.deployment, o.operation.profile_path
    router, script = o.router
    if json_out:
        print(
            json.dumps(
                {
                    **_verdicts_json(pf),
                    "findings": [f.to_json() for f in pf.findings + pf.here],
                    "roles": {role: {**spec.to_json(), "plan_data": spec.plan_data} for role, spec in specs.items()},
                    "router": {"shell": router, "script": script, "source": "vLLM's source tree (not in the wheel)"},
                },
                indent=2,
            )
        )
    else:
        _print_dry_run_findings(pf, "ppspec serve --role ...")
        for role, spec in specs.items():
            print(
                _comment(
                    f"===== {role} engine: ppspec serve {profile_path} --role {role}"
                    + (" --node-rank i" if len(spec.nodes) > 1 else "")
                )
            )
            for n in spec.nodes:
                print(_comment(f"node {n.node_rank} ({n.role})"))
                print(n.shell_line())
        print(
            _comment(
                f"===== router: the proxy vLLM ships for {d.connector_name}, {script} in vLLM's source tree (the "
                "wheel does not carry it); VLLM_SRC = a vLLM source checkout of the same version"
            )
        )
        print(router)
    return o.exit_code
