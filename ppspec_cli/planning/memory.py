"""Will it fit? GPU memory and KV cache capacity per pipeline stage, as vLLM sizes them. Pure arithmetic:
typed inputs (planning/memory_inputs.py builds them from a resolved profile) -> a typed result per stage.

What vLLM does at start, per worker (one GPU; every GPU of a stage holds the same share), vLLM 0.33.0 / 0.34.0:
1. budget: `requested_memory = ceil(total_memory x gpu_memory_utilization)` (v1/worker/utils.py:724 in 0.33);
   the utilization defaults to 0.92 (config/cache.py:215 in 0.33; `DEFAULT_GPU_MEMORY_UTILIZATION` 0.92 in
   0.34, config/cache.py:186) and to 1.0 under 0.34's extensible KV cache, the default on CUDA
   (config/cache.py:495-500 `resolved_gpu_memory_utilization`, config/vllm.py:3180-3255);
2. the weights load ("Model loading took X GiB", v1/worker/gpu/model_runner.py:429);
3. a profiling forward of `max_num_batched_tokens` tokens; its transient peak and what it left allocated count
   against the budget (utils/mem_utils.py:306-320 `non_kv_cache_memory = total_consumed +
   transient_peak_headroom`), and the CUDA-graph pool estimate too (v1/worker/gpu_worker.py:776-780 in 0.34,
   :745-749 in 0.33): `available = requested - non_kv_cache_memory - cudagraph_memory_estimate`, logged as
   "Available KV cache memory: X GiB" (gpu_worker.py:795);
4. the KV cache: one pool of blocks per worker, a block holding `block_size` tokens of every attention layer the
   worker holds (v1/core/kv_cache_planning.py:620-648 `_get_kv_cache_bytes_per_block`, :724
   `num_blocks = available_memory // bytes_per_block`); with pipeline parallelism each worker counts only its
   own layers (:1517-1560 `_project_kv_cache_groups_to_worker`) and then "the num_blocks of each rank [is changed]
   to the smallest among all ranks" (:1683-1698): the engine's capacity is the smallest stage's;
5. the refusal: a worker whose memory cannot hold one request of `max_model_len` tokens (after the null block the
   pool holds back, :1640-1648) stops the engine: "To serve at least one request with the model's max seq len
   (N), (X GiB KV cache is needed, which is larger than the available KV cache memory (Y GiB). ..."
   (kv_cache_planning.py:125 in 0.34, :78 in 0.33); no memory at all: "No available memory for the cache
   blocks." (:107);
6. the capacity logged: "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: C x"
   (v1/core/kv_cache_utils.py:1167-1176), N = int(C x L), C = num_blocks / blocks one request of L tokens takes
   (:1082-1114: cdiv(max_memory_usage_bytes, page_size) summed over the cache groups).

Bytes per token per layer on one GPU (v1/kv_cache_interface.py, `page_size_bytes` / block_size):
- full attention (MHA/GQA): 2 x kv_heads_per_rank x head_dim x kv_dtype bytes, kv_heads_per_rank =
  max(1, kv_heads // TP) (config/model.py:1703 `get_num_kv_heads`);
- MLA: one latent of (kv_lora_rank + qk_rope_head_dim) x kv_dtype bytes, the same on every TP rank
  (config/model.py:1693-1695: "When using MLA during decode it becomes MQA", 1 head; MLAAttentionSpec
  head_size_v = 0, kv_cache_interface.py:741-757);
- a sliding window: a request holds at most cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
  block_size) + 1 blocks (kv_cache_interface.py:945-970 `max_admission_blocks_per_request`);
- linear attention / SSM state: one fixed state per request, no per-token cost (MambaSpec, :1121-1170).
With several kinds of layer vLLM groups them (kv_cache_planning.py:1157 `get_kv_cache_groups`); this model
takes one request's bytes summed over every layer and divides the pool by it: exact for one kind of layer, an
approximation of vLLM's group padding otherwise (said in the notes).

The activation peak and the CUDA-graph pool are estimates (planning/memory_inputs.py states the formulas; their
error against vLLM's own log lines is in docs/memory.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class KvLayer:
    """One layer's KV cache on one GPU: bytes per token (0 for a state-only layer), the sliding window in tokens
    (None: every token kept), and a fixed per-request state (linear attention / SSM)."""

    bytes_per_token: int
    window: int | None = None
    state_bytes: int = 0


@dataclass(frozen=True)
class StageInput:
    """What one GPU of a stage holds besides its KV cache, and its KV layers (the drafter's on the last stage)."""

    weights: float  # bytes: its share of the target (and on the last stage the drafter)
    kv_layers: tuple[KvLayer, ...]
    activation: float = 0.0  # the profiling forward's transient peak (estimate)
    cudagraph: float = 0.0  # the CUDA-graph pool (estimate)
    runtime: float = 0.0  # what else stays allocated after start-up: buffers, workspaces (estimate)


@dataclass(frozen=True)
class MemoryInput:
    stages: tuple[StageInput, ...]
    device_bytes: int | None  # the memory of one GPU as CUDA reports it; None: hardware not named
    utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_memory_bytes: int | None = None  # `kv-cache-memory-bytes`: the KV size, no profiling


@dataclass(frozen=True)
class StageMemory:
    rank: int
    weights: float
    overhead: float  # activation + CUDA graphs + runtime
    activation: float
    cudagraph: float
    runtime: float
    bytes_per_block: int  # every KV layer of this GPU, one block
    request_bytes: int  # one request of max_model_len tokens
    available: float | None  # for the KV cache; None without hardware
    num_blocks: int | None
    tokens: int | None  # what this stage alone would hold

    @property
    def needed(self) -> float:
        """Weights + overheads + one max_model_len request's KV cache (+ the null block)."""
        return self.weights + self.overhead + self.request_bytes + self.bytes_per_block


@dataclass(frozen=True)
class MemoryPlan:
    stages: tuple[StageMemory, ...]
    device_bytes: int | None
    utilization: float
    budget: int | None  # requested_memory per GPU
    max_model_len: int
    max_num_seqs: int
    block_size: int
    blocks_per_request: float
    engine_blocks: int | None
    engine_tokens: int | None  # the engine's capacity: the smallest stage's blocks
    max_concurrency: float | None  # requests of max_model_len the cache holds
    limiting: int | None  # the stage that sets it
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def weights_fit(self) -> bool | None:
        """Every GPU's weights within its budget (None: no hardware)."""
        if self.budget is None:
            return None
        return all(s.weights <= self.budget for s in self.stages)

    def over_budget(self) -> list[StageMemory]:
        return [] if self.budget is None else [s for s in self.stages if s.weights > self.budget]

    def short_of_one_request(self) -> list[StageMemory]:
        """Stages whose KV memory cannot hold one max_model_len request (vLLM refuses at start)."""
        out = []
        for s in self.stages:
            if s.available is None or not s.bytes_per_block:
                continue
            if s.available <= 0 or s.request_bytes > s.available - s.bytes_per_block:
                out.append(s)
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["weights_fit"] = self.weights_fit
        d["stages"] = [{**asdict(s), "needed": round(s.needed)} for s in self.stages]
        for s in d["stages"]:
            for k in ("weights", "overhead", "activation", "cudagraph", "runtime", "available"):
                if isinstance(s[k], float):
                    s[k] = round(s[k])
        d["notes"] = list(self.notes)
        return d


def _blocks_for(layer: KvLayer, max_model_len: int, block_size: int, in_flight: int) -> float:
    """Blocks of this layer one request of max_model_len takes (kv_cache_interface.py:654-659 full attention,
    :945-970 sliding window; a state layer: one page)."""
    if not layer.bytes_per_token:
        return 0.0
    if layer.window is None:
        return math.ceil(max_model_len / block_size)
    return math.ceil(min(layer.window - 1 + in_flight, max_model_len) / block_size) + 1


def plan_memory(m: MemoryInput) -> MemoryPlan:
    """The memory of every stage and the engine's KV capacity (module docstring)."""
    bs = max(1, m.block_size)
    budget = math.ceil(m.device_bytes * m.utilization) if m.device_bytes else None
    stages = []
    notes: list[str] = []
    kinds = {(ly.window is None, bool(ly.state_bytes)) for s in m.stages for ly in s.kv_layers if ly.bytes_per_token}
    if len(kinds) > 1 or any(ly.state_bytes for s in m.stages for ly in s.kv_layers):
        notes.append(
            "layers of several kinds (full attention, sliding window, state): one request's bytes are summed over "
            "them; vLLM groups them and pads the groups (kv_cache_planning.py get_kv_cache_groups), so the "
            "capacity is approximate"
        )
    for i, st in enumerate(m.stages):
        page = sum(ly.bytes_per_token for ly in st.kv_layers) * bs
        request = 0.0
        for ly in st.kv_layers:
            request += _blocks_for(ly, m.max_model_len, bs, m.max_num_batched_tokens) * ly.bytes_per_token * bs
            request += ly.state_bytes
        overhead = st.activation + st.cudagraph + st.runtime
        if m.kv_cache_memory_bytes is not None:
            avail: float | None = float(m.kv_cache_memory_bytes)
        elif budget is not None:
            avail = budget - st.weights - overhead
        else:
            avail = None
        blocks = tokens = None
        if avail is not None and page:
            per_req_pages = request / page if page else 0.0
            blocks = max(0, int(avail // page))
            tokens = int(blocks / per_req_pages * m.max_model_len) if per_req_pages else None
        stages.append(
            StageMemory(
                i,
                st.weights,
                overhead,
                st.activation,
                st.cudagraph,
                st.runtime,
                page,
                math.ceil(request),
                avail,
                blocks,
                tokens,
            )
        )
    with_kv = [s for s in stages if s.num_blocks is not None and s.bytes_per_block]
    engine_blocks = engine_tokens = limiting = conc = None
    ref = next((s for s in stages if s.bytes_per_block), None)
    per_req = ref.request_bytes / ref.bytes_per_block if ref is not None and ref.bytes_per_block else 0.0
    if with_kv:
        low = min(with_kv, key=lambda s: (s.num_blocks, s.rank))
        blocks = low.num_blocks or 0  # (with_kv holds only stages whose blocks are known)
        engine_blocks, limiting = blocks, low.rank
        if per_req:
            conc = blocks / per_req
            engine_tokens = int(conc * m.max_model_len)
    return MemoryPlan(
        stages=tuple(stages),
        device_bytes=m.device_bytes,
        utilization=m.utilization,
        budget=budget,
        max_model_len=m.max_model_len,
        max_num_seqs=m.max_num_seqs,
        block_size=bs,
        blocks_per_request=per_req,
        engine_blocks=engine_blocks,
        engine_tokens=engine_tokens,
        max_concurrency=conc,
        limiting=limiting,
        notes=tuple(notes),
    )


def max_len_that_fits(m: MemoryInput, stage: StageMemory, stage_in: StageInput) -> int:
    """The longest max_model_len one request of which this stage's KV memory holds (vLLM's
    estimate_max_model_len: a binary search over the length, kv_cache_planning.py:142-193); 0 if none."""
    if stage.available is None or not stage.bytes_per_block:
        return 0
    room = stage.available - stage.bytes_per_block
    bs = max(1, m.block_size)

    def need(n: int) -> float:
        total = 0.0
        for ly in stage_in.kv_layers:
            total += _blocks_for(ly, n, bs, m.max_num_batched_tokens) * ly.bytes_per_token * bs + ly.state_bytes
        return total

    lo, hi = 0, max(1, m.max_model_len)
    if need(1) > room:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid) <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo
