"""Predict before you spend GPU time: a cost model of speculative decoding under pipeline parallelism.

Pure arithmetic (no vLLM, no torch, no I/O). docs/predict.md states every term with its source;
tests/test_predict.py checks each against a hand computation. Units: bytes, FLOPs, seconds inside,
milliseconds at the edges (`tpot_ms`, the overhead terms).

One *round* of a request = one target forward (verify) of q = k+1 tokens per request (q = 1 without
speculation) through every stage, the drafter's k proposals on the last stage, and the sampled
tokens sent back to stage 0. A round emits AL(k) tokens per request on average (the acceptance
model below), so TPOT = round / AL(k) and output tokens/s = c * AL(k) / round.

Pipeline (vLLM V1/V2 schedule a new batch while earlier ones are in flight, at most PP batches):
c requests in flight form m = min(c, PP) batches of b = c/m requests. A request's round is
    round = max(latency, m * bottleneck)
- latency: one batch through all stages, hops, the drafter, the broadcast back and the fixed
  overheads (the pipeline is not full when m < PP: the fill term);
- bottleneck: the busiest stage (the last one carries the lm_head, the drafter and the per-round
  overheads) or the busiest link, times the m batches that take turns on it.

Stage time (roofline, per batch): max(bytes / (bandwidth * eff_bw), flops / (peak * eff_flops))
over the stage's layers, plus the TP all-reduces (two per layer: attention and MLP outputs).
- bytes: attention + dense MLP weights, the MoE experts the batch touches, the KV cache read at the
  context length; the lm_head on the last stage.
- flops: 2 * active parameters per token * tokens, plus attention 4 * ctx * heads * head_dim per
  token per layer (QK^T and PV).
- MoE experts touched by N tokens with top-k routing over E experts, uniform routing assumed:
  E * (1 - (1 - k/E)^N) (the expected number of distinct experts; occupancy formula).
Hop (stage s -> s+1, per batch): latency + b*q*(2*hidden*act_bytes + relay_bytes_per_token) / bw
(vLLM sends the hidden state and the residual; EAGLE3-family drafters add the relayed taps,
planning/plan.py's Relay).
Drafter (last stage, serial after the verify): `passes` forward passes (k for chain drafters,
1 for block-parallel ones, knowledge/methods); the first reads the verified b*q tokens, the rest b.
Broadcast back (PP > 1): latency + b*(2k+1) token ids of 8 bytes / bw on the pipeline link.
Fixed overheads (per batch, on the last stage): step_overhead_ms (scheduling, sampling, launches:
every round), spec_overhead_ms (rejection sampler, draft bookkeeping: speculative rounds),
draft_pass_overhead_ms (per drafter pass: launches).

Acceptance: per-position rates p_i (the fraction of rounds whose draft position i was accepted,
vLLM's per-position acceptance, verify/metrics.py) give AL(k) = 1 + sum_{i<k} p_i. Positions past
those measured continue geometrically with the last measured ratio p_i/p_{i-1} (or p_0 when one
position is known). A mean acceptance length AL at a reference k is read as a constant conditional
acceptance a: p_i = a^(i+1), AL(k) = sum_{i=0..k} a^i, a solved from AL (the i.i.d. model of
Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ppspec_cli.planning.hardware import Accelerator, Link

#: bytes of one sampled / draft token id sent back to stage 0 (int64)
TOKEN_ID_BYTES = 8


# ---------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Shape:
    """The target and drafter as the cost model sees them (per layer bytes in the served dtype)."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    act_bytes: int  # activation / KV element size (the dtype's bytes)
    layer_dense_bytes: float  # per layer: attention + dense MLP + norms (+ router), read every step
    expert_bytes: float = 0.0  # per expert of one layer (0: dense model)
    num_experts: int = 0
    experts_per_token: int = 0
    lm_head_bytes: float = 0.0
    drafter_bytes: float = 0.0  # read once per drafter pass
    drafter_layers: int = 1  # drafter decoder layers (their KV is read per pass)
    parallel_draft: bool = False  # one pass for all k (DFlash-style block drafters)
    partition: tuple[int, ...] = ()  # layers per stage (empty: one stage of num_layers)
    relay_bytes_per_token: tuple[int, ...] = ()  # taps relayed on each hop s -> s+1 (speculative arms)
    tp: int = 1
    kv_bytes: int = 0  # KV element size if it differs from act_bytes (0: act_bytes)

    @property
    def stages(self) -> tuple[int, ...]:
        return self.partition or (self.num_layers,)


