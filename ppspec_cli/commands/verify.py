"""`ppspec verify` as a plain function; the typer app in ppspec_cli/cli.py only wires options to it."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, PpspecError
from ppspec_cli.io import safeio, terminal
from ppspec_cli.verify.gates import TASK
from ppspec_cli.verify.measure import Request, measure, profile_context
from ppspec_cli.verify.report import load_report, print_gate_lines, render_table, save_report


@dataclass(frozen=True)
class Options:
    """`ppspec verify`'s command line (cli.py fills it). `max_tokens`/`num_prompts` None: the
    profile's verify section decides, else the built-in defaults."""

    profile: str | None = None
    endpoint: str | None = None
    out: str | None = None
    save_baseline: str | None = None
    baseline: str | None = None
    reference: str | None = None
    save_reference: str | None = None
    gates: list[str] | None = None
    min_acceptance: float = 0.05
    parity_ratio: float = 0.95
    max_tokens: int | None = None
    num_prompts: int | None = None
    api_key_env: str | None = None
    json_out: bool = False


def verify_command(o: Options) -> int:
    """Run verify end to end and return the exit code: 0 all gates pass, 1 a gate failed. Usage
    errors and unreachable servers raise PpspecError (the app renders them)."""
    _check_options(o)
    ctx = profile_context(o.profile) if o.profile else {}
    req = Request(
        endpoint=o.endpoint,
        api_key_env=o.api_key_env,
        max_tokens=o.max_tokens,
        num_prompts=o.num_prompts,
        gates=o.gates,
        baseline=load_report(o.baseline, "baseline") if o.baseline else None,
        reference=load_report(o.reference, "reference") if o.reference else None,
        min_acceptance=o.min_acceptance,
        parity_ratio=o.parity_ratio,
        saving=bool(o.save_baseline or o.save_reference),
    )
    report, chosen = measure(req, ctx)
    _save(o, report)
    _render(o, report, chosen)
    return EXIT_OK if report.passed else EXIT_REFUSED


def _check_options(o: Options) -> None:
    """Option values are checked before the run, not after minutes of generation."""
    import math

    for opt, v, lo, hi in (
        ("--min-acceptance", o.min_acceptance, 0.0, 1.0),
        ("--parity-ratio", o.parity_ratio, 0.0, 10.0),
    ):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
            raise PpspecError(
                f"{opt} {v!r} is not a number in {lo:g}..{hi:g}",
                where=opt,
                fix=f"pass a value between {lo:g} and {hi:g}",
            )
    for opt, path in (("--out", o.out), ("--save-baseline", o.save_baseline), ("--save-reference", o.save_reference)):
        if path:
            safeio.check_writable(path, where=opt)


def _save(o: Options, report) -> None:
    """The report, baseline and reference files asked for (a baseline needs an acceptance length)."""
    if o.save_reference and report.speculative.get("configured"):
        report.warnings.append(
            "saving a reference from a run WITH speculative decoding; a reference is meant to be measured with "
            "speculation off"
        )
    if o.save_baseline and not report.spec_decode.get("mean_acceptance_length"):
        raise PpspecError(
            f"cannot save a baseline: {report.spec_decode.get('status')} (no acceptance length measured)",
            where="--save-baseline",
            fix="save the baseline from a run with speculative decoding on that made drafts",
        )
    for path in (o.out, o.save_baseline, o.save_reference):
        if path:
            save_report(report, path)


def _render(o: Options, report, chosen: list[str]) -> None:
    err = terminal.console(stderr=True)
    if o.json_out:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        sys.stdout.flush()
        print_gate_lines(report.to_dict(), err)
    else:
        render_table(report, terminal.console(stderr=o.json_out))
    if TASK in chosen and report.lm_eval_command:
        err.print("full GSM8K run (lm-evaluation-harness):")
        cmd = terminal.command_block("", report.lm_eval_command, terminal.wrap_width())
        err.print(cmd if "\n" in cmd else f"  {cmd}", soft_wrap=True)  # a command: broken only with ` \`
    for label, path in (("report", o.out), ("baseline", o.save_baseline), ("reference", o.save_reference)):
        if path:
            err.print(f"{label} written to {path}")
    if not chosen:
        err.print("no gates selected: measurement only")
