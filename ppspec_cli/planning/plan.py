"""The stage plan: pure functions, no I/O. The one place that knows vLLM's partition and tap rules.

Everything here mirrors what the installed vLLM will decide, so `check` and `plan` can say before a
launch what the engine will do. Where vLLM is importable, tests compare these functions with vLLM's
own on many inputs (tests/test_vllm_mirror.py).

Tap numbering used throughout (vLLM's): tap L is the residual stream *entering* layer L, i.e. the
output of layer L-1; tap 0 is the embeddings. A stage holding layers [start, end) produces taps
start < L <= end (plus tap 0 on stage 0); a tap exactly on a boundary (L == start of stage s)
belongs to the previous stage.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ppspec_cli.knowledge.methods import drafter_passes
from ppspec_cli.planning.partition import default_partition, stage_bounds, suggest_partition

Runner = Literal["v2", "v1"]


def pp_rank_of(global_rank: int, *, tp: int, pp: int, pcp: int = 1) -> int:
    """Stage index of a global rank. Layout ExternalDP x DP x PP x PCP x TP (TP fastest)."""
    return (global_rank // (pcp * tp)) % pp


# ---------------------------------------------------------------------------------------------
# Taps: which target layers the drafter reads


def default_taps(num_layers: int) -> tuple[int, ...]:
    """The target's defaults when the drafter config names no taps: (2, n//2, n-3), sorted, unique."""
    return tuple(sorted({2, num_layers // 2, num_layers - 3}))


@dataclass(frozen=True)
class TapSource:
    """Where a tap list was found in a drafter config, before and after vLLM's offset."""

    key: str  # e.g. "eagle_aux_hidden_state_layer_ids", "dflash_config.target_layer_ids", "default"
    raw: tuple[int, ...] | None  # ids as written in the config
    taps: tuple[int, ...] | None  # as the runner will use them (capture-point terms)


def _get(d: dict, dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _ids(v: Any) -> tuple[int, ...] | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(v)
    raise TypeError(f"tap ids must be a list of integers, got {v!r}")


def v2_taps_from_config(cfg: dict) -> TapSource:
    """Model Runner V2's reading of a drafter config (vLLM 0.30+: eagle3_utils
    get_eagle3_aux_layers_from_config). First match wins; the nested
    `eagle_config.eagle_aux_hidden_state_layer_ids` is NOT among the keys.
    """
    v = _ids(cfg.get("eagle_aux_hidden_state_layer_ids"))
    if v:
        return TapSource("eagle_aux_hidden_state_layer_ids", v, v)
    v = _ids(_get(cfg, "dflash_config.target_layer_ids"))
    if v:
        return TapSource("dflash_config.target_layer_ids", v, tuple(x + 1 for x in v))
    v = _ids(cfg.get("dspark_target_layer_ids"))
    if v:
        if cfg.get("model_type") == "deepseek_v41":
            return TapSource("dspark_target_layer_ids", v, v)
        return TapSource("dspark_target_layer_ids", v, tuple(x + 1 for x in v))
    v = _ids(cfg.get("target_layer_ids"))
    if v:
        return TapSource("target_layer_ids", v, tuple(x + 1 for x in v))
    for key in ("dflash_config.layer_ids", "eagle_config.layer_ids"):
        v = _ids(_get(cfg, key))
        if v:
            return TapSource(key, v, v)
    return TapSource("default", None, None)


def v1_taps_from_config(cfg: dict) -> TapSource:
    """Model Runner V1's reading (the CPU platform, and GPU fallbacks; vLLM 0.32
    gpu_model_runner._get_eagle3_aux_layers_from_config): the top-level key as is; else
    `dflash_config.target_layer_ids` + 1, then — overriding it whenever `eagle_config` is a
    mapping — the nested `eagle_config.eagle_aux_hidden_state_layer_ids` as is (one layer early
    for SGLang/SpecForge heads).
    """
    v = _ids(cfg.get("eagle_aux_hidden_state_layer_ids"))
    if v:
        return TapSource("eagle_aux_hidden_state_layer_ids", v, v)
    src = TapSource("default", None, None)
    dflash = cfg.get("dflash_config")
    if isinstance(dflash, dict) and dflash:
        raw = _ids(dflash.get("target_layer_ids")) or ()
        src = TapSource("dflash_config.target_layer_ids", raw, tuple(x + 1 for x in raw))
    eagle = cfg.get("eagle_config")
    if isinstance(eagle, dict) and eagle:
        ids = _ids(eagle.get("eagle_aux_hidden_state_layer_ids"))
        src = TapSource("eagle_config.eagle_aux_hidden_state_layer_ids", ids, ids)
    if not src.taps:
        return TapSource("default", None, None)
    return src


def trained_taps(cfg: dict, convention: Literal["auto", "capture_point", "layer_output"] = "auto") -> TapSource:
    """What the drafter was trained on, in capture-point terms, as far as the config tells.

    Nested `eagle_config.eagle_aux_hidden_state_layer_ids` is written by SGLang/SpecForge in
    output-of-layer terms (id v = output of layer v = tap v+1) unless the profile says otherwise.
    Every other key means what vLLM's V2 runner makes of it.
    """
    nested = _ids(_get(cfg, "eagle_config.eagle_aux_hidden_state_layer_ids"))
    top = _ids(cfg.get("eagle_aux_hidden_state_layer_ids"))
    if nested and not top:
        off = 0 if convention == "capture_point" else 1
        return TapSource("eagle_config.eagle_aux_hidden_state_layer_ids", nested, tuple(x + off for x in nested))
    return v2_taps_from_config(cfg)


@dataclass(frozen=True)
class NestedReadings:
    """The two readings of a nested `eagle_config.eagle_aux_hidden_state_layer_ids` list."""

    raw: tuple[int, ...]
    as_layer_output: tuple[int, ...]  # id v = output of layer v = vLLM tap v+1 (ppspec's `auto`)
    as_capture_point: tuple[int, ...]  # id v = vLLM tap v
    sglang_reads: Literal[
        "layer_output", "capture_point"
    ]  # SGLang's heuristic (sglang #25454): first id 1 -> output-of-layer


def nested_readings(cfg: dict) -> NestedReadings | None:
    """Both readings of a nested id list that no top-level list overrides (None otherwise)."""
    nested = _ids(_get(cfg, "eagle_config.eagle_aux_hidden_state_layer_ids"))
    if not nested or _ids(cfg.get("eagle_aux_hidden_state_layer_ids")):
        return None
    sglang: Literal["layer_output", "capture_point"] = "layer_output" if nested[0] == 1 else "capture_point"
    return NestedReadings(nested, tuple(x + 1 for x in nested), tuple(nested), sglang)


def normalize_taps(taps: tuple[int, ...]) -> tuple[int, ...]:
    """vLLM stores the tap set sorted and de-duplicated."""
    return tuple(sorted(set(taps)))


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class Relay:
    """What one hop (stage s -> s+1) carries besides the hidden state: every tap produced so far."""

    slots: int
    bytes_per_token: int
    taps: tuple[int, ...]


@dataclass(frozen=True)
class Stage:
    rank: int
    layers: tuple[int, int]  # [start, end)
    taps: tuple[int, ...]  # taps this stage produces
    upstream_slots: int  # taps received from earlier stages (vLLM: bisect_right(taps, start))
    relay_out: Relay | None  # None on the last stage
    embedding: Literal["first", "drafter-needs", "none"]  # where a real embed_tokens lives
    lm_head: bool
    drafter: bool
    weight_bytes: int | None


@dataclass(frozen=True)
class Plan:
    num_layers: int
    partition: tuple[int, ...]
    partition_source: Literal["default", "profile"]
    method: str | None
    runner: Runner
    taps: tuple[int, ...]  # sorted vLLM tap ids the served engine will use ([] for mtp / no drafter)
    taps_source: str  # config key, "default", "profile" or "overlay"
    trained_taps: tuple[int, ...] | None  # what the drafter was trained on (capture-point), if known
    trained_source: str | None
    overlay: dict[str, Any] | None  # drafter config keys ppspec overrides at launch (local overlay)
    stages: tuple[Stage, ...]
    draft_layer_ids: tuple[int, ...]
    draft_layer_numbering: Literal["global", "pp-local", "none"]
    hidden_size: int | None
    dtype_bytes: int | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: drafter-aware split (ppspec_cli/planning/partition.py); None without weight sizes, drafter or PP
    suggested_partition: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["partition"] = list(self.partition)
        d["taps"] = list(self.taps)
        d["stages"] = [
            {
                "rank": s.rank,
                "layers": list(s.layers),
                "taps": list(s.taps),
                "upstream_slots": s.upstream_slots,
                "relay_out": None
                if s.relay_out is None
                else {
                    "slots": s.relay_out.slots,
                    "bytes_per_token": s.relay_out.bytes_per_token,
                    "taps": list(s.relay_out.taps),
                },
                "embedding": s.embedding,
                "lm_head": s.lm_head,
                "drafter": s.drafter,
                "weight_bytes": s.weight_bytes,
            }
            for s in self.stages
        ]
        d["draft_layer_ids"] = list(self.draft_layer_ids)
        d["suggested_partition"] = list(self.suggested_partition) if self.suggested_partition else None
        d["notes"] = list(self.notes)
        return d


def stage_taps(taps: tuple[int, ...], bounds: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """Taps produced by each stage: start < L <= end, plus tap 0 on stage 0."""
    out = []
    for i, (start, end) in enumerate(bounds):
        out.append(tuple(t for t in taps if (start < t <= end) or (i == 0 and t == 0)))
    return out


def upstream_slots(taps: tuple[int, ...], start: int) -> int:
    """Taps a stage starting at `start` receives from upstream (vLLM: bisect_right on the sorted set)."""
    return bisect.bisect_right(list(taps), start)


def relay_bytes(n_slots: int, hidden_size: int | None, dtype_bytes: int | None) -> int:
    if hidden_size is None or dtype_bytes is None:
        return 0
    return n_slots * hidden_size * dtype_bytes


def draft_layer_ids(
    num_layers: int, n_draft_layers: int, numbering: Literal["global", "pp-local", "none"], last_stage_layers: int
) -> tuple[int, ...]:
    """EAGLE3/DFlash/DSpark number draft layers globally from the target depth (n + i) since vLLM 0.30.
    EAGLE-1 drafters still use the PP-local layer count of the last stage (a collision under PP)."""
    if numbering == "none" or n_draft_layers <= 0:
        return ()
    start = num_layers if numbering == "global" else last_stage_layers
    return tuple(range(start, start + n_draft_layers))


@dataclass(frozen=True)
class EngineTaps:
    """The taps the served engine will use and where they come from (planning/resolve.py)."""

    taps: tuple[int, ...]
    source: str  # config key, "default", "profile" or "overlay"
    trained: TapSource | None = None  # what the drafter was trained on, if the config tells
    overlay: dict[str, Any] | None = None  # drafter config keys ppspec overrides at launch


@dataclass(frozen=True)
class WeightBytes:
    """Weight sizes read (or estimated) from the checkpoints: the bytes each stage holds and the
    drafter-aware partition suggestion. None: unknown."""

    layers: tuple[int, ...] | None = None  # one entry per target decoder layer
    embed: int | None = None
    lm_head: int | None = None
    drafter: int | None = None


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is built from: the target's depth and split over `pp` stages (the profile's
    partition, else vLLM's default), the method and runner, the taps the engine will use, the
    hidden size and dtype (relay sizes), the draft layers and how vLLM numbers them, whether the
    last stage builds the target embedding for the drafter, the weights per layer, notes."""

    num_layers: int
    pp: int
    layer_partition: list[int] | None
    method: str | None
    runner: Runner
    taps: EngineTaps
    hidden_size: int | None
    dtype_bytes: int | None
    n_draft_layers: int
    draft_numbering: Literal["global", "pp-local", "none"]
    drafter_needs_target_embed: bool
    weights: WeightBytes | None = None
    notes: tuple[str, ...] = ()
    num_speculative_tokens: int = 1


def build_plan(inputs: PlanInputs) -> Plan:
    """Assemble the plan. Callers validate inputs first (rules report bad partitions as findings);
    a partition that does not fit falls back to the default so the rest can still be shown."""
    num_layers, pp, layer_partition, method, runner, taps = (
        inputs.num_layers,
        inputs.pp,
        inputs.layer_partition,
        inputs.method,
        inputs.runner,
        inputs.taps,
    )
    hidden_size, dtype_bytes, n_draft_layers = inputs.hidden_size, inputs.dtype_bytes, inputs.n_draft_layers
    draft_numbering, drafter_needs_target_embed = inputs.draft_numbering, inputs.drafter_needs_target_embed
    weights, notes, num_speculative_tokens = inputs.weights, inputs.notes, inputs.num_speculative_tokens
    partition = list(layer_partition) if layer_partition else default_partition(num_layers, pp)
    source: Literal["default", "profile"] = "profile" if layer_partition else "default"
    if len(partition) != pp or sum(partition) != num_layers or any(p < 0 for p in partition):
        partition, source = default_partition(num_layers, pp), "default"
    bounds = stage_bounds(partition)
    w = weights or WeightBytes()
    trained = taps.trained
    tap_ids = normalize_taps(taps.taps)
    produced = stage_taps(tap_ids, bounds)
    stages = []
    for i, (start, end) in enumerate(bounds):
        last = i == pp - 1
        relay = None
        if not last:
            carried = tuple(t for t in tap_ids if t <= end)
            relay = Relay(len(carried), relay_bytes(len(carried), hidden_size, dtype_bytes), carried)
        if i == 0:
            emb: Literal["first", "drafter-needs", "none"] = "first"
        elif last and drafter_needs_target_embed:
            emb = "drafter-needs"
        else:
            emb = "none"
        wb = None
        if w.layers is not None:
            wb = sum(w.layers[start:end])
            if i == 0 and w.embed:
                wb += w.embed
            if last:
                wb += (w.lm_head or 0) + (w.drafter or 0)
                if emb == "drafter-needs" and pp > 1:
                    wb += w.embed or 0
        stages.append(
            Stage(
                rank=i,
                layers=(start, end),
                taps=produced[i],
                upstream_slots=upstream_slots(tap_ids, start) if i > 0 else 0,
                relay_out=relay,
                embedding=emb,
                lm_head=last,
                drafter=last and method is not None,
                weight_bytes=wb,
            )
        )
    suggested = None
    if pp > 1 and method and w.layers is not None and w.drafter and len(w.layers) == num_layers >= pp:
        passes = drafter_passes(method, num_speculative_tokens)
        extra = (w.lm_head or 0) + passes * w.drafter
        suggested = tuple(suggest_partition(w.layers, pp, last_extra=extra, prefer=default_partition(num_layers, pp)))
        if list(suggested) != partition:
            notes = (
                *notes,
                f"suggested layer_partition {list(suggested)}: balances the weight bytes each stage reads per step, "
                "counting the "
                f"lm_head and {passes} drafter pass(es) on the last stage (docs/gpu-validation.md, drafter-aware "
                "partition)",
            )
    return Plan(
        suggested_partition=suggested,
        num_layers=num_layers,
        partition=tuple(partition),
        partition_source=source,
        method=method,
        runner=runner,
        taps=tap_ids,
        taps_source=taps.source,
        trained_taps=trained.taps if trained and trained.taps is not None else None,
        trained_source=trained.key if trained else None,
        overlay=taps.overlay,
        stages=tuple(stages),
        draft_layer_ids=draft_layer_ids(num_layers, n_draft_layers, draft_numbering, partition[-1]),
        draft_layer_numbering=draft_numbering,
        hidden_size=hidden_size,
        dtype_bytes=dtype_bytes,
        notes=notes,
    )