@dataclass(frozen=True)
class Hardware:
    accelerator: Accelerator
    pp_link: Link  # between pipeline stages (and the broadcast back)
    tp_link: Link  # inside a TP group


#: Per request in a batch, every round (scheduling, input preparation, sampling and output processing
#: grow with the requests a step carries), and per request and draft token in a speculative round
#: (rejection sampling, draft bookkeeping, the drafter's per-request work): the terms that carry the
#: measured concurrency trend (issue 45 item 4). Defaults from the least-squares fit of the H200 PP=1
#: record's 16 runs with these two terms (docs/prediction-validation.md, "The trend across concurrency").
REQUEST_OVERHEAD_MS = 0.012
DRAFT_TOKEN_OVERHEAD_MS = 0.005


@dataclass(frozen=True)
class Costs:
    """The efficiency and overhead terms: calibrated from bench records, else these defaults.

    Defaults (roofline mode) are assumptions, not measurements: decode kernels reach about 70% of
    peak memory bandwidth and 50% of peak tensor throughput; vLLM spends about a millisecond per
    round outside the model (scheduler, sampler, launches) on a GPU; a speculative round adds a few
    tenths (rejection sampling, draft bookkeeping) and each drafter pass a tenth (its launches).
    docs/prediction-validation.md gives the error these defaults make against measured runs (they
    were set knowing the H200 record's figures, though not fitted to them: that error is optimistic)."""

    eff_bw: float = 0.7
    eff_flops: float = 0.5
    step_overhead_ms: float = 1.0
    spec_overhead_ms: float = 0.3
    draft_pass_overhead_ms: float = 0.1
    request_overhead_ms: float = REQUEST_OVERHEAD_MS
    draft_token_overhead_ms: float = DRAFT_TOKEN_OVERHEAD_MS


#: the calibration-free (roofline) speed-up error on the project's GPU record (mean, worst over its
#: 12 speculative arms; docs/prediction-validation.md, kept equal by tests/test_predict.py): the
#: label a prediction without calibration carries
ROOFLINE_ERROR = (0.033, 0.051)


# ---------------------------------------------------------------------------------------------
# Acceptance


def geometric_rate(al: float, k: int) -> float:
    """The constant conditional acceptance a with sum_{i=0..k} a^i == al (bisection; al in [1, k+1])."""
    if k <= 0 or al <= 1.0:
        return 0.0
    if al >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(k + 1)) < al:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance p_0, p_1, ... (fraction of rounds accepting position i) and where it came from."""

    per_position: tuple[float, ...]
    source: str

    @classmethod
    def from_length(cls, al: float, k_ref: int, source: str) -> Acceptance:
        a = geometric_rate(al, k_ref)
        return cls(tuple(a ** (i + 1) for i in range(max(k_ref, 1))), source)

    def position(self, i: int) -> float:
        p = self.per_position
        if not p:
            return 0.0
        if i < len(p):
            return p[i]
        ratio = p[-1] / p[-2] if len(p) >= 2 and p[-2] > 0 else p[0]
        return p[-1] * min(1.0, ratio) ** (i - len(p) + 1)

    def length(self, k: int) -> float:
        """AL(k): tokens a request emits per round with k draft tokens (1 without speculation)."""
        return 1.0 + sum(self.position(i) for i in range(k))


# ---------------------------------------------------------------------------------------------
# The step model


def experts_touched(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts hit by `tokens` tokens, each routed to top_k of num_experts uniformly."""
    if num_experts <= 0 or top_k <= 0 or tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


@dataclass(frozen=True)
class Work:
    bytes: float
    flops: float


def stage_work(shape: Shape, layers: int, *, batch: float, tokens: int, ctx: int, last: bool) -> Work:
    """Bytes and FLOPs of one batch (batch requests x tokens each) through `layers` target layers."""
    n = batch * tokens
    kvb = shape.kv_bytes or shape.act_bytes
    touched = experts_touched(shape.num_experts, shape.experts_per_token, n)
    weights = layers * (shape.layer_dense_bytes + touched * shape.expert_bytes)
    kv = batch * ctx * layers * 2 * shape.num_kv_heads * shape.head_dim * kvb
    active_per_token = (
        layers * (shape.layer_dense_bytes + shape.experts_per_token * shape.expert_bytes) / shape.act_bytes
    )
    attn = 4.0 * n * ctx * shape.num_heads * shape.head_dim * layers
    flops = 2.0 * n * active_per_token + attn
    if last:
        weights += shape.lm_head_bytes
        flops += 2.0 * n * shape.lm_head_bytes / shape.act_bytes
    return Work(weights + kv, flops)


