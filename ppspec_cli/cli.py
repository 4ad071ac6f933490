"""The `ppspec` command line. Commands only wire the rooms together and render results."""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

import typer

from ppspec_cli.io import redact, safeio, shellout
from ppspec_cli.errors import PpspecError

app = typer.Typer(
    name="ppspec",
    help=(
        "Run EAGLE3-family speculative decoding (eagle3, dflash, dspark; also mtp, eagle) under "
        "pipeline parallelism on vLLM, checked before launch.\n\n"
        "Typical flow: `ppspec check PROFILE` (preflight, no GPU), `ppspec plan PROFILE` (stage plan), "
        "`ppspec serve PROFILE` (launch), `ppspec verify PROFILE` (measure acceptance on the live server).\n\n"
        "Exit codes: 0 ok; 1 a check, launch or gate failed (or the server/engine failed); 2 bad usage or "
        "unreadable input (profile, option value, file); 3 an internal error (a ppspec bug: re-run with --debug "
        "and report it); 4 serve could not confirm ppspec's plugin in every engine process (stopped, nothing served unpatched); 128+N (130 Ctrl-C, 143 SIGTERM) serve interrupted by signal N."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
adapters_app = typer.Typer(help="Adapter packs: which model families work under PP, and what each pack changes.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(adapters_app, name="adapters")
export_app = typer.Typer(help="Write the profile's launch for a cluster scheduler: a SLURM batch script or a Kubernetes LeaderWorkerSet.", no_args_is_help=True)
app.add_typer(export_app, name="export")

_state = {"debug": False}


def _err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _progress(msg: str) -> None:
    print(f"ppspec: {msg}", file=sys.stderr, flush=True)


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for unexpected errors.")) -> None:
    _state["debug"] = debug or bool(os.environ.get("PPSPEC_DEBUG"))


def _resolve(profile_path: str, offline: bool):
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.planning.resolve import resolve

    prof = load_profile(profile_path)
    return resolve(prof, profile_path=profile_path, offline=offline, progress=_progress)


def _report_json(r, findings) -> dict:
    return {
        "ok": not any(f.severity == "error" for f in findings),
        "profile": r.profile.name,
        "findings": [f.to_json() for f in findings],
        "platform": r.platform,
        "runner": r.runner,
        "vllm": None if r.vllm is None else {"version": r.vllm.version, "distribution": r.vllm.distribution},
        "engine_version": {"version": r.engine_version, "source": r.engine_version_source},
        "adapter": None if r.pack is None else r.pack.name,
        "target": None if r.target is None else r.target.to_json(),
        "drafter": None if r.drafter is None else r.drafter.to_json(),
        "plan": None if r.plan is None else r.plan.to_json(),
    }


def _disaggregated(profile_path: str) -> bool:
    from ppspec_cli.planning.profile import load_profile

    return load_profile(profile_path).disaggregated


def _pd_report(profile_path: str, offline: bool, json_out: bool, *, plan: bool) -> None:
    """`check` / `plan` of a disaggregated profile: both engines, the KV layer names side by side,
    the cross-engine findings. Exit as the single-engine commands do."""
    from ppspec_cli.planning.pd import name_table, resolve_roles, run_pd_rules
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.commands.render import render_pd_check, render_pd_plan

    d = resolve_roles(load_profile(profile_path), profile_path=profile_path, offline=offline, progress=_progress)
    findings = run_pd_rules(d)
    rows = name_table(d)
    ok = not any(f.severity == "error" for f in findings)
    if json_out:
        out = {
            "ok": ok,
            "profile": d.profile.name,
            "kv_connector": d.connector_name,
            "findings": [f.to_json() for f in findings],
            "roles": {role: {k: v for k, v in _report_json(r, []).items() if k not in ("ok", "findings")} for role, r in d.roles.items()},
            "kv_layer_names": None
            if rows is None
            else [{"first": x.first, "last": x.last, "prefill": list(x.prefill), "decode": list(x.decode), "mismatch": x.mismatch} for x in rows],
        }
        print(json.dumps(out, indent=2))
    elif plan:
        render_pd_plan(d, rows, findings)
    else:
        render_pd_check(d, findings)
    if plan:
        raise typer.Exit(0 if all(r.plan is not None for r in d.roles.values()) else 1)
    raise typer.Exit(0 if ok else 1)


@app.command()
def check(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML (see profiles/)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object (for scripts) instead of a table."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub; use local files and the HF cache only."),
    probes: bool = typer.Option(False, "--probes/--no-probes", help="Also run behaviour probes of the installed vLLM (tripwires). Imports vLLM: tens of seconds. `serve` runs them inside every engine process anyway."),
) -> None:
    """Preflight a profile: read the checkpoints' metadata and the installed vLLM, report every problem.

    Exit code: 0 when no error-severity finding, 1 when there is one, 2 on usage errors.
    """
    from ppspec_cli.planning.rules import run_rules

    if _disaggregated(profile):
        _pd_report(profile, offline, json_out, plan=False)
    r = _resolve(profile, offline)
    findings = run_rules(r)
    probe_results = _run_probes(r) if probes else []
    if probes:
        from ppspec_cli.planning.engine_options import unknown_engine_options

        probe_results += unknown_engine_options(r.profile.engine)
    if not probes and r.vllm is not None:
        from ppspec_cli.findings import Finding

        probe_results.append(Finding("probes-not-run", "info", "platform", f"behaviour probes of the installed vLLM {r.vllm.version} not run (fast mode), nor the `engine:` option names checked against its parser (engine-unknown-option)", "add --probes to run both here; `ppspec serve` checks the names and runs the probes in every engine process"))
    findings = findings + [p for p in probe_results]
    from ppspec_cli.commands.render import render_check

    if json_out:
        out = _report_json(r, findings)
        print(json.dumps(out, indent=2))
    else:
        render_check(r, findings)
    raise typer.Exit(0 if not any(f.severity == "error" for f in findings) else 1)


def _run_probes(r):
    """Engine tripwires as findings, when the probes module and vLLM are available."""
    try:
        from ppspec_cli.running.engine import probes as probes_mod  # noqa: F401
    except ImportError:
        return []
    from ppspec_cli.findings import Finding

    if r.vllm is None:
        return []
    try:
        results = probes_mod.run_probes(
            target_arch=r.target.architectures[0] if r.target and r.target.architectures else None,
            method=r.method,
            num_layers=r.target.num_layers if r.target else None,
            pp=r.pp,
            partition=list(r.plan.partition) if r.plan else None,
            drafter_config=r.drafter_view,
            pack=r.pack,
            family=r.family,
        )
    except Exception as e:  # noqa: BLE001 - a probe crash is a finding, not a traceback
        return [Finding("probe-crashed", "warning", "platform", f"engine probes could not run: {type(e).__name__}: {e}", "run with --no-probes; report this")]
    out = []
    for p in results:
        status = getattr(p, "status", None)
        name = getattr(p, "name", "?")
        detail = getattr(p, "detail", "")
        if status == "failed":
            sev = getattr(p, "severity", None) or "error"
            out.append(Finding(f"probe-{name}", sev, "platform", f"engine probe {name} failed: {detail}", getattr(p, "fix", "") or ""))
        elif status == "not_run":
            out.append(Finding(f"probe-{name}", "info", "platform", f"engine probe {name} not run: {detail}", ""))
    return out


@app.command()
def plan(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan and findings as one JSON object."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub."),
) -> None:
    """Show the stage plan: layers per stage, where each tap lives, what each hop relays, draft layer
    ids, embedding placement and weight memory per stage."""
    from ppspec_cli.commands.render import render_plan
    from ppspec_cli.planning.rules import run_rules

    if _disaggregated(profile):
        _pd_report(profile, offline, json_out, plan=True)
    r = _resolve(profile, offline)
    findings = run_rules(r)
    if json_out:
        print(json.dumps(_report_json(r, findings), indent=2))
    else:
        render_plan(r, findings)
    raise typer.Exit(0 if r.plan is not None else 1)


@app.command()
def serve(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML (e.g. profiles/tiny_cpu_demo.yaml)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the exact command lines and environment for every node, then exit. Needs neither vLLM nor GPUs."),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", help="Which node this is (multi-node). Default 0 (the head); with --dry-run, default all nodes."),
    json_out: bool = typer.Option(False, "--json", help="With --dry-run: print the launch as JSON."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub during the preflight."),
    run_dir: Optional[str] = typer.Option(None, "--run-dir", help="Where to keep plan.json, launch.json and engine.log (default ~/.cache/ppspec/runs/NAME)."),
    health_timeout: Optional[int] = typer.Option(None, "--health-timeout", help="Seconds to wait for /health (default: launch.health_timeout_s)."),
    master_addr: Optional[str] = typer.Option(None, "--master-addr", help="The head node's address (overrides launch.master_addr; inside SLURM the allocation's first host is the default)."),
    master_port: Optional[int] = typer.Option(None, "--master-port", min=1, max=65535, help="The head's rendezvous port (overrides launch.master_port)."),
    host: Optional[str] = typer.Option(None, "--host", help="Address the API server binds (overrides server.host)."),
    role: Optional[str] = typer.Option(None, "--role", help="Disaggregated profiles (`roles:`): which engine to start, `prefill` or `decode`. With --dry-run and no --role, both engines and the router."),
) -> None:
    """Check the profile, then launch the vLLM server with the adapter pack applied in every engine process.

    Refuses to start when `check` finds an error. Waits for /health, prints where it listens and a
    curl line, streams the engine log, and on Ctrl-C / SIGTERM stops the whole process tree.

    Exit code: 130 stopped by Ctrl-C, 143 by SIGTERM, 129 by SIGHUP (128+N for signal N: while
    serving after a clean shutdown, or before the engine was ready); 1 refused by `check`, or the
    engine failed (exited, never became healthy, port taken); 2 usage errors; 3 the engine started
    but not every engine process confirmed an ok ppspec plugin status (API server, engine core, and
    every worker through the engine core): the engine was stopped (docs/architecture.md).
    """
    where = {"master_addr": master_addr, "master_port": master_port, "host": host}
    if role is not None and role not in ("prefill", "decode"):
        raise PpspecError(f"--role {role[:40]!r} is not a role", where="--role", fix="use --role prefill or --role decode")
    if dry_run:
        _serve(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role)
    else:
        _serve_with_signals(lambda: _serve(profile, dry_run, node_rank, json_out, offline, run_dir, health_timeout, where, role))


class _Interrupted(BaseException):
    """SIGINT/SIGTERM/SIGHUP before the engine supervisor took over. A BaseException, so no
    `except Exception` on the way (vLLM's import, the probes) can swallow it and launch anyway."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _serve_with_signals(fn) -> None:
    """Run `serve` so that a stop signal before the engine starts ends it cleanly: nothing has been
    launched then, so the message says so and the exit code is 128+N (130 Ctrl-C, 143 SIGTERM)."""
    import signal

    def _raise(signum, _frame):
        raise _Interrupted(signum)

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, _raise) for s in sigs}
    try:
        fn()
    except _Interrupted as e:
        _progress(f"interrupted by {signal.Signals(e.signum).name} before the engine started: nothing was launched")
        raise typer.Exit(128 + e.signum) from None
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _placed(profile_path: str, offline: bool, node_rank, run_dir, where: dict, environ=None, role=None):
    """Load the profile (one role's engine of a disaggregated one), fill in the command line's and
    SLURM's placement (cluster.place), resolve."""
    from ppspec_cli.running.cluster import place
    from ppspec_cli.planning.pd import role_profile
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.planning.resolve import resolve

    prof = load_profile(profile_path)
    if role is not None:
        prof = role_profile(prof, role)
    prof, placement = place(prof, node_rank=node_rank, run_dir=run_dir, environ=environ, **where)
    for note in placement.notes:
        _progress(note)
    return resolve(prof, profile_path=profile_path, offline=offline, progress=_progress), placement


def _verify_line(profile: str, url: str) -> str:
    """The `ppspec verify` command for the server being started, pasteable from any directory (the
    profile's absolute path), with --endpoint when the server is not where the profile file alone
    points verify (--host, a role's own server)."""
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.verify.client import endpoint_from_host_port, normalize_endpoint

    top = load_profile(profile).server
    args = ["verify", os.path.abspath(profile)]
    if normalize_endpoint(endpoint_from_host_port(top.host, top.port)) != normalize_endpoint(url):
        args += ["--endpoint", url]
    return shellout.command(shellout.ppspec_argv() + args)


def _serve(profile: str, dry_run: bool, node_rank, json_out: bool, offline: bool, run_dir, health_timeout, where: dict, role=None) -> None:
    from ppspec_cli.planning.engine_options import serve_refuses, unknown_engine_options
    from ppspec_cli.running.launch import build_launch
    from ppspec_cli.planning.profile import load_profile
    from ppspec_cli.commands.render import render_findings
    from ppspec_cli.planning.rules import run_rules
    from ppspec_cli.running.serve import port_free, run_engine

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
        _pd_dry_run(prof, profile, offline, run_dir, json_out, where)
    r, placement = _placed(profile, offline, node_rank, run_dir, where, role=role)
    node_rank = placement.node_rank
    if role is not None:
        from ppspec_cli.planning.pd import resolve_roles, run_pd_rules

        findings = run_pd_rules(resolve_roles(prof, profile_path=profile, offline=offline, progress=_progress, given={role: r}))
    else:
        findings = run_rules(r)
    errors = [f for f in findings if serve_refuses(f)]
    if not errors and not dry_run:
        errors = unknown_engine_options(r.profile.engine)  # imports vLLM's parser: seconds (`check --probes` runs it too)
    if errors and not dry_run:
        from rich.console import Console

        con = Console(stderr=True, highlight=False)
        con.print(f"[bold red]ppspec: refusing to launch {r.profile.name}[/bold red]: `check` found {len(errors)} error(s)")
        render_findings(con, errors)
        raise typer.Exit(1)
    spec = build_launch(r, run_dir=placement.run_dir)
    t = r.profile.topology
    if node_rank is not None and not (0 <= node_rank < t.nodes):
        raise PpspecError(f"--node-rank {node_rank} is outside 0..{t.nodes - 1}", where="--node-rank", fix=f"the profile has {t.nodes} node(s)")
    if dry_run:
        nodes = spec.nodes if node_rank is None else [spec.nodes[node_rank]]
        if json_out:
            d = spec.to_json()
            d["nodes"] = [n for n in d["nodes"] if node_rank is None or n["node_rank"] == node_rank]
            d["plan_data"] = spec.plan_data
            d["findings"] = [f.to_json() for f in findings]
            d["ok"] = not errors
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
            for n in nodes:
                print(shellout.comment(f"node {n.node_rank} ({n.role})"))
                print(n.shell_line())
        raise typer.Exit(1 if errors else 0)
    node = spec.nodes[node_rank or 0]
    if node.role == "head":
        if not port_free(r.profile.server.host, r.profile.server.port):
            raise PpspecError(
                f"port {r.profile.server.port} on {r.profile.server.host} is already in use",
                where="server.port",
                fix="stop the other server or set server.port to a free port",
                exit_code=1,
            )
    if r.profile.launch.executor == "ray" and node.role == "head":
        _check_ray(t.tensor_parallel * t.pipeline_parallel * t.data_parallel)
    for f in findings:
        if f.severity == "warning":
            _progress(f"warning {f.code}: {f.message}")
    timeout_s = health_timeout or r.profile.launch.health_timeout_s
    roll = _roll_call(r.profile, node, timeout_s)
    try:
        res = run_engine(
            spec, node, health_timeout_s=timeout_s, drafter_revision=r.profile.drafter.revision if r.profile.drafter else None,
            log=_progress, roll=roll, verify_line=_verify_line(profile, spec.url),
        )
    finally:
        if roll is not None:
            roll.close()
    try:
        if res.exit_code == 1:
            print(f"error: {res.reason}", file=sys.stderr, flush=True)
        else:
            _progress(res.reason)  # 128+N: stopped by signal N (while serving or before ready)
    except (OSError, ValueError):
        pass  # our stderr is gone (a closed pipe): the exit code still tells
    raise typer.Exit(res.exit_code)


def _print_dry_run_findings(findings, command: str) -> None:
    """A dry run's errors and warnings as shell comments, and whether `command` would refuse."""
    for f in findings:
        if f.severity in ("error", "warning"):
            print(shellout.comment(f"{f.severity} {f.code}: {f.message}"))
    errors = sum(f.severity == "error" for f in findings)
    if errors:
        print(shellout.comment(f"`{command}` would refuse this profile: {errors} error(s) (see `ppspec check`)"))


def _pd_dry_run(prof, profile_path: str, offline: bool, run_dir, json_out: bool, where: dict) -> None:
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
        given[role] = resolve(placed, profile_path=profile_path, offline=offline, progress=_progress)
    d = resolve_roles(prof, given=given)
    findings = run_pd_rules(d)
    errors = [f for f in findings if f.severity == "error"]
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
    raise typer.Exit(1 if errors else 0)


_OUTPUT_HELP = "Write to this file instead of standard output."


def _export(profile: str, offline: bool, output: Optional[str], render, where: dict, run_dir=None) -> None:
    """Build the launch as `serve --dry-run` does (no SLURM environment: the export is for the
    scheduler to fill in), render it, write it. Exit 1 when `check` found errors (the file is still
    written, with the errors in its header, as `serve --dry-run` prints them)."""
    from ppspec_cli.running.launch import build_launch
    from ppspec_cli.planning.rules import run_rules

    if _disaggregated(profile):
        raise PpspecError(
            "export writes one engine's launch; this profile runs two (roles prefill and decode)",
            where="roles",
            fix=f"`ppspec serve {profile} --dry-run` prints both engines' launches and the router; export each role's engine from them",
        )
    r, placement = _placed(profile, offline, None, run_dir, where, environ={})
    findings = run_rules(r)
    errors = [f"{f.code}: {f.message}" for f in findings if f.severity == "error"]
    spec = build_launch(r, run_dir=placement.run_dir)
    text = render(r, spec, profile, errors)
    if output:
        from pathlib import Path

        safeio.write_text(Path(output), text, what=output, where="--output")
        _progress(f"wrote {output}")
    else:
        sys.stdout.write(text)
    for e in errors:
        _progress(f"check error {e}")
    if errors:
        _progress(f"`check` found {len(errors)} error(s): `ppspec serve` would refuse this profile on every node")
    raise typer.Exit(1 if errors else 0)


@export_app.command("slurm")
def export_slurm(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=_OUTPUT_HELP),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub during the preflight."),
) -> None:
    """An sbatch script: one srun task per node runs `ppspec serve PROFILE`, the head is the allocation's first host.

    Submit with `sbatch FILE`; extra arguments go to every node's `ppspec serve`. The job fails when
    any node fails. Exit code: 0 written; 1 `check` found errors (written anyway) or the profile cannot be exported.
    """
    from ppspec_cli.running.export import PLACEHOLDER_HEAD, slurm_script

    _export(profile, offline, output, slurm_script, {"master_addr": PLACEHOLDER_HEAD})


@export_app.command("k8s")
def export_k8s(
    profile: str = typer.Argument(..., metavar="PROFILE", help="Path to the profile YAML."),
    image: str = typer.Option(..., "--image", help="Container image with vLLM and ppspec installed (the same versions on every node)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help=_OUTPUT_HELP),
    api_key_secret: Optional[str] = typer.Option(None, "--api-key-secret", help="Secret holding the API key under `api-key` (default NAME-api-key); used when server.api_key_env is set."),
    host: Optional[str] = typer.Option(None, "--host", help="Address the API server binds in the pod (default: the profile's, or 0.0.0.0 when that is loopback)."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub during the preflight."),
) -> None:
    """A Kubernetes LeaderWorkerSet: node 0 (leader) serves the API, the others run headless.

    The containers run the engine argv and environment of `ppspec serve --dry-run`; the head's address
    and each worker's rank come from LWS's LWS_LEADER_ADDRESS / LWS_WORKER_INDEX. Apply with
    `kubectl apply -f FILE`. Exit code: 0 written; 1 `check` found errors (written anyway) or the profile cannot be exported.
    """
    import re

    from ppspec_cli.running.export import K8S_RUN_DIR, PLACEHOLDER_HEAD, k8s_manifest, k8s_name
    from ppspec_cli.planning.profile import load_profile

    if api_key_secret is not None and not re.match(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$", api_key_secret):
        raise PpspecError(f"--api-key-secret {api_key_secret[:80]!r} is not a Kubernetes Secret name", where="--api-key-secret", fix="lowercase letters, digits, `-` and `.`", exit_code=2)
    if host is None and load_profile(profile).server.host in ("127.0.0.1", "localhost", "::1"):
        host = "0.0.0.0"  # a pod is reached on its pod IP; loopback would never pass the readiness probe
        _progress("the API server binds 0.0.0.0 in the pod (the profile binds loopback, which the Service could not reach); --host changes it")
    name = k8s_name(load_profile(profile).name)

    def render(r, spec, path, errors):
        return k8s_manifest(r, spec, path, errors, image=image, api_key_secret=api_key_secret)

    _export(profile, offline, output, render, {"master_addr": PLACEHOLDER_HEAD, "host": host}, run_dir=str(K8S_RUN_DIR / name))


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


@app.command()
def verify(
    profile: Optional[str] = typer.Argument(None, metavar="PROFILE", help="Profile of the server to measure (its host/port/api key). Omit with --endpoint."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="Base URL of a running OpenAI-compatible vLLM server (default: from the profile, else http://127.0.0.1:8000)."),
    out: Optional[str] = typer.Option(None, "--out", help="Write the JSON report here."),
    save_baseline: Optional[str] = typer.Option(None, "--save-baseline", help="Save this run as an acceptance baseline (e.g. the same drafter at PP=1)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="Baseline report for the acceptance-parity gate."),
    reference: Optional[str] = typer.Option(None, "--reference", help="Saved speculation-off run for the output-parity and task-score gates."),
    save_reference: Optional[str] = typer.Option(None, "--save-reference", help="Save this run as the reference (run it with speculation off)."),
    gate: Optional[list[str]] = typer.Option(None, "--gates", help="Gates to apply, comma-separated or repeated: acceptance (parity vs --baseline), drafter (acceptance floor), output (greedy outputs vs --reference), task (arithmetic score vs --reference), all, none. Default: drafter when speculating, plus those whose inputs are given."),
    min_acceptance: float = typer.Option(0.05, "--min-acceptance", help="Floor for the drafter-sanity gate (acceptance rate)."),
    parity_ratio: float = typer.Option(0.95, "--parity-ratio", help="Acceptance length must be at least this times the baseline's (upstream vLLM uses 0.95)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Tokens generated per prompt (greedy). Default: the profile's verify.max_tokens, else 128."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="Use only the first N prompts of the set. Default: the profile's verify.num_prompts, else all."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Environment variable holding the API key (default: the profile's server.api_key_env)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    """Measure speculative decoding on a live server: acceptance from /metrics deltas, throughput,
    and pass/fail gates (non-zero exit when a gate fails)."""
    from ppspec_cli.commands.verify import verify_command

    raise typer.Exit(
        verify_command(
            profile=profile,
            endpoint=endpoint,
            out=out,
            save_baseline=save_baseline,
            baseline=baseline,
            reference=reference,
            save_reference=save_reference,
            gates=gate,
            min_acceptance=min_acceptance,
            parity_ratio=parity_ratio,
            max_tokens=max_tokens,
            num_prompts=num_prompts,
            api_key_env=api_key_env,
            json_out=json_out,
        )
    )


@app.command()
def docs(
    out: Optional[str] = typer.Option(None, "--out", help="Write the profile reference to this file instead of stdout."),
) -> None:
    """Print the profile reference (generated from the schema's field descriptions)."""
    from ppspec_cli.commands.docs import profile_reference

    text = profile_reference()
    if out:
        safeio.write_text(out, text, what=out, where="--out", exit_code=2)
    else:
        print(text, end="")


@adapters_app.command("list")
def adapters_list_cmd(json_out: bool = typer.Option(False, "--json", help="Print a JSON list.")) -> None:
    """List adapter packs and their status against the installed vLLM."""
    from ppspec_cli.commands.adapters import adapters_list

    raise typer.Exit(adapters_list(json_out))


@adapters_app.command("show")
def adapters_show_cmd(name: str = typer.Argument(..., metavar="NAME", help="Pack name (see `ppspec adapters list`)."), json_out: bool = typer.Option(False, "--json", help="Print the pack as one JSON object.")) -> None:
    """Show one adapter pack: what it matches, provides and patches."""
    from ppspec_cli.commands.adapters import adapters_show

    raise typer.Exit(adapters_show(name, json_out))


def main() -> None:
    """Entry point: one clear message for user errors, a traceback only with --debug."""
    redact.install()  # every byte ppspec prints goes through the one redaction layer
    try:
        rc = app(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except PpspecError as e:
        if _state["debug"]:
            raise
        if "--json" in sys.argv:
            print(json.dumps({"ok": False, **e.to_json()}, indent=2))
        _err_console().print(e.render(), markup=False)
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("ppspec: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as e:
        import errno

        if e.errno not in (errno.ENAMETOOLONG, errno.ELOOP) or _state["debug"]:
            raise
        # a path given on the command line or in the profile that the file system cannot take
        where = str(e.filename or "")
        print(f"error: {e.strerror}\n  where: {where[:120]}{'...' if len(where) > 120 else ''}\n  fix: use a shorter path (each name at most 255 bytes)", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # click usage errors and the unexpected
        import click

        try:  # typer >= 0.2x vendors its own click; older typer uses click itself
            import typer._click.exceptions as _tce
        except ImportError:
            _tce = click.exceptions
        _TClickException = getattr(_tce, "ClickException", click.exceptions.ClickException)
        _TAbort = getattr(_tce, "Abort", click.exceptions.Abort)
        if isinstance(e, (click.exceptions.ClickException, _TClickException)):
            e.show()
            sys.exit(2)
        if isinstance(e, (click.exceptions.Abort, _TAbort)):
            print("ppspec: aborted", file=sys.stderr)
            sys.exit(130)
        if _state["debug"]:
            raise
        print(f"error: unexpected {type(e).__name__}: {e}\n  fix: re-run with --debug for the traceback and report it", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
