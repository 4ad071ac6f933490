"""`ppspec verify` as a plain function; the typer app in ppspec_cli/cli.py only wires options to it."""

from __future__ import annotations

import json
import sys

from ppspec_cli.errors import PpspecError
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


def verify_command(
    profile: str | None,
    endpoint: str | None,
    out: str | None,
    save_baseline: str | None,
    baseline: str | None,
    reference: str | None,
    save_reference: str | None,
    gates: list[str] | None,
    min_acceptance: float,
    parity_ratio: float,
    max_tokens: int | None,
    num_prompts: int | None,
    api_key_env: str | None,
    json_out: bool,
) -> int:
    """Run verify end to end and return the exit code: 0 all gates pass, 1 a gate failed.

    max_tokens/num_prompts None: the profile's verify section decides, else the built-in defaults.
    Usage errors and unreachable servers raise PpspecError (the app renders them).
    """
    import math

    # option values are checked before the run, not after minutes of generation
    for opt, v, lo, hi in (("--min-acceptance", min_acceptance, 0.0, 1.0), ("--parity-ratio", parity_ratio, 0.0, 10.0)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
            raise PpspecError(
                f"{opt} {v!r} is not a number in {lo:g}..{hi:g}",
                where=opt,
                fix=f"pass a value between {lo:g} and {hi:g}",
            )
    for opt, path in (("--out", out), ("--save-baseline", save_baseline), ("--save-reference", save_reference)):
        if path:
            safeio.check_writable(path, where=opt)
    err = terminal.console(stderr=True)
    out_console = terminal.console(stderr=json_out)
    ctx = _profile_context(profile) if profile else {}
    url = normalize_endpoint(endpoint or ctx.get("endpoint"))
    key_env = api_key_env or ctx.get("api_key_env")
    spec_cfg = ctx.get("spec_config") or {}
    if max_tokens is None:
        max_tokens = ctx.get("max_tokens") or DEFAULT_MAX_TOKENS
    if num_prompts is None:
        num_prompts = ctx.get("num_prompts")

    baseline_doc = load_report(baseline, "baseline") if baseline else None
    reference_doc = load_report(reference, "reference") if reference else None
    # Speculation is "expected" when the profile names a drafter; without a profile we learn it
    # from /metrics, so default gate choice happens after the run.
    explicit = (
        None
        if gates is None
        else resolve_gates(
            gates, have_baseline=baseline_doc is not None, have_reference=reference_doc is not None, speculative=True
        )
    )
    synthetic = synthetic_acceptance_configured(spec_cfg)
    wants_gates = explicit is None or bool(explicit)
    if synthetic and (wants_gates or save_baseline or save_reference):
        refuse_if_synthetic(spec_cfg, ctx.get("source", "speculative config"))

    report = run_verify(
        url,
        profile=ProfileContext(
            name=ctx.get("name"),
            preferred_models=tuple(ctx.get("preferred") or ()),
            spec_config=spec_cfg,
            expect_speculative=ctx.get("speculative"),
            tokenizer=ctx.get("tokenizer"),
        ),
        api_key_env=key_env,
        max_tokens=max_tokens,
        num_prompts=num_prompts,
        refuse_synthetic=wants_gates or bool(save_baseline or save_reference),
    )
    if ctx.get("name"):  # which packs ran in which engine process, from the run `ppspec serve` keeps
        from ppspec_cli.running.launch import default_run_dir
        from ppspec_cli.running.serve.confirm import plugin_record

        report.plugin = plugin_record(default_run_dir(ctx["name"]) / "plugin-status")
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
        min_acceptance=min_acceptance,
        parity_ratio=parity_ratio,
        task_tolerance=DEFAULT_TASK_TOLERANCE,
    )

    if save_reference and report.speculative.get("configured"):
        report.warnings.append(
            "saving a reference from a run WITH speculative decoding; a reference is meant to be measured with speculation off"
        )
    if save_baseline and not report.spec_decode.get("mean_acceptance_length"):
        raise PpspecError(
            f"cannot save a baseline: {report.spec_decode.get('status')} (no acceptance length measured)",
            where="--save-baseline",
            fix="save the baseline from a run with speculative decoding on that made drafts",
        )
    for path in (out, save_baseline, save_reference):
        if path:
            save_report(report, path)

    if json_out:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        sys.stdout.flush()
        print_gate_lines(report.to_dict(), err)
    else:
        render_table(report, out_console)
    if TASK in chosen and report.lm_eval_command:
        err.print("full GSM8K run (lm-evaluation-harness):")
        cmd = terminal.command_block("", report.lm_eval_command, terminal.wrap_width())
        err.print(cmd if "\n" in cmd else f"  {cmd}", soft_wrap=True)  # a command: broken only with ` \`
    for label, path in (("report", out), ("baseline", save_baseline), ("reference", save_reference)):
        if path:
            err.print(f"{label} written to {path}")
    if not chosen:
        err.print("no gates selected: measurement only")
    return 0 if report.passed else 1