def compute_s(work: Work, acc: Accelerator, costs: Costs, tp: int) -> float:
    """Roofline time of `work` spread over a TP group."""
    mem = work.bytes / tp / (acc.memory_bandwidth_gbs * 1e9 * costs.eff_bw)
    fl = work.flops / tp / (acc.bf16_tflops * 1e12 * costs.eff_flops)
    return max(mem, fl)


def allreduce_s(shape: Shape, layers: int, n_tokens: float, lk: Link) -> float:
    """Two ring all-reduces per layer of n_tokens hidden vectors across the TP group."""
    if shape.tp <= 1:
        return 0.0
    payload = n_tokens * shape.hidden_size * shape.act_bytes
    per = lk.latency_us * 1e-6 + 2 * (shape.tp - 1) / shape.tp * payload / (lk.bandwidth_gbs * 1e9)
    return 2 * layers * per


def hop_s(shape: Shape, hop: int, *, n_tokens: float, spec: bool, lk: Link) -> tuple[float, float]:
    """(latency part, bandwidth part) of sending one batch from stage `hop` to `hop`+1."""
    relay = shape.relay_bytes_per_token[hop] if spec and hop < len(shape.relay_bytes_per_token) else 0
    size = n_tokens * (2 * shape.hidden_size * shape.act_bytes + relay)
    return lk.latency_us * 1e-6, size / (lk.bandwidth_gbs * 1e9)


def draft_s(shape: Shape, *, batch: float, k: int, ctx: int, hw: Hardware, costs: Costs) -> float:
    """The drafter's serial time on the last stage: its passes, each reading its weights and KV."""
    if k <= 0 or shape.drafter_bytes <= 0:
        return 0.0 if k <= 0 else k * costs.draft_pass_overhead_ms * 1e-3
    passes = 1 if shape.parallel_draft else k
    total = 0.0
    for j in range(passes):
        n = batch * ((k + 1) if j == 0 or shape.parallel_draft else 1)
        kv = (
            batch
            * ctx
            * shape.drafter_layers
            * 2
            * shape.num_kv_heads
            * shape.head_dim
            * (shape.kv_bytes or shape.act_bytes)
        )
        work = Work(shape.drafter_bytes + kv, 2.0 * n * shape.drafter_bytes / shape.act_bytes)
        total += compute_s(work, hw.accelerator, costs, 1) + costs.draft_pass_overhead_ms * 1e-3
    return total


@dataclass(frozen=True)
class Round:
    """The terms of one round, seconds (what `--json` prints per level, so a user can see why)."""

    concurrency: int
    k: int
    batches: int
    batch: float
    stage_s: tuple[float, ...]
    hop_s: tuple[float, ...]
    draft_s: float
    broadcast_s: float
    overhead_s: float
    latency_s: float
    bottleneck_s: float
    round_s: float
    tokens_per_round: float

    @property
    def tpot_ms(self) -> float:
        return 1e3 * self.round_s / self.tokens_per_round

    @property
    def output_tokens_per_s(self) -> float:
        return self.concurrency * self.tokens_per_round / self.round_s


def round_time(
    shape: Shape, hw: Hardware, costs: Costs, acc: Acceptance, *, concurrency: int, k: int, ctx: int
) -> Round:
    """One request's round at `concurrency` requests in flight with k draft tokens (k=0: no speculation)."""
    stages = shape.stages
    pp = len(stages)
    m = min(concurrency, pp)
    b = concurrency / m
    q = k + 1
    n = b * q
    st = []
    for s, layers in enumerate(stages):
        w = stage_work(shape, layers, batch=b, tokens=q, ctx=ctx, last=s == pp - 1)
        st.append(compute_s(w, hw.accelerator, costs, shape.tp) + allreduce_s(shape, layers, n, hw.tp_link))
    hops = [hop_s(shape, s, n_tokens=n, spec=k > 0, lk=hw.pp_link) for s in range(pp - 1)]
    drafting = draft_s(shape, batch=b, k=k, ctx=ctx, hw=hw, costs=costs)
    bcast = 0.0
    if pp > 1:
        bcast = hw.pp_link.latency_us * 1e-6 + b * (2 * k + 1) * TOKEN_ID_BYTES / (hw.pp_link.bandwidth_gbs * 1e9)
    over = 1e-3 * (
        costs.step_overhead_ms
        + b * costs.request_overhead_ms
        + ((costs.spec_overhead_ms + b * k * costs.draft_token_overhead_ms) if k > 0 else 0.0)
    )
    latency = sum(st) + sum(a + bw for a, bw in hops) + drafting + bcast + over
    busy = [*st[:-1], st[-1] + drafting + over, *(bw for _, bw in hops)]
    bottleneck = max(busy)
    rnd = max(latency, m * bottleneck)
    return Round(
        concurrency,
        k,
        m,
        b,
        tuple(st),
        tuple(a + bw for a, bw in hops),
        drafting,
        bcast,
        over,
        latency,
        bottleneck,
        rnd,
        acc.length(k),
    )


