"""One `ppspec verify`: what the profile says of the server (its endpoint, drafter, tokenizer), the
gates chosen (now when named, else after the run: speculation is learnt from /metrics without a
profile), synthetic acceptance refused before anything is sent when a gate or a saved file would
rest on it, the run measured, the plugin's record of the serve run attached, the gates applied.
The command parses, saves and renders (commands/verify.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ppspec_cli.verify.client import endpoint_from_host_port, normalize_endpoint
from ppspec_cli.verify.gates import (
    DEFAULT_TASK_TOLERANCE,
    refuse_if_synthetic,
    resolve_gates,
    speculative_config_from_engine,
    synthetic_acceptance_configured,
)
from ppspec_cli.verify.report import Report
from ppspec_cli.verify.runner import DEFAULT_MAX_TOKENS, ProfileContext, apply_gates, run_verify


def tokenizer_ref(ref: str, profile_path: str) -> str | None:
    """The target as the printed lm_eval line names its tokenizer: a hub id as written, a local
    folder by its absolute path (relative paths start from the profile's folder, as in `check`)."""
    from pathlib import Path

    from ppspec_cli.checkpoint.reader import is_local_ref, local_path

    if ref.startswith("demo:"):
        return None
    base = Path(profile_path).resolve().parent
    return str(local_path(ref, base).resolve()) if is_local_ref(ref, base) else ref


def profile_context(path: str) -> dict:
    """What verify needs from a profile: where the server listens and what it should be doing."""
    from ppspec_cli.planning.profile import load_profile

    prof = load_profile(path)
    engine = dict(prof.engine or {})
    spec_cfg = speculative_config_from_engine(engine) or {}
    preferred = [n for n in (prof.server.served_model_name, prof.name, prof.target.model) if n]
    return {
        "endpoint": endpoint_from_host_port(prof.server.host, prof.server.port),
        "api_key_env": prof.server.api_key_env,
        "speculative": prof.drafter is not None,
        "spec_config": spec_cfg,
        "preferred": preferred,
        "name": prof.name,
        "tokenizer": tokenizer_ref(prof.target.model, path),
        "source": f"{path}: engine.speculative-config",
        "max_tokens": prof.verify.max_tokens,
        "num_prompts": prof.verify.num_prompts,
    }


@dataclass(frozen=True)
class Request:
    """What one verify measures and judges: the server (`endpoint`, else the profile's), the run's
    size (None: the profile's verify section, else the defaults), the gates asked for (None: the
    defaults, chosen after the run) and what they compare against, and whether a file is saved."""

    endpoint: str | None = None
    api_key_env: str | None = None
    max_tokens: int | None = None
    num_prompts: int | None = None
    gates: list[str] | None = None
    baseline: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    min_acceptance: float = 0.05
    parity_ratio: float = 0.95
    saving: bool = False


def measure(req: Request, ctx: dict) -> tuple[Report, list[str]]:
    """The measured, judged report and the gates applied to it. `ctx`: profile_context(), or {}."""
    have = {"have_baseline": req.baseline is not None, "have_reference": req.reference is not None}
    explicit = None if req.gates is None else resolve_gates(req.gates, speculative=True, **have)
    spec_cfg = ctx.get("spec_config") or {}
    refuse = explicit is None or bool(explicit) or req.saving
    if synthetic_acceptance_configured(spec_cfg) and refuse:
        refuse_if_synthetic(spec_cfg, ctx.get("source", "speculative config"))
    report = run_verify(
        normalize_endpoint(req.endpoint or ctx.get("endpoint")),
        profile=ProfileContext(
            name=ctx.get("name"),
            preferred_models=tuple(ctx.get("preferred") or ()),
            spec_config=spec_cfg,
            expect_speculative=ctx.get("speculative"),
            tokenizer=ctx.get("tokenizer"),
        ),
        api_key_env=req.api_key_env or ctx.get("api_key_env"),
        max_tokens=req.max_tokens if req.max_tokens is not None else (ctx.get("max_tokens") or DEFAULT_MAX_TOKENS),
        num_prompts=req.num_prompts if req.num_prompts is not None else ctx.get("num_prompts"),
        refuse_synthetic=refuse,
    )
    if ctx.get("name"):  # which packs ran in which engine process, from the run `ppspec serve` keeps
        from ppspec_cli.running.serve.confirm import plugin_record
        from ppspec_cli.running.serve.rundir import default_run_dir

        report.plugin = plugin_record(default_run_dir(ctx["name"]) / "plugin-status")
    speculative = bool(report.speculative.get("configured") or ctx.get("speculative"))
    chosen = explicit if explicit is not None else resolve_gates(None, speculative=speculative, **have)
    apply_gates(
        report,
        chosen,
        baseline=req.baseline,
        reference=req.reference,
        min_acceptance=req.min_acceptance,
        parity_ratio=req.parity_ratio,
        task_tolerance=DEFAULT_TASK_TOLERANCE,
    )
    return report, chosen
