"""One measured run: scrape /metrics, send the fixed prompts greedily, scrape again, report.

Callable from Python (`run_verify(endpoint, ...)`) so tests and `ppspec serve` can drive it
without the CLI. Gates are applied separately (`apply_gates`) because a baseline run needs the
same measurement and no gates.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Callable, Mapping

from ppspec_cli import __version__
from ppspec_cli.errors import PpspecError
from ppspec_cli.io import shellout
from ppspec_cli.verify import metrics as m
from ppspec_cli.verify.client import Client
from ppspec_cli.verify.gates import (
    DEFAULT_MIN_ACCEPTANCE,
    DEFAULT_PARITY_RATIO,
    DEFAULT_TASK_TOLERANCE,
    evaluate_gates,
    refuse_if_synthetic,
    synthetic_acceptance_configured,
)
from ppspec_cli.verify.prompts import PromptItem, PromptSet, extract_answer, load_prompt_set
from ppspec_cli.verify.report import Report

ProgressFn = Callable[[str], None]
WARMUP_PROMPT = "Hello"
#: Tokens generated per prompt when neither --max-tokens nor the profile says.
DEFAULT_MAX_TOKENS = 128
SETTLE_TIMEOUT_S = 10.0
#: Seconds between two /metrics scrapes while the counters settle.
SETTLE_POLL_S = 0.2


def _stderr_progress(line: str) -> None:
    from ppspec_cli.io import terminal

    print(terminal.wrap_block(line, terminal.wrap_width()), file=sys.stderr, flush=True)  # between words


def lm_eval_command(endpoint: str, model: str, tokenizer: str | None = None) -> str:
    """The lm-evaluation-harness command for the full GSM8K run against the same server."""
    args = [
        f"model={model}",
        f"base_url={endpoint}/v1/completions",
        "num_concurrent=8",
        "max_retries=3",
        "tokenized_requests=False",
    ]
    if tokenizer:
        args.append(f"tokenizer={tokenizer}")
    return shellout.command(
        [
            "lm_eval",
            "--model",
            "local-completions",
            "--model_args",
            ",".join(args),
            "--tasks",
            "gsm8k",
            "--num_fewshot",
            "5",
            "--batch_size",
            "1",
        ]
    )


def _listed(served: list[str], n: int = 8) -> str:
    """A few of the served model ids for a message (a server may list thousands)."""
    shown = ", ".join(repr(x[:80]) for x in served[:n])
    return shown + (f" and {len(served) - n} more" if len(served) > n else "")


def _pick_model(client: Client, model: str | None, preferred: list[str] | None) -> str:
    served = client.models()
    if not served:
        raise PpspecError(
            f"{client.url('/v1/models')} lists no models",
            where=client.url("/v1/models"),
            fix="check the server log: the model may have failed to load",
        )
    if model:
        if model not in served:
            raise PpspecError(
                f"model {model!r} is not served at {client.endpoint} (served: {_listed(served)})",
                where=client.url("/v1/models"),
                fix="pass one of the served names",
            )
        return model
    for p in preferred or []:
        if p in served:
            return p
    if len(served) == 1:
        return served[0]
    raise PpspecError(
        f"the server serves several models ({_listed(served)}) and none was chosen",
        where=client.url("/v1/models"),
        fix="verify through the profile that launched the server (served_model_name)",
    )


def _settled_delta(client: Client, before: m.Scrape, expected_tokens: int | None) -> tuple[m.Scrape, m.Scrape, bool]:
    """Scrape until the counters have caught up with our responses.

    vLLM updates its counters on the API server's output loop, which may run after the HTTP
    response for the last request went out; scraping at once can miss the last steps.
    """
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last_key = None
    while True:
        after = m.parse_prometheus(client.metrics())
        d = m.delta(before, after)
        gen = d.counter_total(m.GENERATION_TOKENS)
        key = (gen, d.counter_total(m.DRAFTS), d.counter_total(m.ACCEPTED))
        if expected_tokens is not None and gen is not None:
            if gen >= expected_tokens and key == last_key:
                return after, d, True
        elif key == last_key:
            return after, d, True
        if time.monotonic() > deadline:
            return after, d, False
        last_key = key
        time.sleep(SETTLE_POLL_S)


@dataclass(frozen=True)
class ProfileContext:
    """What the profile that launched the server tells verify about it (`ppspec verify --profile`).
    Verify against a bare endpoint passes none: the server alone is measured."""

    name: str | None = None  # recorded as the report's `profile`
    #: served names to pick, first match wins, when the server serves several models
    preferred_models: tuple[str, ...] = ()
    #: the speculative config the engine was launched with, used to detect synthetic acceptance
    spec_config: Mapping[str, Any] | None = None
    expect_speculative: bool | None = None  # True: the profile names a drafter; None: unknown
    tokenizer: str | None = None  # passed on to the printed lm_eval command


@dataclass(frozen=True)
class _ServedSpec:
    """Whether synthetic acceptance is configured, where that was seen, and the served speculative
    config when the server's dev-mode /server_info tells it."""

    synthetic: bool
    synthetic_source: str | None
    served: dict | None


