"""`ppspec verify` as a plain function; the typer app in ppspec_cli/cli.py only wires options to it."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, PpspecError
from ppspec_cli.io import safeio, terminal
from ppspec_cli.verify.client import endpoint_from_host_port, normalize_endpoint
from ppspec_cli.verify.gates import (
    DEFAULT_TASK_TOLERANCE,
    TASK,
    refuse_if_synthetic,
    resolve_gates,
    speculative_config_from_engine,
    synthetic_acceptance_configured,
)
from ppspec_cli.verify.report import load_report, print_gate_lines, render_table, save_report
from ppspec_cli.verify.runner import DEFAULT_MAX_TOKENS, ProfileContext, apply_gates, run_verify


def _tokenizer_ref(ref: str, profile_path: str) -> str | None:
    """The target as the printed lm_eval line names its tokenizer: a hub id as written, a local
    folder by its absolute path (relative paths start from the profile's folder, as in `check`)."""
    from pathlib import Path

    from ppspec_cli.checkpoint.reader import is_local_ref, local_path

    if ref.startswith("demo:"):
        return None
    base = Path(profile_path).resolve().parent
    return str(local_path(ref, base).resolve()) if is_local_ref(ref, base) else ref


def _profile_context(path: str) -> dict:
    """What verify needs from a profile: where the server listens and what it should be doing."""
    from ppspec_cli.planning.profile import load_profile

    prof = load_profile(path)
    engine = dict(prof.engine or {})
    spec_cfg = speculative_config_from_engine(engine) or {}
    preferred = [n for n in (prof.server.served_model_name, prof.name, prof.target.model) if n]
    tokenizer = _tokenizer_ref(prof.target.model, path)
    return {
        "endpoint": endpoint_from_host_port(prof.server.host, prof.server.port),
        "api_key_env": prof.server.api_key_env,
        "speculative": prof.drafter is not None,
        "spec_config": spec_cfg,
        "preferred": preferred,
        "name": prof.name,
        "tokenizer": tokenizer,
        "source": f"{path}: engine.speculative-config",
        "max_tokens": prof.verify.max_tokens,
        "num_prompts": prof.verify.num_prompts,
    }


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
    ctx = _profile_context(o.profile) if o.profile else {}
    baseline_doc = load_report(o.baseline, "baseline") if o.baseline else None
    reference_doc = load_report(o.reference, "reference") if o.reference else None
    # Speculation is "expected" when the profile names a drafter; without a profile it is learnt
    # from /metrics, so the default gates are chosen after the run.
    explicit = (
        None
        if o.gates is None
        else resolve_gates(
            o.gates, have_baseline=baseline_doc is not None, have_reference=reference_doc is not None, speculative=True
        )
    )
    saving = bool(o.save_baseline or o.save_reference)
    spec_cfg = ctx.get("spec_config") or {}
    wants_gates = explicit is None or bool(explicit)
    if synthetic_acceptance_configured(spec_cfg) and (wants_gates or saving):
        refuse_if_synthetic(spec_cfg, ctx.get("source", "speculative config"))
    report = _measure(o, ctx, refuse_synthetic=wants_gates or saving)
    chosen = explicit
    if chosen is None:
        chosen = resolve_gates(
            None,
            have_baseline=baseline_doc is not None,
            have_reference=reference_doc is not None,
            speculative=bool(report.speculative.get("configured") or ctx.get("speculative")),
        )
    apply_gates(
        report,
        chosen,
        baseline=baseline_doc,
        reference=reference_doc,
        min_acceptance=o.min_acceptance,
        parity_ratio=o.parity_ratio,
        task_tolerance=DEFAULT_TASK_TOLERANCE,
    )
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


def _measure(o: Options, ctx: dict, *, refuse_synthetic: bool):
    """One measured run against the server (the profile's, unless --endpoint names one)."""
    report = run_verify(
        normalize_endpoint(o.endpoint or ctx.get("endpoint")),
        profile=ProfileContext(
            name=ctx.get("name"),
            preferred_models=tuple(ctx.get("preferred") or ()),
            spec_config=ctx.get("spec_config") or {},
            expect_speculative=ctx.get("speculative"),
            tokenizer=ctx.get("tokenizer"),
        ),
        api_key_env=o.api_key_env or ctx.get("api_key_env"),
        max_tokens=o.max_tokens if o.max_tokens is not None else (ctx.get("max_tokens") or DEFAULT_MAX_TOKENS),
        num_prompts=o.num_prompts if o.num_prompts is not None else ctx.get("num_prompts"),
        refuse_synthetic=refuse_synthetic,
    )
    if ctx.get("name"):  # which packs ran in which engine process, from the run `ppspec serve` keeps
        from ppspec_cli.running.serve.confirm import plugin_record
        from ppspec_cli.running.serve.rundir import default_run_dir

        report.plugin = plugin_record(default_run_dir(ctx["name"]) / "plugin-status")
    return report


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
        err.print(f"  {report.lm_eval_command}", soft_wrap=True)
    for label, path in (("report", o.out), ("baseline", o.save_baseline), ("reference", o.save_reference)):
        if path:
            err.print(f"{label} written to {path}")
    if not chosen:
        err.print("no gates selected: measurement only")
