"""What the predictor (planning/predict.py) is fed: the model shape from the resolved profile, the
acceptance from a report, the calibration from a file. No I/O here (commands read the files).

Shape sources, best first, each named in the prediction's notes:
- per-layer attention / MLP / expert bytes from config.json (the same formulas as planning/weights.py:
  grouped-KV attention, a gated MLP or `num_experts` gated experts of which `num_experts_per_tok`
  are routed per token), scaled to the bytes the safetensors headers hold when they are read
  (so an FP8 checkpoint reads half a bf16 one);
- a layout the formulas do not cover (MLA, mixed dense/sparse layers) falls back to the headers'
  per-layer bytes, all of them read per step (MoE sparsity not modelled: said so);
- the drafter's bytes from its headers (else its index total; else one target layer plus an
  lm_head, stated as an assumption).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Optional

from pydantic import Field

from ppspec_cli.io.records import Record
from ppspec_cli.planning.predict import Acceptance, Costs, Hardware, Measured, Shape, fit_costs

#: The largest size a config value may give the predictor (hidden size, heads, layers, experts,
#: vocabulary): anything beyond 2**31 is no model's, and would overflow the byte figures to infinity.
MAX_CONFIG_INT = 1 << 31


def _pos(cfg: dict[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_CONFIG_INT:
            return v
    return None


def layer_terms(text: dict[str, Any], dtype_bytes: int) -> tuple[float, float, int, int] | None:
    """(dense bytes per layer, bytes per expert, experts, experts per token) from a config, or None."""
    h, heads = _pos(text, "hidden_size"), _pos(text, "num_attention_heads")
    if h is None or heads is None or text.get("kv_lora_rank") or text.get("mlp_only_layers"):
        return None
    kv = _pos(text, "num_key_value_heads") or heads
    hd = _pos(text, "head_dim") or h // heads
    attn = h * heads * hd * 2 + h * kv * hd * 2
    experts = _pos(text, "num_experts", "num_local_experts", "n_routed_experts")
    if experts:
        inter = _pos(text, "moe_intermediate_size", "intermediate_size")
        top = _pos(text, "num_experts_per_tok", "num_experts_per_token")
        if inter is None or top is None or text.get("decoder_sparse_step", 1) != 1 or text.get("first_k_dense_replace"):
            return None
        return (attn + h * experts + 2 * h) * dtype_bytes, 3 * h * inter * dtype_bytes, experts, top
    inter = _pos(text, "intermediate_size")
    if inter is None:
        return None
    return (attn + 3 * h * inter + 2 * h) * dtype_bytes, 0.0, 0, 0


def formula_terms(r: Any, n: int) -> tuple[float, float, int, int] | None:
    """(dense bytes per layer, bytes per expert, experts, experts per token), averaged over the `n` decoder layers,
    from the family pack's weight layout (planning/weights.py config_tensors, quantization included); None when
    the pack declares none or a key is missing."""
    from ppspec_cli.planning import weights as wt

    t = r.target
    part = getattr(r, "target_pack", None)
    layout = part.facts.weight_layout if part is not None else None
    q = wt.quant_of(t.config or t.text)
    if layout is None or q == "unknown":
        return None
    ts = wt.config_tensors(layout, t.text or {}, t.dtype_bytes, q)
    if ts is None:
        return None
    text = t.text or {}
    ne = _pos(text, "num_experts", "num_local_experts", "n_routed_experts") or 0
    top = _pos(text, "num_experts_per_tok", "num_experts_per_token") or 0
    dense = sum(x.nbytes for x in ts if x.layer is not None and x.layer < n and x.shard != "experts") / n
    experts = sum(x.nbytes for x in ts if x.layer is not None and x.layer < n and x.shard == "experts")
    if ne and top and experts:
        return dense, experts / (n * ne), ne, top
    return dense, 0.0, 0, 0


def _header_bytes(ck: Any, pred) -> int | None:
    tensors = getattr(ck, "tensors", None)
    if not tensors:
        return None
    return sum(t.nbytes for t in tensors.values() if pred(t.name))


def _drafter_bytes(r: Any, layer: float, lm_head: float, notes: list[str]) -> float:
    d = r.drafter
    total = _header_bytes(d, lambda n: True) if d is not None else None
    if total:
        return float(total)
    if d is not None and d.index_total_size:
        return float(d.index_total_size)
    text = (d.text if d is not None else None) or {}
    n = _pos(text, "num_hidden_layers")
    db = (d.dtype_bytes if d is not None else None) or 0
    terms = layer_terms(text, db) if n and db else None
    h = _pos(text, "hidden_size")
    vocab = _pos(text, "draft_vocab_size", "vocab_size")
    if terms is not None and n and h and vocab:
        # every draft pass ends in logits: one lm_head read (its own, or the target's it shares)
        notes.append(f"drafter size estimated from its config.json: {n} layer(s) and an lm_head over {vocab} tokens")
        return n * (terms[0] + terms[3] * terms[1]) + vocab * h * db
    notes.append("drafter size unknown (its checkpoint was not read): assumed one target layer plus an lm_head")
    return layer + lm_head


def _layer_bytes(r: Any, n: int, h: int, db: int, notes: list[str]) -> tuple[float, float, int, int] | None:
    """(dense bytes per layer, bytes per expert, experts, experts per token) of the target, best
    source first (config formula, the pack's weight layout, headers, the index's total), with a note
    on where they came from; None when unknown."""
    t, plan = r.target, r.plan
    text = t.text or {}
    terms = layer_terms(text, db)
    from_formula = terms is None
    if from_formula:
        terms = formula_terms(r, n)
    real_layers = _header_bytes(t, lambda name: ".layers." in name)
    if terms is not None:
        dense, expert, ne, top = terms
        if real_layers:
            est = n * (dense + ne * expert)
            scale = real_layers / est if est else 1.0
            where = "the pack's weight layout formula" if from_formula else "config.json"
            notes.append(f"layer bytes from {where}, scaled x{scale:.2f} to the safetensors headers")
            return dense * scale, expert * scale, ne, top
        notes.append(
            "layer bytes from the pack's weight layout formula (planning/weights.py: MLA, dense and MoE layers, "
            "the config's quantization), averaged over the layers"
            if from_formula
            else "layer bytes estimated from config.json in its dtype"
        )
        return dense, expert, ne, top
    if real_layers:
        notes.append("layer layout not modelled (e.g. MLA or mixed layers): every layer's bytes read per step")
        return real_layers / n, 0.0, 0, 0
    if t.index_total_size and plan.stages and all(st.weight_bytes for st in plan.stages):
        # the index's total alone (the plan spreads it over the layers): every layer's bytes read per step
        vocab_b = (_pos(text, "vocab_size") or 0) * h * db
        body = max(0, t.index_total_size - 2 * vocab_b)
        notes.append(
            "layer bytes from the index's total_size spread over the layers (no headers, no formula for this family): "
            "every layer's bytes read per step, MoE sparsity not modelled (a pessimistic step time)"
        )
        return body / n, 0.0, 0, 0
    return None


def shape_from_resolved(r: Any) -> tuple[Shape | None, list[str]]:
    """The Shape of a resolved profile (planning/resolve.py), and notes on where each part came
    from; None (with the reason) when the plan or the target's config is missing."""
    notes: list[str] = []
    plan, t = r.plan, r.target
    if plan is None or t is None:
        return None, ["no plan (the target's config could not be read): nothing to predict"]
    text = t.text or {}
    db = t.dtype_bytes or plan.dtype_bytes
    h, heads = _pos(text, "hidden_size"), _pos(text, "num_attention_heads")
    if db is None or h is None or heads is None:
        return None, ["the target's dtype, hidden size or head count is unknown: nothing to predict"]
    n = plan.num_layers
    kv = _pos(text, "num_key_value_heads") or heads
    hd = _pos(text, "head_dim") or h // heads
    if kvr := _pos(text, "kv_lora_rank"):  # MLA: one latent of kv_lora_rank + qk_rope_head_dim per token per layer
        kv, hd = 1, (kvr + (_pos(text, "qk_rope_head_dim") or 0)) // 2
        notes.append("MLA: the KV read per token is one latent of kv_lora_rank + qk_rope_head_dim")
    vocab = _pos(text, "vocab_size") or 0
    got = _layer_bytes(r, n, h, db, notes)
    if got is None:
        return None, [
            "the target's layer sizes are unknown (no formula for its layout, no headers): nothing to predict"
        ]
    dense, expert, ne, top = got
    lm = _header_bytes(t, lambda name: name.endswith("lm_head.weight")) or vocab * h * db
    tp = r.profile.topology.tensor_parallel
    method = r.method
    parallel = False
    if method:
        from ppspec_cli.knowledge.methods import of

        m = of(method)
        parallel = bool(m and m.parallel_draft)
    drafter = _drafter_bytes(r, dense + top * expert, lm, notes) if method else 0.0
    dlayers = _pos((r.drafter.text if r.drafter else {}) or {}, "num_hidden_layers") or 1
    relay = tuple(s.relay_out.bytes_per_token if s.relay_out else 0 for s in plan.stages[:-1])
    shape = Shape(
        num_layers=n,
        hidden_size=h,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        act_bytes=db,
        layer_dense_bytes=dense,
        expert_bytes=expert,
        num_experts=ne,
        experts_per_token=top,
        lm_head_bytes=float(lm),
        drafter_bytes=drafter,
        drafter_layers=dlayers,
        parallel_draft=parallel,
        partition=tuple(plan.partition),
        relay_bytes_per_token=relay,
        tp=tp,
    )
    return shape, notes


