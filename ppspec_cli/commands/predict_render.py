"""`ppspec plan PROFILE --predict`: the predicted speed-up of speculation per concurrency and k
(planning/predict.py), with its assumptions. `plan` calls `prediction` and `render`; docs/predict.md."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ppspec_cli.errors import EXIT_USAGE, PpspecError
from ppspec_cli.planning import hardware as hwtable
from ppspec_cli.planning.predict import Acceptance, Costs, Hardware, Load, Prediction, predict
from ppspec_cli.planning.predict_inputs import acceptance_from_report, calibration_entry, costs_of, shape_from_resolved
from ppspec_cli.planning.predict_records import shape_class, validation

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
            exit_code=EXIT_USAGE,
        )
    return Load(opts.prompt_len, opts.output_len) if opts.prompt_len is not None else None


#: The most concurrency levels one prediction tabulates (each with every k: 64 x 65 rows at most,
#: a few MB of --json; 4096 levels x 65 k were 150 MB)
MAX_LEVELS = 64


def _ints(text: str, what: str) -> list[int]:
    parts = [x.strip() for x in text.split(",") if x.strip()]
    vals = sorted({int(x) for x in parts if x.isascii() and x.isdigit() and len(x) <= 6})
    spec = "speculative" in what
    top = MAX_SPECULATIVE_TOKENS if spec else MAX_CONCURRENCY
    if not vals or len(vals) != len(set(parts)) or vals[0] < (0 if spec else 1) or vals[-1] > top:
        raise PpspecError(
            f"{what} must be a comma-separated list of integers from {0 if spec else 1} to {top} (got {text[:80]!r})",
            where=what,
            fix="e.g. 1,4,16,32",
        )
    if len(vals) > MAX_LEVELS:
        raise PpspecError(
            f"{what} lists {len(vals)} values; a prediction tabulates at most {MAX_LEVELS}",
            where=what,
            fix="e.g. 1,2,4,8,16,32,64,128",
        )
    return vals


def options(predict: bool, opts: PredictOptions) -> PredictOptions | None:
    """The --predict options, or None without --predict; a predict option given without --predict is
    a usage error (it would be silently dropped: the plan would not say what it ignored). --hardware
    is not one of them: without --predict it names the accelerator the memory model judges."""
    if predict:
        return opts
    fields = [f for f in PredictOptions.__dataclass_fields__ if f != "hardware"]
    given = [f for f in fields if getattr(opts, f) != getattr(PredictOptions(), f)]
    if given:
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise PpspecError(
            f"{flags} only apply with --predict",
            where=flags,
            fix="add --predict, or drop " + flags,
            exit_code=EXIT_USAGE,
        )
    return None


#: Override keys of --hardware / --link and the range each must lie in (finite; a subnormal, zero,
#: negative or absurd value would give NaN, negative or infinite tables): memory bandwidth up to
#: 100 TB/s (the fastest HBM today is ~8 TB/s), tensor throughput up to 100 PFLOP/s (~2.5 dense
#: bf16 today), a link's bandwidth up to 10 TB/s (NVLink 5: 0.9 TB/s per direction) and its latency
#: up to one second.
OVERRIDES = {
    "--hardware": {"bw": (1.0, 1e5, "GB/s"), "tflops": (1e-3, 1e5, "TFLOP/s"), "mem": (1.0, 1e4, "GiB")},
    "--link": {"bw": (1e-3, 1e4, "GB/s"), "lat": (0.0, 1e6, "us")},
}


def _overrides(spec: str, what: str) -> tuple[str, dict[str, float]]:
    """NAME[,key=value...] -> (NAME, {key: value}); every key known and every value finite and in
    its range (OVERRIDES), else one usage error naming it. `mem=` (--hardware) is the memory model's
    (planning/memory_inputs.py): checked here, not a predictor override."""
    from ppspec_cli.io.terminal import one_line

    allowed = OVERRIDES[what]
    example = "e.g. h200,bw=4000,tflops=900" if what == "--hardware" else "e.g. tcp-100g,bw=8.3,lat=50"
    name, *rest = [p.strip() for p in spec.split(",")]
    out: dict[str, float] = {}
    for p in rest:
        k, _, v = p.partition("=")
        k = k.strip().lower() if k.strip().lower() == "mem" else k
        if k not in allowed:
            raise PpspecError(
                f"{what}: {one_line(k, 40)!r} is not an override (known: {', '.join(allowed)})",
                where=what,
                fix=example,
                exit_code=EXIT_USAGE,
            )
        lo, hi, unit = allowed[k]
        try:
            x = float(v) if v.strip().isascii() else float("nan")
        except ValueError:
            x = float("nan")
        subnormal = x != 0 and abs(x) < sys.float_info.min  # 1e-310: a number no hardware has, and a divisor
        if not (math.isfinite(x) and lo <= x <= hi and (x > 0 or lo == 0)) or subnormal:
            raise PpspecError(
                f"{what}: {k}={one_line(v, 40)} is not a number in [{lo:g}, {hi:g}] {unit}",
                where=what,
                fix=example,
                exit_code=EXIT_USAGE,
            )
        out[k] = x
    return name.lower(), out


def _hardware(r: Any, opts: PredictOptions, notes: list[str]) -> tuple[Hardware, str]:
    default = "cpu" if r.platform == "cpu" else "h100"
    name, ov = _overrides(opts.hardware or r.profile.hardware or default, "--hardware")
    acc = hwtable.accelerator(name)
    if acc is None:
        raise PpspecError(
            f"--hardware {name!r} is not in the table",
            where="--hardware",
            fix=f"one of {', '.join(hwtable.ACCELERATORS)} (overrides: NAME,bw=GB/s,tflops=N)",
        )
    if not opts.hardware and not r.profile.hardware:
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


def _calibration(r: Any, opts: PredictOptions, hw_name: str, shape, notes: list[str]) -> tuple[Costs, dict[str, Any]]:
    from ppspec_cli.io import records
    from ppspec_cli.planning.predict_inputs import CalibrationFile

    path = opts.calibration
    beside = None
    if path is None and r.profile_path:
        cand = Path(r.profile_path).resolve().parent / CALIBRATION_FILE
        path = beside = str(cand) if cand.is_file() else None
    if path:
        try:  # typed: every cost finite and in range, or one error naming the file and the field
            _model, doc = records.load(
                path,
                CalibrationFile,
                what="calibration",
                limit=REPORT_LIMIT,
                fix="pass a file written by `ppspec bench` or tools/predict_validation.py",
            )
        except PpspecError as e:
            if beside is None:
                raise
            # not asked for: a file beside the profile that is not a calibration is named, never used
            notes.append(f"{CALIBRATION_FILE} beside the profile is not used: {e.what}")
            doc = None
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
    return Costs(), {"mode": "roofline", "file": None, "costs": asdict(Costs())}


class DoesNotFit(Exception):
    """The layout does not fit the hardware's memory: no prediction (the reason, for the output)."""

    def __init__(self, reason: str, memory: dict[str, Any]):
        super().__init__(reason)
        self.reason, self.memory = reason, memory