@dataclass(frozen=True)
class Load:
    """What each request does: a prompt of prompt_len tokens, then output_len generated tokens. With
    it a level's throughput counts the prefill too (what `ppspec bench` measures), not only the
    steady-state decode rounds."""

    prompt_len: int
    output_len: int


def prefill_s(shape: Shape, hw: Hardware, costs: Costs, *, concurrency: int, prompt_len: int, spec: bool) -> float:
    """Time to first token of a wave of `concurrency` requests prefilled together (bench sends equal
    requests at once, so they start and finish in waves): their c x prompt_len tokens through every
    stage in turn (compute-bound at these sizes), attention over half the prompt on average, the
    drafter's own pass over the same tokens when speculating (EAGLE-family drafters prefill on the
    target's hidden states), and the per-round and per-request overheads."""
    n = concurrency * prompt_len
    total = 0.0
    for s, layers in enumerate(shape.stages):
        w = stage_work(
            shape, layers, batch=concurrency, tokens=prompt_len, ctx=prompt_len // 2, last=s == len(shape.stages) - 1
        )
        total += compute_s(w, hw.accelerator, costs, shape.tp) + allreduce_s(shape, layers, n, hw.tp_link)
    if spec and shape.drafter_bytes > 0:
        total += compute_s(
            Work(shape.drafter_bytes, 2.0 * n * shape.drafter_bytes / shape.act_bytes), hw.accelerator, costs, 1
        )
    return total + 1e-3 * (costs.step_overhead_ms + concurrency * costs.request_overhead_ms)


def load_throughput(rnd: Round, ttft_s: float, load: Load) -> float:
    """Output tokens/s of c requests in flight, each TTFT + (output_len - 1) x TPOT long."""
    life = ttft_s + (load.output_len - 1) * rnd.round_s / rnd.tokens_per_round
    return rnd.concurrency * load.output_len / life


# ---------------------------------------------------------------------------------------------
# Levels, best k, crossover, schedule


@dataclass(frozen=True)
class Level:
    concurrency: int
    k: int
    tpot_ms: float
    output_tokens_per_s: float
    speedup: float  # output tokens/s over k=0 at the same concurrency
    acceptance_length: float
    terms: Round

    def to_json(self) -> dict[str, Any]:
        t = self.terms
        return {
            "concurrency": self.concurrency,
            "num_speculative_tokens": self.k,
            "speedup": round(self.speedup, 4),
            "tpot_ms": round(self.tpot_ms, 4),
            "output_tokens_per_s": round(self.output_tokens_per_s, 2),
            "acceptance_length": round(self.acceptance_length, 4),
            "round_ms": round(1e3 * t.round_s, 4),
            "batches_in_flight": t.batches,
            "batch_size": round(t.batch, 3),
            "terms_ms": {
                "stages": [round(1e3 * x, 4) for x in t.stage_s],
                "hops": [round(1e3 * x, 4) for x in t.hop_s],
                "drafter": round(1e3 * t.draft_s, 4),
                "broadcast": round(1e3 * t.broadcast_s, 4),
                "overhead": round(1e3 * t.overhead_s, 4),
                "latency": round(1e3 * t.latency_s, 4),
                "bottleneck": round(1e3 * t.bottleneck_s, 4),
            },
            "bound": "latency" if t.latency_s >= t.batches * t.bottleneck_s else "throughput",
        }