# ---------------------------------------------------------------------------------------------
# Acceptance from a report (bench.json, a verify report: any JSON with per_position_acceptance)


#: The most positions a per-position acceptance list may hold: the largest k ppspec plans or
#: predicts (profile.drafter.num_speculative_tokens, --num-speculative-tokens: 64).
MAX_POSITIONS = 64


def _walk(doc: Any, out: list[tuple[str, list]]) -> None:
    """Every `per_position_acceptance` list in a report, with where it is (iteratively: the depth
    is bounded by the JSON reader, the width by the file's size)."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        x, at = stack.pop()
        if isinstance(x, dict):
            p = x.get("per_position_acceptance")
            if isinstance(p, list) and p:
                out.append((f"{at}.per_position_acceptance".lstrip("."), p))
            stack.extend((v, f"{at}.{str(k)[:40]}") for k, v in x.items() if k != "per_position_acceptance")
        elif isinstance(x, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(x))
    out.reverse()


def _bad_positions(p: list) -> str | None:
    """Why a per-position acceptance list is not one (None: it is): at most MAX_POSITIONS
    fractions, each a finite number in [0, 1]."""
    if len(p) > MAX_POSITIONS:
        return f"{len(p)} positions, more than the {MAX_POSITIONS} any k ppspec plans has"
    for i, x in enumerate(p):
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1  # NaN and 10**400 too
        if not ok:
            return f"position {i} is {str(x)[:40]!r}, not a fraction in [0, 1]"
    return None


def acceptance_from_report(doc: Any, where: str) -> Acceptance | None:
    """The per-position acceptance of a report: the longest lists found (the largest k measured),
    averaged position by position over every run that has one. None when there is none; a list
    that is not one (too long, a value outside [0, 1], not finite, not a number) is one error
    naming the file and the list: a prediction is never made from it."""
    from ppspec_cli.errors import EXIT_USAGE, PpspecError

    located: list[tuple[str, list]] = []
    _walk(doc, located)
    for at, p in located:
        why = _bad_positions(p)
        if why is not None:
            raise PpspecError(
                f"the acceptance report's {at[:120]} is not a per-position acceptance: {why}",
                where=where,
                fix="pass a bench.json or verify report as ppspec wrote it, or --acceptance-length",
                exit_code=EXIT_USAGE,
            )
    found = [[float(x) for x in p] for _at, p in located]
    if not found:
        return None
    longest = max(len(p) for p in found)
    rows = [p for p in found if len(p) == longest]
    mean = tuple(sum(r[i] for r in rows) / len(rows) for i in range(longest))
    return Acceptance(mean, f"read from {where} ({len(rows)} run(s), {longest} position(s))")


# ---------------------------------------------------------------------------------------------
# Calibration files

CALIBRATION_SCHEMA = "ppspec-calibration/1"


def shape_key(shape: Shape) -> dict[str, int]:
    """What a calibration entry must match: the model's size class and the parallel layout."""
    return {
        "num_layers": shape.num_layers,
        "hidden_size": shape.hidden_size,
        "act_bytes": shape.act_bytes,
        "tp": shape.tp,
        "pp": len(shape.stages),
    }