def _memory(r: Any, hw_name: str) -> Any:
    """The memory plan on the prediction's accelerator (the profile's `hardware`, --hardware, or the default)."""
    from dataclasses import replace

    from ppspec_cli.planning.memory_inputs import memory_of

    spec = r.profile.hardware or hw_name
    if r.platform == "cpu" or spec == r.profile.hardware:
        return r.memory if r.memory is not None else memory_of(r)
    return memory_of(replace(r, profile=r.profile.model_copy(update={"hardware": spec})))


def _kv_assumed(mem: Any, cs: list[int], ctx: int) -> dict[str, Any] | None:
    """What the KV cache holds at each concurrency level of `ctx` tokens (c x ctx against its capacity)."""
    from ppspec_cli.planning.memory_inputs import tokens_for

    mp = mem.plan if mem is not None else None
    if mp is None or mp.engine_tokens is None:
        return None
    return {
        "kv_tokens": mp.engine_tokens,
        "limiting_stage": mp.limiting,
        "hardware": None if mem.device is None else mem.device.name,
        "per_concurrency": [tokens_for(mp, c, ctx) for c in cs],
    }


def _fits(mem: Any) -> None:
    """Raise DoesNotFit when the memory model refuses the layout (weights over budget, or no room for one
    max-model-len request)."""
    mp = mem.plan if mem is not None else None
    if mp is None or mp.budget is None:
        return
    over = mp.over_budget()
    short = mp.short_of_one_request()
    if not over and not short:
        return
    x = max(over, key=lambda st: st.weights) if over else short[0]
    why = (
        f"stage {x.rank}'s weights on one GPU ({x.weights / (1 << 30):.1f} GiB) exceed its budget "
        f"({mp.budget / (1 << 30):.1f} GiB)"
        if over
        else f"stage {x.rank}'s KV cache cannot hold one request of max-model-len {mp.max_model_len:,}"
    )
    raise DoesNotFit(
        f"not predicted: the layout does not fit {mem.device.name if mem.device else 'the hardware'}: {why} "
        "(memory-weights-exceed / kv-cache-too-small above)",
        mp.to_json(),
    )