def predict_levels(
    shape: Shape,
    hw: Hardware,
    costs: Costs,
    acc: Acceptance,
    *,
    concurrency: list[int],
    ks: list[int],
    ctx: int,
    load: Load | None = None,
) -> list[Level]:
    """Every (concurrency, k) with k=0 included, in order. With a `load`, tokens/s and the speed-up
    include each wave's prefill (TTFT); without, they are the steady-state decode rounds'."""

    def tps(r: Round, k: int) -> float:
        if load is None:
            return r.output_tokens_per_s
        ttft = prefill_s(shape, hw, costs, concurrency=r.concurrency, prompt_len=load.prompt_len, spec=k > 0)
        return load_throughput(r, ttft, load)

    out = []
    for c in concurrency:
        base = round_time(shape, hw, costs, acc, concurrency=c, k=0, ctx=ctx)
        base_tps = tps(base, 0)
        for k in sorted({0, *ks}):
            r = base if k == 0 else round_time(shape, hw, costs, acc, concurrency=c, k=k, ctx=ctx)
            t = base_tps if k == 0 else tps(r, k)
            out.append(Level(c, k, r.tpot_ms, t, t / base_tps, r.tokens_per_round, r))
    return out


def best_per_level(levels: list[Level]) -> list[Level]:
    """The best k per concurrency (k=0 included; a tie goes to the smaller k)."""
    best: dict[int, Level] = {}
    for lv in levels:
        cur = best.get(lv.concurrency)
        if cur is None or lv.speedup > cur.speedup + 1e-12:
            best[lv.concurrency] = lv
    return [best[c] for c in sorted(best)]


def crossover(best: list[Level]) -> int | None:
    """bench's definition: the highest level where speculation still pays (best speed-up > 1), None if nowhere."""
    paying = [lv.concurrency for lv in best if lv.k > 0 and lv.speedup > 1.0]
    return max(paying) if paying else None


def schedule(best: list[Level]) -> list[list[int]]:
    """[[batch_lo, batch_hi, k], ...]: the best k per level, consecutive levels with the same k
    merged, the boundary between two adjacent levels c_i < c_j at their midpoint (c_i + c_j) // 2
    (c_i's range ends there, c_j's starts one above); the first range starts at 1, the last ends at
    the highest level."""
    out: list[list[int]] = []
    cs = [lv.concurrency for lv in best]
    for i, lv in enumerate(best):
        lo = 1 if i == 0 else (cs[i - 1] + cs[i]) // 2 + 1
        hi = cs[i] if i == len(best) - 1 else (cs[i] + cs[i + 1]) // 2
        if out and out[-1][2] == lv.k:
            out[-1][1] = hi
        else:
            out.append([lo, hi, lv.k])
    return out


# ---------------------------------------------------------------------------------------------
# Calibration: fit the Costs to measured rounds


@dataclass(frozen=True)
class Measured:
    """One measured run: concurrency, k (0 = baseline), TPOT ms and the acceptance length it had."""

    concurrency: int
    k: int
    tpot_ms: float
    acceptance_length: float


@dataclass(frozen=True)
class Fit:
    costs: Costs
    rms_rel_error: float  # of the fitted TPOT over the runs it was fitted on
    runs: int