@dataclass(frozen=True)
class _Sent:
    """What sending the prompts gave: one record per prompt and the client-side totals."""

    outputs: list[dict]
    latency_s: float  # summed over the requests
    wall_s: float
    usage_tokens: int | None  # completion tokens the server answered; None when one answer lacked them
    correct: int
    total: int  # items with an expected answer


def _served_spec(client: Client, spec_config: Mapping[str, Any] | None) -> _ServedSpec:
    synthetic = synthetic_acceptance_configured(spec_config)
    source = "profile" if synthetic else None
    info = client.server_info()
    served = None
    if info:
        cfg = info.get("vllm_config")
        if isinstance(cfg, dict) and isinstance(cfg.get("speculative_config"), dict):
            served = cfg["speculative_config"]
            if synthetic_acceptance_configured(served):
                synthetic, source = True, "/server_info"
    return _ServedSpec(synthetic, source, served)


def _send_prompts(
    client: Client, model: str, items: tuple[PromptItem, ...], *, max_tokens: int, seed: int, say: ProgressFn
) -> _Sent:
    """Send each prompt greedily, one at a time, and record its answer (and whether it is right)."""
    outputs: list[dict] = []
    total_latency = 0.0
    usage_tokens: int | None = 0
    correct = total = 0
    t_start = time.perf_counter()
    n = len(items)
    for i, item in enumerate(items, start=1):
        t0 = time.perf_counter()
        c = client.complete(model, item.prompt, max_tokens=max_tokens, seed=seed)
        dt = time.perf_counter() - t0
        total_latency += dt
        if c.completion_tokens is None:
            usage_tokens = None
        elif usage_tokens is not None:
            usage_tokens += c.completion_tokens
        rec: dict[str, Any] = {
            "id": item.id,
            "kind": item.kind,
            "text": c.text,
            "completion_tokens": c.completion_tokens,
            "finish_reason": c.finish_reason,
            "latency_s": round(dt, 4),
        }
        if item.answer is not None:
            got = extract_answer(c.text)
            rec["expected"] = item.answer
            rec["extracted"] = got
            rec["correct"] = got == item.answer
            total += 1
            correct += int(got == item.answer)
        outputs.append(rec)
        say(
            f"[{i:>{len(str(n))}}/{n}] {item.id:<5} "
            f"{c.completion_tokens if c.completion_tokens is not None else '?':>5} tokens  {dt:6.2f} s"
        )
    wall = time.perf_counter() - t_start
    return _Sent(outputs, total_latency, wall, usage_tokens, correct, total)


def _model_match(after: m.Scrape, chosen: str, warnings: list[str]) -> dict[str, str] | None:
    """The label filter that keeps our model's counters when several models report to /metrics."""
    names = m.model_names(after)
    if len(names) > 1:
        if chosen in names:
            return {"model_name": chosen}
        warnings.append(f"counters carry several model names ({', '.join(names)}); summing over all of them")
    return None


def _throughput(
    sent: _Sent, d: m.Scrape, match: dict[str, str] | None, gen: int | None, warnings: list[str]
) -> dict[str, Any]:
    output_tokens = sent.usage_tokens if sent.usage_tokens is not None else gen
    if sent.usage_tokens is not None and gen is not None and gen > sent.usage_tokens:
        warnings.append(
            f"the server generated {gen} tokens during the run but answered {sent.usage_tokens} to verify: "
            "other clients were served at the same time, so the counters include their traffic"
        )
    itl = m.engine_tpot_s(d, match)
    wall = sent.wall_s
    return {
        "output_tokens": output_tokens,
        "wall_time_s": round(wall, 4),
        "output_tokens_per_s": (output_tokens / wall) if output_tokens and wall > 0 else None,
        "time_per_output_token_ms": (1000.0 * sent.latency_s / output_tokens) if output_tokens else None,
        "engine_inter_token_latency_ms": 1000.0 * itl if itl is not None else None,
        "concurrency": 1,
    }


def _speculative_info(configured: bool, spec: _ServedSpec, expected: bool | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "configured": configured,
        "synthetic_acceptance": spec.synthetic,
        "synthetic_source": spec.synthetic_source,
        "expected_by_profile": expected,
    }
    if spec.served is not None:
        info["served_method"] = spec.served.get("method")
        info["served_num_speculative_tokens"] = spec.served.get("num_speculative_tokens")
    return info


@dataclass(frozen=True)
class Sampling:
    """How the prompts are sent: the seed, the prompt set (default: the built-in one), each
    request's deadline, and whether one short warm-up request goes first (not measured)."""

    seed: int = 0
    prompt_set: PromptSet | None = None
    request_timeout_s: float = 300.0
    warmup: bool = True