def prediction(r: Any, opts: PredictOptions) -> Prediction:
    """The prediction for a resolved profile; PpspecError when it cannot be made, DoesNotFit when the layout
    does not fit the hardware's memory (docs/memory.md)."""
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
    mem = _memory(r, opts.hardware or hw_name)
    _fits(mem)
    acc = _acceptance(r, opts)
    costs, cal = _calibration(r, opts, hw_name, shape, notes)
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
    pred.validation = validation(shape_class(r.target.text, r.profile.topology.pipeline_parallel, shape.num_experts))
    pred.assumptions = {
        "hardware": {
            "accelerator": asdict(hw.accelerator),
            "pp_link": asdict(hw.pp_link),
            "tp_link": asdict(hw.tp_link),
        },
        "acceptance": {"source": acc.source, "per_position": [round(x, 4) for x in acc.per_position]},
        "context_length": ctx,
        "kv_cache": _kv_assumed(mem, cs, ctx),
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
            f"{lv.concurrency:>5} {lv.k:>2} {lv.tpot_ms:>9.2f} {lv.output_tokens_per_s:>10.1f} "
            f"{lv.acceptance_length:>5.2f} {lv.speedup:>8.2f}x  {j['bound']}"
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
            f"per round {j['round_ms']:.2f} ms ({j['bound']}-bound, {j['batches_in_flight']} batch(es) of "
            f"{j['batch_size']:g}): "
            f"stages {' + '.join(f'{x:.2f}' for x in t['stages'])}, hops {sum(t['hops']):.2f}, drafter "
            f"{t['drafter']:.2f}, "
            f"broadcast {t['broadcast']:.2f}, overheads {t['overhead']:.2f} ms; {b.acceptance_length:.2f} tokens per "
            "round",
        )
    acc = hw["accelerator"]
    lines += _wrap(
        "hardware: ",
        f"{acc['name']} ({acc['memory_bandwidth_gbs']:g} GB/s, {acc['bf16_tflops']:g} TFLOPS bf16); pipeline link "
        f"{hw['pp_link']['name']} ({hw['pp_link']['bandwidth_gbs']:g} GB/s, {hw['pp_link']['latency_us']:g} us); TP "
        f"x{a['tensor_parallel']}, stages {a['partition']}, context {a['context_length']} tokens; "
        + (
            f"load: {a['load']['prompt_len']}-token prompts, {a['load']['output_len']} output tokens (each wave's "
            "prefill counted)"
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
        lines += _wrap("calibration: ", "none: roofline with default efficiencies and overheads, calibration-free")
    lines += _wrap("validation: ", pred.validation["line"])
    kv = a.get("kv_cache")
    if kv:
        per = ", ".join(
            f"c={x['concurrency']} {x['tokens_needed']:,}"
            + ("" if x["fits"] else " (over: vLLM would queue or preempt)")
            for x in kv["per_concurrency"]
        )
        lines += _wrap(
            "KV cache assumed: ",
            f"{kv['kv_tokens']:,} tokens on {kv['hardware']} (stage {kv['limiting_stage']} limits it; docs/memory.md); "
            f"tokens at context {a['context_length']}: {per}",
        )
    for n in a["notes"]:
        lines += _wrap("note: ", n)
    return "\n".join(lines)
