"""The `ppspec` command line. Commands only wire the rooms together and render results."""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

import typer

from .errors import PpspecError

app = typer.Typer(
    name="ppspec",
    help=(
        "Run EAGLE3-family speculative decoding (eagle3, dflash, dspark; also mtp, eagle) under "
        "pipeline parallelism on vLLM, checked before launch.\n\n"
        "Typical flow: `ppspec check PROFILE` (preflight, no GPU), `ppspec plan PROFILE` (stage plan), "
        "`ppspec serve PROFILE` (launch), `ppspec verify PROFILE` (measure acceptance on the live server)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
adapters_app = typer.Typer(help="Adapter packs: which model families work under PP, and what each pack changes.", no_args_is_help=True)
app.add_typer(adapters_app, name="adapters")

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
    from .profile import load_profile
    from .resolve import resolve

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
        "adapter": None if r.pack is None else r.pack.name,
        "target": None if r.target is None else r.target.to_json(),
        "drafter": None if r.drafter is None else r.drafter.to_json(),
        "plan": None if r.plan is None else r.plan.to_json(),
    }


@app.command()
def check(
    profile: str = typer.Argument(..., help="Path to the profile YAML (see profiles/)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object (for scripts) instead of a table."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub; use local files and the HF cache only."),
    probes: bool = typer.Option(True, "--probes/--no-probes", help="Run behaviour probes of the installed vLLM (tripwires) when it is importable."),
) -> None:
    """Preflight a profile: read the checkpoints' metadata and the installed vLLM, report every problem.

    Exit code: 0 when no error-severity finding, 1 when there is one, 2 on usage errors.
    """
    from .rules import run_rules

    r = _resolve(profile, offline)
    findings = run_rules(r)
    probe_results = _run_probes(r) if probes else []
    findings = findings + [p for p in probe_results]
    from .render import render_check

    if json_out:
        out = _report_json(r, findings)
        print(json.dumps(out, indent=2))
    else:
        render_check(r, findings)
    raise typer.Exit(0 if not any(f.severity == "error" for f in findings) else 1)


def _run_probes(r):
    """Engine tripwires as findings, when the probes module and vLLM are available."""
    try:
        from .engine import probes as probes_mod  # noqa: F401
    except ImportError:
        return []
    from .rules import Finding

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
    profile: str = typer.Argument(..., help="Path to the profile YAML."),
    json_out: bool = typer.Option(False, "--json", help="Print the plan and findings as one JSON object."),
    offline: bool = typer.Option(False, "--offline", help="Do not contact the Hugging Face hub."),
) -> None:
    """Show the stage plan: layers per stage, where each tap lives, what each hop relays, draft layer
    ids, embedding placement and weight memory per stage."""
    from .render import render_plan
    from .rules import run_rules

    r = _resolve(profile, offline)
    findings = run_rules(r)
    if json_out:
        print(json.dumps(_report_json(r, findings), indent=2))
    else:
        render_plan(r, findings)
    raise typer.Exit(0 if r.plan is not None else 1)


@app.command()
def docs(
    out: Optional[str] = typer.Option(None, "--out", help="Write the profile reference to this file instead of stdout."),
) -> None:
    """Print the profile reference (generated from the schema's field descriptions)."""
    from .docgen import profile_reference

    text = profile_reference()
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text, end="")


@adapters_app.command("list")
def adapters_list_cmd(json_out: bool = typer.Option(False, "--json", help="Print a JSON list.")) -> None:
    """List adapter packs and their status against the installed vLLM."""
    from .engine.packs_cli import adapters_list

    raise typer.Exit(adapters_list(json_out))


@adapters_app.command("show")
def adapters_show_cmd(name: str = typer.Argument(..., help="Pack name (see `ppspec adapters list`)."), json_out: bool = typer.Option(False, "--json")) -> None:
    """Show one adapter pack: what it matches, provides and patches."""
    from .engine.packs_cli import adapters_show

    raise typer.Exit(adapters_show(name, json_out))


def main() -> None:
    """Entry point: one clear message for user errors, a traceback only with --debug."""
    try:
        app(standalone_mode=False)
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
    except Exception as e:  # click usage errors and the unexpected
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(2)
        if isinstance(e, click.exceptions.Abort):
            print("ppspec: aborted", file=sys.stderr)
            sys.exit(130)
        if _state["debug"]:
            raise
        print(f"error: unexpected {type(e).__name__}: {e}\n  fix: re-run with --debug for the traceback and report it", file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()