class CalibrationCosts(Record):
    """The step costs of one entry (planning/predict.Costs), each finite and in the range a fit
    gives: efficiencies in [0.01, 1] (fit_groups searches 0.30..1.00; a subnormal one divides to
    infinity), overheads clamped at 0 and under a minute."""

    eff_bw: Optional[float] = Field(default=None, ge=0.01, le=1.0)
    eff_flops: Optional[float] = Field(default=None, ge=0.01, le=1.0)
    step_overhead_ms: Optional[float] = Field(default=None, ge=0.0, le=60_000.0)
    spec_overhead_ms: Optional[float] = Field(default=None, ge=0.0, le=60_000.0)
    draft_pass_overhead_ms: Optional[float] = Field(default=None, ge=0.0, le=60_000.0)
    request_overhead_ms: Optional[float] = Field(default=None, ge=0.0, le=60_000.0)
    draft_token_overhead_ms: Optional[float] = Field(default=None, ge=0.0, le=60_000.0)


class CalibrationEntry(Record):
    hardware: str = Field(max_length=64)
    shape: dict[str, int]
    costs: CalibrationCosts
    source: Optional[str] = Field(default=None, max_length=4096)
    rms_rel_error: Optional[float] = Field(default=None, ge=0.0)


class CalibrationFile(Record):
    """A `ppspec-calibration/1` file (what bench and tools/predict_validation.py write), read through
    io/records: strict types, every number finite, at most 10,000 entries."""

    schema_: str = Field(alias="schema", max_length=64)
    entries: list[CalibrationEntry] = Field(max_length=10_000)