def _solve3(a: list[list[float]], y: list[float]) -> list[float] | None:
    """Gaussian elimination for a small square system; None if singular."""
    n = len(y)
    m = [row[:] + [y[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-18:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * z for x, z in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


@dataclass(frozen=True)
class Group:
    """Runs measured on one deployment (shape, hardware, context): what a fit reads."""

    shape: Shape
    hw: Hardware
    runs: tuple[Measured, ...]
    ctx: int


def _overheads(groups: list[Group], base: Costs, per_request: bool = True) -> Costs:
    """Least squares for the five overheads given the efficiencies (the round is linear in them at
    PP=1): per round, per speculative round, per drafter pass, per request, per request and draft
    token (per_request=False: the first three only, the model before issue 45). Columns a record
    cannot tell apart (a record with k=1 only has as many passes as speculative rounds) share their
    weight: a vanishing ridge term keeps the system solvable."""
    names = (
        "step_overhead_ms",
        "spec_overhead_ms",
        "draft_pass_overhead_ms",
        "request_overhead_ms",
        "draft_token_overhead_ms",
    )
    zero = replace(base, **dict.fromkeys(names, 0.0))
    rows, ys = [], []
    for g in groups:
        for r in g.runs:
            rest = (
                round_time(
                    g.shape, g.hw, zero, Acceptance((), "fit"), concurrency=r.concurrency, k=r.k, ctx=g.ctx
                ).round_s
                * 1e3
            )
            passes = 0 if r.k == 0 else (1 if g.shape.parallel_draft else r.k)
            b = r.concurrency / min(r.concurrency, len(g.shape.stages))
            rows.append([1.0, 1.0 if r.k > 0 else 0.0, float(passes), b, b * r.k])
            ys.append(r.tpot_ms * r.acceptance_length - rest)
    n = len(names)
    cols = [i for i in range(n) if any(row[i] for row in rows) and (per_request or i < 3)]
    ata = [[sum(row[i] * row[j] for row in rows) for j in cols] for i in cols]
    ridge = 1e-9 * max((ata[i][i] for i in range(len(cols))), default=0.0)
    for i in range(len(cols)):
        ata[i][i] += ridge
    aty = [sum(row[i] * y for row, y in zip(rows, ys, strict=True)) for i in cols]
    sol = _solve3(ata, aty) or [0.0] * len(cols)
    vals = [0.0] * n
    for i, v in zip(cols, sol, strict=True):
        vals[i] = max(0.0, v)
    return replace(base, **dict(zip(names, vals, strict=True)))


def _rms(groups: list[Group], costs: Costs) -> float:
    errs = []
    for g in groups:
        for r in g.runs:
            acc = Acceptance((r.acceptance_length - 1.0,) + (0.0,) * max(r.k - 1, 0), "measured")
            pred = round_time(g.shape, g.hw, costs, acc, concurrency=r.concurrency, k=r.k, ctx=g.ctx).round_s * 1e3
            meas = r.tpot_ms * r.acceptance_length
            errs.append((pred - meas) / meas)
    return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else 0.0


#: the bandwidth-efficiency grid the fit searches (0.30..1.00 by 0.02). The tensor efficiency is not
#: fitted: decode records are memory-bound at the levels measured, so a fitted value would be
#: unconstrained by them and extrapolate wildly (it did: 43% error at a held-out c=32).
EFF_BW_GRID = tuple(round(0.30 + 0.02 * i, 2) for i in range(36))


def fit_groups(groups: list[Group], *, eff_flops: float = Costs.eff_flops, per_request: bool = True) -> Fit:
    """Fit the bandwidth efficiency (grid) and, for each, the three overheads by least squares over
    every group's runs (records of several deployments on one hardware fit together); keep the
    smallest RMS relative error of the round time."""
    best: Fit | None = None
    n = sum(len(g.runs) for g in groups)
    for eb in EFF_BW_GRID:
        c = _overheads(groups, Costs(eff_bw=eb, eff_flops=eff_flops), per_request)
        err = _rms(groups, c)
        if best is None or err < best.rms_rel_error - 1e-12:
            best = Fit(c, err, n)
    assert best is not None
    return best


def fit_costs(
    shape: Shape,
    hw: Hardware,
    runs: list[Measured],
    *,
    ctx: int,
    eff_flops: float = Costs.eff_flops,
    per_request: bool = True,
) -> Fit:
    """fit_groups for the runs of one deployment."""
    return fit_groups([Group(shape, hw, tuple(runs), ctx)], eff_flops=eff_flops, per_request=per_request)


# ---------------------------------------------------------------------------------------------
# The whole prediction


@dataclass
class Prediction:
    levels: list[Level]
    best: list[Level]
    crossover: int | None
    schedule: list[list[int]]
    assumptions: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)  # planning/predict_records.validation

    def to_json(self) -> dict[str, Any]:
        return {
            "levels": [lv.to_json() for lv in self.levels],
            "best": [
                {"concurrency": b.concurrency, "num_speculative_tokens": b.k, "speedup": round(b.speedup, 4)}
                for b in self.best
            ],
            "crossover": self.crossover,
            "schedule": self.schedule,
            "assumptions": self.assumptions,
            "calibration": self.calibration,
            "validation": self.validation,
        }


def predict(
    shape: Shape,
    hw: Hardware,
    costs: Costs,
    acc: Acceptance,
    *,
    concurrency: list[int],
    ks: list[int],
    ctx: int,
    load: Load | None = None,
) -> Prediction:
    levels = predict_levels(shape, hw, costs, acc, concurrency=concurrency, ks=ks, ctx=ctx, load=load)
    best = best_per_level(levels)
    return Prediction(levels, best, crossover(best), schedule(best), calibration={"costs": asdict(costs)})
