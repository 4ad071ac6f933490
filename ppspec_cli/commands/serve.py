"""`ppspec serve`: check, place, launch and supervise one node's engine; or print every node's
launch (`--dry-run`), both engines' for a disaggregated profile."""

from __future__ import annotations

import json
import os
import sys

from ppspec_cli.commands.common import progress
from ppspec_cli.errors import PpspecError
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
    if role is not None and role not in ("prefill", "decode"):
        raise PpspecError(
            f"--role {role[:40]!r} is not a role", where="--role", fix="use --role prefill or --role decode"
        )
    if dry_run:
        return _serve(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role)
    return _with_signals(
        lambda: _serve(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role, verbose)
    )


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


def _serve(
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
    from ppspec_cli.commands.render import render_refusal
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.preflight.pipeline import Refused, launch, prepare

    prof = load_profile(profile)
    if role is not None and not prof.disaggregated:
        raise PpspecError(
            "--role is for disaggregated profiles (with `roles:`); this one runs one engine",
            where="--role",
            fix="drop --role",
        )
    if prof.disaggregated and role is None:
        if not dry_run:
            raise PpspecError(
                "this profile runs two engines (roles prefill and decode): start each with --role",
                where="--role",
                fix=f"ppspec serve {profile} --role prefill (and --role decode); --dry-run without --role prints both and the router",
            )
        return _pd_dry_run(prof, profile, offline, run_dir, json_out, where)
    if dry_run:
        return _dry_run(prof, profile, offline, node_rank, run_dir, where, role, json_out)
    p = prepare(
        prof,
        profile,
        progress=progress,
        offline=offline,
        node_rank=node_rank,
        run_dir=run_dir,
        health_timeout=health_timeout,
        where=where,
        role=role,
    )
    if isinstance(p, Refused):
        return render_refusal(p)
    res = launch(p, progress=progress, verify_line=_verify_line(prof, profile, p.spec.url), verbose=verbose)
    try:
        if res.exit_code == 1:
            print(f"error: {res.reason}", file=sys.stderr, flush=True)
        else:
            progress(res.reason)  # 128+N: stopped by signal N (while serving or before ready)
    except (OSError, ValueError):
        pass  # our stderr is gone (a closed pipe): the exit code still tells
    return res.exit_code


def _dry_run(prof, profile: str, offline: bool, node_rank, run_dir, where: dict, role, json_out: bool) -> int:
    """The launch `serve` would start, printed: the exit code is the profile verdict (as `check`'s);
    `ok` / `refused_by` and the header say whether `serve` would start it here."""
    from ppspec_cli.preflight.pipeline import dry_run

    d = dry_run(
        prof, profile, offline=offline, node_rank=node_rank, run_dir=run_dir, where=where, progress=progress, role=role
    )
    return _print_dry_run(d.resolved, d.spec, d.preflight, d.node_rank, json_out)


def _print_dry_run(r, spec, pf, node_rank, json_out: bool) -> int:
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
                    f"drafter served through a config overlay built at launch in {spec.overlay_dir}: {json.dumps(spec.overlay)}"
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
                        f"the nodes reach the head on ports {lp.master_port} (vLLM) and {rollcall_port(lp.master_port)} (ppspec's roll call)"
                    )
                )
                if node_rank is None:
                    print(
                        _comment(
                            "on node i, `ppspec serve` adds GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP from its route to the head (unless env: sets them), and keeps its files in its own run directory (HOST-nodeI): `ppspec serve PROFILE --dry-run --node-rank i` there shows that node's exact launch"
                        )
                    )
        for n in nodes:
            print(_comment(f"node {n.node_rank} ({n.role})"))
            print(n.shell_line())
    return pf.profile_verdict.exit_code


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
                f"`{command}` would refuse this profile: {len(prof.refused)} error(s): {', '.join(prof.refused_by)} (see `ppspec check`)"
            )
        )
    elif not here.ok:
        print(
            _comment(
                f"`{command}` would refuse to start it on this machine: {', '.join(here.refused_by)} (the profile itself passes: the nodes that serve it decide)"
            )
        )


def _pd_dry_run(prof, profile_path: str, offline: bool, run_dir, json_out: bool, where: dict) -> int:
    """`serve --dry-run` of a disaggregated profile without --role: both engines' launches (each
    with its --kv-transfer-config) and the router line. The exit code is the profile verdict."""
    from ppspec_cli.preflight.pipeline import pd_dry_run

    dr = pd_dry_run(prof, profile_path, offline=offline, run_dir=run_dir, where=where, progress=progress)
    pf, specs, router, script, d = dr.preflight, dr.specs, dr.router, dr.script, dr.preflight.deployment
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
                f"===== router: the proxy vLLM ships for {d.connector_name}, {script} in vLLM's source tree (the wheel does not carry it); VLLM_SRC = a vLLM source checkout of the same version"
            )
        )
        print(router)
    return pf.profile_verdict.exit_code