def calibration_entry(doc: Any, hardware: str, shape: Shape) -> dict[str, Any] | None:
    """The entry of a calibration file for this hardware and shape, or None. `doc` was validated as
    a CalibrationFile (commands/predict_render.py reads it through io/records)."""
    if not isinstance(doc, dict) or doc.get("schema") != CALIBRATION_SCHEMA:
        return None
    key = shape_key(shape)
    for e in doc.get("entries") or []:
        if (
            isinstance(e, dict)
            and e.get("hardware") == hardware
            and e.get("shape") == key
            and isinstance(e.get("costs"), dict)
        ):
            return e
    return None


def costs_of(entry: dict[str, Any]) -> Costs:
    c = CalibrationCosts.model_validate(entry["costs"])  # finite and in range, or ValidationError
    return Costs(**{f: v for f, v in c.model_dump(include=set(CalibrationCosts.model_fields)).items() if v is not None})


# ---------------------------------------------------------------------------------------------
# Calibration from a bench record (ppspec-bench/1): what `bench` (or a tool) writes


def measured_runs(bench: dict[str, Any]) -> list[Measured]:
    """bench.json's runs as the fit reads them: concurrency, k (0 = baseline), mean TPOT and the
    run's own acceptance length (1 for the baseline). Runs without a TPOT are left out."""
    out = []
    for r in bench.get("runs") or []:
        if isinstance(r, dict) and r.get("schedule"):
            continue  # a tuned arm's k changes with the batch: not one (c, k) point
        tpot = (r.get("tpot_ms") or {}).get("mean") if isinstance(r, dict) else None
        if not isinstance(tpot, (int, float)) or tpot <= 0:
            continue
        k = r.get("num_speculative_tokens") or 0
        al = r.get("acceptance_length") if k else 1.0
        if not isinstance(al, (int, float)) or al < 1.0:
            continue
        out.append(Measured(int(r["concurrency"]), int(k), float(tpot), float(al)))
    return out


def bench_context(bench: dict[str, Any]) -> int:
    """The mean context a bench request decodes at: its prompt plus half of its output."""
    s = bench.get("settings") or {}
    return int(s.get("input_len", 0)) + int(s.get("max_tokens", 0)) // 2


def calibration_from_bench(
    bench: dict[str, Any], shape: Shape, hw: Hardware, hardware_name: str, source: str
) -> dict[str, Any] | None:
    """One `ppspec-calibration/1` entry fitted on a bench record (None without usable runs)."""
    runs = measured_runs(bench)
    if not runs:
        return None
    fit = fit_costs(shape, hw, runs, ctx=bench_context(bench))
    return {
        "hardware": hardware_name,
        "shape": shape_key(shape),
        "costs": asdict(fit.costs),
        "source": f"{source} ({len(runs)} runs)",
        "rms_rel_error": round(fit.rms_rel_error, 4),
    }


def bench_calibration(bench: dict[str, Any], r: Any, source: str) -> tuple[dict[str, Any] | None, str]:
    """The calibration file a finished bench writes beside its bench.json (`ppspec plan --predict
    --calibration FILE` reads it): one entry for the device it ran on and the profile's shape, fitted
    on its static arms; or None and why not."""
    from ppspec_cli.planning import hardware as hwtable

    shape, _notes = shape_from_resolved(r)
    if shape is None:
        return None, "no calibration: the model's shape is not known from its config"
    name = hwtable.name_from_device(bench.get("device"))
    acc = hwtable.accelerator(name) if name else None
    if acc is None or name is None:
        return (
            None,
            f"no calibration: the device {str(bench.get('device'))[:60]!r} is not in the predictor's hardware table "
            "(planning/hardware.py)",
        )
    topo = r.profile.topology
    hw = Hardware(acc, hwtable.default_pp_link(acc, topo.nodes > 1), hwtable.LINKS[acc.intra_link])
    entry = calibration_from_bench(bench, shape, hw, name, source)
    if entry is None:
        return None, "no calibration: no run with a TPOT to fit"
    return {
        "schema": CALIBRATION_SCHEMA,
        "entries": [entry],
    }, f"calibration for {name} (rms error {entry['rms_rel_error']:.1%})"
