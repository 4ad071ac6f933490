"""`ppspec plan PROFILE --predict`: the predicted speed-up of speculation per concurrency and k
(planning/predict.py), with its assumptions. `plan` calls `prediction` and `render`; docs/predict.md."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ppspec_cli.errors import PpspecError
from ppspec_cli.planning import hardware as hwtable
from ppspec_cli.planning.predict import ROOFLINE_ERROR, Acceptance, Costs, Hardware, Load, Prediction, predict
from ppspec_cli.planning.predict_inputs import acceptance_from_report, calibration_entry, costs_of, shape_from_resolved

#: the largest report or calibration file read: what verify and bench read their own files with
#: (verify/report.py MAX_REPORT_BYTES, verify/bench/results.py MAX_RECORD_BYTES: 64 MiB)
REPORT_LIMIT = 64 << 20
#: when neither --acceptance-length nor --acceptance-from is given: a constant conditional
#: acceptance of 0.6 per position (an assumption, printed; EAGLE3 heads on chat prompts accept
#: more, planted or mismatched drafters far less)
DEFAULT_CONDITIONAL_ACCEPTANCE = 0.6
#: the context (prompt + generated) each request's KV read covers, unless --context-length
DEFAULT_CONTEXT = 1024
CALIBRATION_FILE = "calibration.json"
#: the highest concurrency level accepted: vLLM 0.32's largest default max_num_seqs is 1024
#: (engine/arg_utils.py, GPUs of >= 70 GiB), x4 margin
MAX_CONCURRENCY = 4096
#: the largest k accepted: the largest draft blocks shipped are 16 tokens (z-lab/Qwen3-8B-DFlash-b16,
#: tests/fixtures/models), x4 margin
MAX_SPECULATIVE_TOKENS = 64


@dataclass(frozen=True)
class PredictOptions:
    hardware: str | None = None
    link: str | None = None
    acceptance_length: float | None = None
    acceptance_from: str | None = None
    concurrency: str = "1,4,16,32"
    num_speculative_tokens: str | None = None
    context_length: int | None = None
    calibration: str | None = None
    prompt_len: int | None = None
    output_len: int | None = None


def _load(opts: PredictOptions) -> Load | None:
    """--prompt-len and --output-len together (each wave's prefill counted), or neither (decode only)."""
    if (opts.prompt_len is None) != (opts.output_len is None):
        raise PpspecError(
            "--prompt-len and --output-len go together",
            where="--prompt-len/--output-len",
            fix="give both (the load bench runs: --prompt-len 128 --output-len 128), or neither for decode only",
            exit_code=2,
        )
    return Load(opts.prompt_len, opts.output_len) if opts.prompt_len is not None else None


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        vals = []
    spec = "speculative" in what
    if not vals or vals[0] < (0 if spec else 1) or vals[-1] > (MAX_SPECULATIVE_TOKENS if spec else MAX_CONCURRENCY):
        top = MAX_SPECULATIVE_TOKENS if spec else MAX_CONCURRENCY
        raise PpspecError(
            f"{what} must be a comma-separated list of integers from {0 if spec else 1} to {top} (got {text!r})",
            where=what,
            fix="e.g. 1,4,16,32",
        )
    return vals


def _overrides(spec: str, what: str) -> tuple[str, dict[str, float]]:
    """NAME[,key=value...] -> (NAME, {key: value})."""
    name, *rest = [p.strip() for p in spec.split(",")]
    out: dict[str, float] = {}
    for p in rest:
        k, _, v = p.partition("=")
        try:
            out[k] = float(v)
        except ValueError:
            raise PpspecError(
                f"{what}: {p!r} is not key=number",
                where=what,
                fix="e.g. h200,bw=4000,tflops=900 or tcp-100g,bw=8.3,lat=50",
            ) from None
        if out[k] <= 0:
            raise PpspecError(f"{what}: {k} must be positive", where=what, fix="give a positive number")
    return name.lower(), out


def _hardware(r: Any, opts: PredictOptions, notes: list[str]) -> tuple[Hardware, str]:
    default = "cpu" if r.platform == "cpu" else "h100"
    name, ov = _overrides(opts.hardware or default, "--hardware")
    acc = hwtable.accelerator(name)
    if acc is None:
        raise PpspecError(
            f"--hardware {name!r} is not in the table",
            where="--hardware",
            fix=f"one of {', '.join(hwtable.ACCELERATORS)} (overrides: NAME,bw=GB/s,tflops=N)",
        )
    if not opts.hardware:
        notes.append(f"hardware not given: {name} assumed (--hardware)")
    acc = replace(
        acc, memory_bandwidth_gbs=ov.get("bw", acc.memory_bandwidth_gbs), bf16_tflops=ov.get("tflops", acc.bf16_tflops)
    )
    topo = r.profile.topology
    gpn = topo.gpus_per_node or topo.tensor_parallel * topo.pipeline_parallel
    multi = topo.nodes > 1 or topo.tensor_parallel * topo.pipeline_parallel > gpn
    if opts.link:
        lname, lov = _overrides(opts.link, "--link")
        lk = hwtable.link(lname)
        if lk is None:
            raise PpspecError(
                f"--link {lname!r} is not in the table",
                where="--link",
                fix=f"one of {', '.join(hwtable.LINKS)} (overrides: NAME,bw=GB/s,lat=us)",
            )
        lk = replace(lk, bandwidth_gbs=lov.get("bw", lk.bandwidth_gbs), latency_us=lov.get("lat", lk.latency_us))
    else:
        lk = hwtable.default_pp_link(acc, multi)
        if topo.pipeline_parallel > 1:
            notes.append(
                f"pipeline link not given: {lk.name} assumed ({'across nodes' if multi else 'inside a node'}; --link)"
            )
    return Hardware(acc, lk, hwtable.LINKS[acc.intra_link]), name


def _acceptance(r: Any, opts: PredictOptions) -> Acceptance:
    from ppspec_cli.io.safeio import read_json

    k_ref = (r.profile.drafter.num_speculative_tokens if r.profile.drafter else None) or 1
    if opts.acceptance_from:
        doc = read_json(
            opts.acceptance_from,
            limit=REPORT_LIMIT,
            what="acceptance report",
            fix="pass a bench.json or a verify report",
        )
        acc = acceptance_from_report(doc, opts.acceptance_from)
        if acc is None:
            raise PpspecError(
                "the report has no per-position acceptance",
                where=opts.acceptance_from,
                fix="pass a bench.json or verify report of a speculative run, or --acceptance-length",
            )
        return acc
    if opts.acceptance_length is not None:
        if not 1.0 <= opts.acceptance_length <= k_ref + 1:
            raise PpspecError(
                f"--acceptance-length must lie in [1, {k_ref + 1}] for the profile's num_speculative_tokens {k_ref}",
                where="--acceptance-length",
                fix="the mean tokens per round, bonus token included",
            )
        return Acceptance.from_length(
            opts.acceptance_length,
            k_ref,
            f"given: AL {opts.acceptance_length:g} at k={k_ref}, constant conditional acceptance per position",
        )
    a = DEFAULT_CONDITIONAL_ACCEPTANCE
    return Acceptance(
        tuple(a ** (i + 1) for i in range(8)),
        f"ASSUMED: conditional acceptance {a} per position (no --acceptance-length / --acceptance-from)",
    )


def _calibration(r: Any, opts: PredictOptions, hw_name: str, shape) -> tuple[Costs, dict[str, Any]]:
    from ppspec_cli.io.safeio import read_json

    path = opts.calibration
    if path is None and r.profile_path:
        cand = Path(r.profile_path).resolve().parent / CALIBRATION_FILE
        path = str(cand) if cand.is_file() else None
    if path:
        doc = read_json(
            path, limit=REPORT_LIMIT, what="calibration file", fix="pass a file written by tools/predict_validation.py"
        )
        entry = calibration_entry(doc, hw_name, shape)
        if entry is not None:
            return costs_of(entry), {
                "mode": "calibrated",
                "file": path,
                "fitted_on": entry.get("source"),
                "rms_rel_error": entry.get("rms_rel_error"),
                "costs": asdict(costs_of(entry)),
            }
        if opts.calibration:
            raise PpspecError(
                f"no entry for hardware {hw_name!r} and this model shape",
                where=path,
                fix="calibrate on this hardware and shape, or drop --calibration for the roofline",
            )
    return Costs(), {
        "mode": "roofline",
        "file": None,
        "costs": asdict(Costs()),
        "expected_error": {
            "mean": ROOFLINE_ERROR[0],
            "worst": ROOFLINE_ERROR[1],
            "on": "docs/prediction-validation.md (roofline rows, the H200 PP=1 record)",
        },
    }


def prediction(r: Any, opts: PredictOptions) -> Prediction:
    """The prediction for a resolved profile; PpspecError when it cannot be made."""
    shape, notes = shape_from_resolved(r)
    if shape is None:
        raise PpspecError(
            notes[0],
            where=r.profile_path or "profile",
            fix="make the target's config.json readable (see the findings), then --predict",
        )
    if not r.method:
        raise PpspecError(
            "the profile has no drafter: nothing to predict", where="drafter", fix="add a drafter: section"
        )
    hw, hw_name = _hardware(r, opts, notes)
    acc = _acceptance(r, opts)
    costs, cal = _calibration(r, opts, hw_name, shape)
    cs = _ints(opts.concurrency, "--concurrency")
    k_prof = r.profile.drafter.num_speculative_tokens if r.profile.drafter else None
    ks = (
        _ints(opts.num_speculative_tokens, "--num-speculative-tokens")
        if opts.num_speculative_tokens
        else sorted({1, 2, 3, *([k_prof] if k_prof else [])})
    )
    mml = r.profile.engine.get("max-model-len") if isinstance(r.profile.engine, dict) else None
    load = _load(opts)
    ctx = opts.context_length or (
        load.prompt_len + load.output_len // 2
        if load
        else min(DEFAULT_CONTEXT, mml if isinstance(mml, int) and mml > 0 else DEFAULT_CONTEXT)
    )
    pred = predict(shape, hw, costs, acc, concurrency=cs, ks=[k for k in ks if k > 0], ctx=ctx, load=load)
    pred.calibration = cal
    pred.assumptions = {
        "hardware": {
            "accelerator": asdict(hw.accelerator),
            "pp_link": asdict(hw.pp_link),
            "tp_link": asdict(hw.tp_link),
        },
        "acceptance": {"source": acc.source, "per_position": [round(x, 4) for x in acc.per_position]},
        "context_length": ctx,
        "load": {"prompt_len": load.prompt_len, "output_len": load.output_len} if load else None,
        "partition": list(shape.stages),
        "tensor_parallel": shape.tp,
        "model": {
            "layer_bytes": round(shape.layer_dense_bytes),
            "expert_bytes": round(shape.expert_bytes),
            "experts": shape.num_experts,
            "experts_per_token": shape.experts_per_token,
            "lm_head_bytes": round(shape.lm_head_bytes),
            "drafter_bytes": round(shape.drafter_bytes),
            "drafter_passes": "1 per round (block-parallel)" if shape.parallel_draft else "k per round",
        },
        "notes": notes,
    }
    return pred


def _wrap(prefix: str, text: str, width: int = 80) -> list[str]:
    out, line = [], prefix
    for word in text.split():
        if len(line) + len(word) + 1 > width and line.strip():
            out.append(line.rstrip())
            line = " " * len(prefix)
        line += word + " "
    out.append(line.rstrip())
    return out


def render(pred: Prediction) -> str:
    """The human form: one row per (concurrency, k), then best k, crossover, schedule, assumptions (80 columns)."""
    a = pred.assumptions
    hw = a["hardware"]
    lines = [
        "prediction (no GPU time spent: a cost model, docs/predict.md)",
        f"{'c':>5} {'k':>2} {'TPOT ms':>9} {'tok/s':>10} {'AL':>5} {'speed-up':>9}  bound",
    ]
    for lv in pred.levels:
        j = lv.to_json()
        lines.append(
            f"{lv.concurrency:>5} {lv.k:>2} {lv.tpot_ms:>9.2f} {lv.output_tokens_per_s:>10.1f} {lv.acceptance_length:>5.2f} {lv.speedup:>8.2f}x  {j['bound']}"
        )
    lines += _wrap("best k: ", ", ".join(f"c={b.concurrency} k={b.k} ({b.speedup:.2f}x)" for b in pred.best))
    cx = pred.crossover
    hi = max(b.concurrency for b in pred.best)
    lines += _wrap(
        "crossover: ",
        (
            "speculation pays at no level"
            if cx is None
            else f"speculation still pays at c={cx}"
            + (" (the highest level: the crossover lies above)" if cx == hi else "")
        ),
    )
    lines += _wrap("schedule [[batch_lo, batch_hi, k], ...]: ", str(pred.schedule))
    for b in {pred.best[0].concurrency: pred.best[0], pred.best[-1].concurrency: pred.best[-1]}.values():
        j = b.to_json()
        t = j["terms_ms"]
        lines += _wrap(
            f"why c={b.concurrency} k={b.k}: ",
            f"per round {j['round_ms']:.2f} ms ({j['bound']}-bound, {j['batches_in_flight']} batch(es) of {j['batch_size']:g}): "
            f"stages {' + '.join(f'{x:.2f}' for x in t['stages'])}, hops {sum(t['hops']):.2f}, drafter {t['drafter']:.2f}, "
            f"broadcast {t['broadcast']:.2f}, overheads {t['overhead']:.2f} ms; {b.acceptance_length:.2f} tokens per round",
        )
    acc = hw["accelerator"]
    lines += _wrap(
        "hardware: ",
        f"{acc['name']} ({acc['memory_bandwidth_gbs']:g} GB/s, {acc['bf16_tflops']:g} TFLOPS bf16); pipeline link {hw['pp_link']['name']} ({hw['pp_link']['bandwidth_gbs']:g} GB/s, {hw['pp_link']['latency_us']:g} us); TP x{a['tensor_parallel']}, stages {a['partition']}, context {a['context_length']} tokens; "
        + (
            f"load: {a['load']['prompt_len']}-token prompts, {a['load']['output_len']} output tokens (each wave's prefill counted)"
            if a.get("load")
            else "decode rounds only (--prompt-len/--output-len add the prefill)"
        ),
    )
    lines += _wrap(
        "acceptance: ",
        a["acceptance"]["source"]
        + "; per position "
        + " ".join(f"{x:.2f}" for x in a["acceptance"]["per_position"][:6]),
    )
    cal = pred.calibration
    if cal["mode"] == "calibrated":
        lines += _wrap(
            "calibration: ", f"{cal['file']} (fitted on {cal.get('fitted_on')}; RMS error {cal.get('rms_rel_error')})"
        )
    else:
        mean, worst = ROOFLINE_ERROR
        lines += _wrap(
            "calibration: ",
            f"none: roofline with default efficiencies and overheads (calibration-free; on the one GPU record its speed-up error was {100 * mean:.1f}% mean, {100 * worst:.1f}% worst: docs/prediction-validation.md)",
        )
    for n in a["notes"]:
        lines += _wrap("note: ", n)
    return "\n".join(lines)