def run_verify(
    endpoint: str,
    *,
    model: str | None = None,
    profile: ProfileContext | None = None,
    api_key_env: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    num_prompts: int | None = None,
    sampling: Sampling = Sampling(),
    progress: ProgressFn | None = _stderr_progress,
    refuse_synthetic: bool = False,
) -> Report:
    """Measure acceptance, throughput and greedy outputs on a live server. No gates are applied.

    profile: what the profile that launched the server says (ProfileContext); its spec_config and
    the server's dev-mode /server_info are both consulted to detect synthetic acceptance.
    refuse_synthetic: raise before sending anything when synthetic acceptance is configured.
    """
    if not (1 <= max_tokens <= 1 << 16):
        raise PpspecError(
            f"--max-tokens must be in 1..65536, got {max_tokens}", where="--max-tokens", fix="use e.g. 128"
        )
    seed, prompt_set, request_timeout_s, warmup = (
        sampling.seed,
        sampling.prompt_set,
        sampling.request_timeout_s,
        sampling.warmup,
    )
    prof = profile or ProfileContext()
    ps = prompt_set or load_prompt_set()
    items = ps.select(num_prompts)
    client = Client(endpoint, api_key_env=api_key_env, timeout=request_timeout_s)
    say = progress or (lambda _line: None)

    client.health()
    chosen = _pick_model(client, model, list(prof.preferred_models))

    warnings: list[str] = []
    spec = _served_spec(client, prof.spec_config)
    if spec.synthetic and refuse_synthetic:
        refuse_if_synthetic({"rejection_sample_method": "synthetic"}, f"speculative config ({spec.synthetic_source})")

    if warmup:
        say(f"warm-up request to {client.endpoint} ({chosen})")
        client.complete(chosen, WARMUP_PROMPT, max_tokens=min(8, max_tokens), seed=seed)

    before = m.parse_prometheus(client.metrics())
    configured = m.spec_decode_configured(before)
    if prof.expect_speculative is True and not configured:
        warnings.append(
            "the profile names a drafter but the server exposes no spec-decode counters: speculation is off"
        )
    if prof.expect_speculative is False and configured:
        warnings.append("the profile names no drafter but the server runs speculative decoding")

    sent = _send_prompts(client, chosen, items, max_tokens=max_tokens, seed=seed, say=say)

    after, d, settled = _settled_delta(client, before, sent.usage_tokens)
    if not settled:
        warnings.append(
            f"the counters did not settle within {SETTLE_TIMEOUT_S:g} s after the last response; figures may miss "
            "the last steps"
        )
    configured = configured or m.spec_decode_configured(after)

    match = _model_match(after, chosen, warnings)
    stats = m.spec_decode_stats(d, match, configured=configured)
    warnings += stats.warnings()
    per_engine = {}
    engines = d.label_values(m.DRAFTS, "engine")
    if configured and len(engines) > 1:
        per_engine = {k: v.to_dict() for k, v in m.spec_decode_stats_by(d, "engine", match).items()}

    summary = m.summarize(d, match)
    throughput = _throughput(sent, d, match, summary.get("generation_tokens"), warnings)
    task = (
        {"correct": sent.correct, "total": sent.total, "score": (sent.correct / sent.total) if sent.total else None}
        if sent.total
        else None
    )

    return Report(
        endpoint=client.endpoint,
        model=chosen,
        profile=prof.name,
        prompt_set=ps.describe(),
        settings={
            "max_tokens": max_tokens,
            "num_prompts": len(items),
            "seed": seed,
            "temperature": 0.0,
            "warmup": warmup,
        },
        speculative=_speculative_info(configured, spec, prof.expect_speculative),
        counters_delta=summary,
        spec_decode=stats.to_dict(),
        per_engine=per_engine,
        throughput=throughput,
        outputs=sent.outputs,
        task_score=task,
        warnings=warnings,
        lm_eval_command=lm_eval_command(client.endpoint, chosen, prof.tokenizer),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        ppspec_version=__version__,
    )


def apply_gates(
    report: Report,
    gates: list[str],
    *,
    baseline: Mapping | None = None,
    reference: Mapping | None = None,
    min_acceptance: float = DEFAULT_MIN_ACCEPTANCE,
    parity_ratio: float = DEFAULT_PARITY_RATIO,
    task_tolerance: float = DEFAULT_TASK_TOLERANCE,
) -> Report:
    """Evaluate gates on a report and store the results in it (report.passed reflects them)."""
    results = evaluate_gates(
        report.to_dict(),
        gates,
        baseline=baseline,
        reference=reference,
        min_acceptance=min_acceptance,
        parity_ratio=parity_ratio,
        task_tolerance=task_tolerance,
    )
    report.gates = [r.to_dict() for r in results]
    return report
