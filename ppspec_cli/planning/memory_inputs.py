"""What the memory model (planning/memory.py) is fed, from a resolved profile: the accelerator, the engine
options as vLLM defaults them, the weights on one GPU of each stage, the KV layers of each stage, and the
estimates of the activation peak, the CUDA-graph pool and the runtime's other buffers. No I/O: everything
comes from the Resolved (checkpoint metadata already read).

Weights per GPU (planning/weights.py splits every tensor the way vLLM shards it), best source first:
1. the safetensors headers: every tensor's dtype and shape;
2. the index's tensor names with the config formula of the family's pack (sizes by the formula, scaled to the
   index's total_size, so a quantized checkpoint's real bytes count);
3. the config formula alone (quantized per `quantization_config`);
4. the index's total alone: the embedding and lm_head as vocab x hidden, the rest spread evenly over the layers,
   every layer tensor taken as split by TP (a lower bound at TP > 1).
Placement: decoder layer i on the stage whose layers hold it; the embedding on the first stage and, where the
plan says the drafter needs it, a copy on the last (vLLM's models build `embed_tokens` on the first rank and
a `PPMissingLayer` elsewhere, e.g. models/deepseek_v2.py:1459-1467; a model that builds it on every rank is
counted on the first only: said in docs/memory.md); the lm_head and the final norm on the last
(deepseek_v2.py:1485-1488, :1917-1925); a tied lm_head under PP is the embedding again on the last stage; MTP
layers (index >= num_hidden_layers) only with `method: mtp` (they are the drafter), on the last stage; MLA's
decode copies of kv_b_proj in the activation dtype (`W_UV`, `W_UK_T`, model_executor/layers/attention/
mla_attention.py:1456-1536, kept beside kv_b_proj) on every stage holding MLA layers.

Overheads per GPU (estimates: docs/memory.md has their error against vLLM's own log lines):
- activation peak: the larger of one layer's working set for `max_num_batched_tokens` tokens
  (T x (2 hidden + the MLP's gate/up/activation or the MoE's top-k routed copies) x dtype bytes) and, on the
  last stage, the sampler's logits for `max_num_seqs` rows (rows x vocab x LOGIT_BYTES: bf16 logits, their
  fp32 copy and the probabilities);
- CUDA-graph pool (CUDA/ROCm unless enforce-eager): GRAPH_BYTES_PER_LAYER per captured size per layer of the
  stage, plus one working set of the largest captured batch;
- runtime: RUNTIME_BYTES of buffers, workspaces and the sampler's state that stay allocated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ppspec_cli.planning import hardware as hwtable
from ppspec_cli.planning import weights as wt
from ppspec_cli.planning.memory import GIB, KvLayer, MemoryInput, MemoryPlan, StageInput, plan_memory

#: bytes per logit element of the sampler's profiling run: bf16 logits, their fp32 copy, fp32 probabilities
LOGIT_BYTES = 10
#: the CUDA-graph pool per captured batch size per decoder layer (FULL_AND_PIECEWISE graphs; estimate)
GRAPH_BYTES_PER_LAYER = 64 << 10
#: what else stays allocated on a GPU after start-up besides the weights (estimate)
RUNTIME_BYTES = 384 << 20
# vLLM's default block size: 16 through 0.33 (config/cache.py:185), 64 from 0.34 (config/cache.py:185)
DEFAULT_UTILIZATION = 0.92  # config/cache.py:215 (0.33), :186 (0.34)
KV_DTYPE_BYTES = {"auto": None, "bfloat16": 2, "float16": 2, "half": 2, "float": 4, "float32": 4}
TORCH_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


@dataclass
class Settings:
    """The engine options that size memory, as vLLM reads or defaults them."""

    utilization: float
    utilization_source: str
    max_model_len: int | None
    max_model_len_source: str
    max_num_seqs: int
    max_num_seqs_declared: bool
    max_num_batched_tokens: int
    block_size: int
    kv_dtype_bytes: int | None
    expert_parallel: bool
    cudagraphs: bool
    capture_sizes: tuple[int, ...]
    kv_cache_memory_bytes: int | None
    notes: list[str] = field(default_factory=list)


def _opt(r: Any, flag: str) -> tuple[bool, Any]:
    """Whether the profile's `engine:` sets `flag`, and to what (Resolved.options: the one reader)."""
    return r.options.value(flag)


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v) if isinstance(v, str) else None
    except ValueError:
        return None


def _truthy(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() in ("", "1", "true", "yes"))


def _version_key(version: str) -> str:
    """`0.34` of 0.34.0, 0.34.1.dev3+g12ab: the release series, zero-padded to compare as text."""
    from ppspec_cli.knowledge import facts

    v = facts.parse_version(version)
    return "0.0" if v is None else f"{v.major}.{v.minor:02d}"


def settings(r: Any, device_bytes: int | None) -> Settings:
    """The memory-sizing options of the profile, with vLLM's defaults (engine/arg_utils.py get_batch_defaults:
    on a GPU of >= 70 GiB (not an A100) max_num_seqs 1024 and max_num_batched_tokens 8192 for the API server,
    16384 from 160 GiB; else 256 and 2048, arg_utils.py:2940-3039 in 0.33, the same tiers in 0.34)."""
    from ppspec_cli.planning.engine_shapes import derived_max_len

    env = r.profile.env or {}
    notes: list[str] = []
    # the engine's own release, not the verified one whose rules are carried forward: these defaults were
    # read from each release's source (0.34's block size and extensible KV cache differ from 0.33's)
    version = _version_key(r.engine_version)
    cuda = r.platform in ("cuda", "rocm")
    has_kvmb, kvmb = _opt(r, "kv-cache-memory-bytes")
    kv_bytes = _int(kvmb) if has_kvmb else None
    if r.platform == "cpu":  # platforms/cpu.py:323-327 (0.32): VLLM_CPU_KVCACHE_SPACE GiB, ppspec sets 1
        space = _int(env.get("VLLM_CPU_KVCACHE_SPACE", "1"))
        kv_bytes = kv_bytes if kv_bytes is not None else (space or 1) * GIB
    has_u, u = _opt(r, "gpu-memory-utilization")
    util = _num(u) if has_u else None
    extensible = False
    if version >= "0.34" and cuda and kv_bytes is None and r.profile.kv_transfer is None:
        has_x, x = _opt(r, "enable-extensible-kv-cache")
        has_o, _ = _opt(r, "num-gpu-blocks-override")
        extensible = (not has_x or _truthy(x)) and not has_o
    if util is not None and 0 < util <= 1:
        usrc = "profile"
    else:
        util = 1.0 if extensible else DEFAULT_UTILIZATION
        usrc = (
            "vLLM 0.34's default with its extensible KV cache (config/cache.py:495-500)"
            if extensible
            else "vLLM's default (config/cache.py)"
        )
    has_m, m = _opt(r, "max-model-len")
    mml = _int(m) if has_m else None
    msrc = "profile"
    if mml is None or mml <= 0:
        derived = derived_max_len(r.target.text, r.target.model_type) if r.target is not None else None
        mml = int(derived) if derived is not None and derived != float("inf") else None
        msrc = "the config's (vLLM's derived max_model_len)" if mml else "unknown"
        if has_m and _int(m) == -1:
            msrc = "auto-fit (-1): vLLM shrinks it to what fits; shown at the config's length"
    big = device_bytes is not None and device_bytes >= 70 * GIB and not (r.profile.hardware or "").startswith("a100")
    huge = device_bytes is not None and device_bytes >= 160 * GIB
    has_s, s = _opt(r, "max-num-seqs")
    seqs = _int(s) if has_s else None
    declared = seqs is not None and seqs > 0
    world = r.profile.topology.tensor_parallel * r.profile.topology.pipeline_parallel
    if seqs is None or seqs <= 0:  # not declared; the CPU's: 128 x world size (arg_utils.py:3025-3032 in 0.33)
        seqs = 128 * world if r.platform == "cpu" else (1024 if big else 256)
    has_t, t = _opt(r, "max-num-batched-tokens")
    tokens = _int(t) if has_t else None
    if tokens is None or tokens <= 0:
        tokens = 2048 * world if r.platform == "cpu" else (16384 if huge else 8192 if big else 2048)
    has_b, b = _opt(r, "block-size")
    block = _int(b) if has_b else None
    if block is None or block <= 0:
        block = 64 if version >= "0.34" else 16
        if r.platform == "cpu":  # platforms/cpu.py:273-295 (0.32): 128, 16 for MLA
            block = 16 if r.target is not None and (r.target.text or {}).get("kv_lora_rank") else 128
    kv_dtype = _kv_dtype(r, notes)
    has_ep, ep = _opt(r, "enable-expert-parallel")
    sizes = _capture_sizes(r, seqs) if cuda else ()
    graphs = bool(sizes)
    return Settings(
        utilization=util,
        utilization_source=usrc,
        max_model_len=mml,
        max_model_len_source=msrc,
        max_num_seqs=seqs,
        max_num_seqs_declared=declared,
        max_num_batched_tokens=tokens,
        block_size=block,
        kv_dtype_bytes=kv_dtype,
        expert_parallel=has_ep and _truthy(ep),
        cudagraphs=graphs,
        capture_sizes=sizes if graphs else (),
        kv_cache_memory_bytes=kv_bytes,
        notes=notes,
    )


def _kv_dtype(r: Any, notes: list[str]) -> int | None:
    """The KV cache's element bytes: `kv-cache-dtype` (fp8*: 1), else the model's dtype (`auto`)."""
    has_kd, kd = _opt(r, "kv-cache-dtype")
    dtype_b = TORCH_DTYPE_BYTES.get(str(r.profile.dtype or "").lower()) or (
        r.target.dtype_bytes if r.target is not None else None
    )
    if not has_kd or (isinstance(kd, str) and kd.lower() == "auto"):
        return dtype_b
    if isinstance(kd, str) and kd.lower().startswith("fp8"):
        return 1
    if isinstance(kd, str) and KV_DTYPE_BYTES.get(kd.lower()):
        return KV_DTYPE_BYTES[kd.lower()]
    notes.append(f"kv-cache-dtype {str(kd)[:30]!r} is not modelled: the KV cache's size is unknown")
    return None


def _capture_sizes(r: Any, seqs: int) -> tuple[int, ...]:
    """The CUDA-graph capture sizes (empty: no graphs: enforce-eager, cudagraph_mode NONE)."""
    has_e, eager = _opt(r, "enforce-eager")
    if has_e and _truthy(eager):
        return ()
    _, cc = _opt(r, "compilation-config")
    if isinstance(cc, dict):
        if str(cc.get("cudagraph_mode", "")).upper() == "NONE":
            return ()
        got = cc.get("cudagraph_capture_sizes")
        if isinstance(got, list) and got and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in got):
            return tuple(sorted(set(got)))
    # config/vllm.py:2398-2411 (0.33): [1, 2, 4] + multiples of 8 to 256 + of 16 up to
    # min(max_num_seqs x decode query length x 2, 512)
    k = r.profile.drafter.num_speculative_tokens if r.profile.drafter else 0
    top = min(seqs * (1 + k) * 2, 512)
    return tuple(x for x in [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)] if x <= top)


# ---------------------------------------------------------------------------------------------
# Hardware


@dataclass(frozen=True)
class Device:
    name: str
    bytes: int  # one GPU's memory as CUDA reports it
    source: str


def device_of(spec: str | None, platform: str) -> tuple[Device | None, str | None]:
    """The profile's (or --hardware's) accelerator: `NAME` from the predictor's table, or `NAME,mem=GiB` (the
    memory one GPU reports, e.g. 79.2 for an H100 80GB; `mem=80GB` reads decimal gigabytes). (None, None)
    without one; (None, why) when it cannot be read."""
    if not spec or platform == "cpu":
        return None, None
    name, *rest = [p.strip() for p in str(spec).split(",")]
    acc = hwtable.accelerator(name)
    mem: float | None = None
    unit = GIB
    for p in rest:
        k, _, v = p.partition("=")
        if k.strip().lower() != "mem":
            continue
        v = v.strip().lower()
        if v.endswith("gib"):
            v = v[:-3]
        elif v.endswith("gb"):
            v, unit = v[:-2], 10**9
        try:
            mem = float(v)
        except ValueError:
            return None, f"hardware {spec!r}: mem={v!r} is not a number of GiB"
        if not 0 < mem <= 1 << 20:
            return None, f"hardware {spec!r}: mem={v} is not a GPU's memory"
    if mem is not None:
        return Device(name.lower(), int(mem * unit), f"{spec} (given)"), None
    if acc is None:
        return None, (
            f"hardware {name!r} is not in the table ({', '.join(a for a in hwtable.ACCELERATORS if a != 'cpu')}): "
            "give its memory as NAME,mem=GiB"
        )
    got = hwtable.device_memory(acc.name)
    if got is None:
        return None, f"hardware {name!r}: its memory as the device reports it is not in the table: give NAME,mem=GiB"
    return Device(acc.name, got[0], got[1]), None


# ---------------------------------------------------------------------------------------------
# Weights


@dataclass
class WeightsPerGpu:
    """One GPU's share of the target: per decoder layer, the embedding, the lm_head, the final norm, MTP layers,
    tensors outside the layers (towers: on the first stage), and how they were found."""

    layers: list[float]
    embed: float
    lm_head: float
    final: float
    mtp: float
    other: float
    tied: bool
    source: str
    notes: list[str] = field(default_factory=list)
    unrecognised: int = 0
    lm_head_stored: bool = True


def _target_tensors(r: Any, layout: str | None, n_mtp: int) -> tuple[list[wt.Tensor] | None, str, list[str]]:
    t = r.target
    text = t.text or {}
    kv_heads = text.get("num_key_value_heads") or text.get("num_attention_heads")
    kv_heads = kv_heads if isinstance(kv_heads, int) and kv_heads > 0 else None
    if t.tensors:
        shapes = {name: (ti.nbytes, ti.shape) for name, ti in t.tensors.items()}
        return wt.tensors_from_header(shapes, kv_heads), "the safetensors headers", []
    q = wt.quant_of(t.config or text)
    db = t.dtype_bytes
    if q == "unknown":
        qc = (t.config or {}).get("quantization_config")
        method = qc.get("quant_method") if isinstance(qc, dict) else qc
        return (
            None,
            "",
            [f"quantization {str(method)[:40]!r} is not modelled: weights per GPU are unknown without headers"],
        )
    names = t.tensor_names() if t.weight_map is not None else None
    n = t.num_layers or 0
    mtp_in_index = 0
    if names:
        idx = {int(m.group(1)) for x in names if (m := re.search(r"(?:^|\.)layers\.(\d+)\.", x))}
        mtp_in_index = len([i for i in idx if i >= n])
    formula = wt.config_tensors(layout, text, db, q, mtp_layers=max(n_mtp, mtp_in_index))
    if formula is not None and t.index_total_size and names:
        stored = {x.name for x in formula}
        # what the index stores beyond the formula: the MTP layers' own embedding / head copies (shared by vLLM)
        extra_names = [
            x for x in names if x not in stored and re.search(r"layers\.\d+\.(embed_tokens|shared_head\.head)", x)
        ]
        total = sum(x.nbytes for x in formula)
        extra = len(extra_names) * (t.vocab_size or 0) * (t.hidden_size or 0) * (db or 0)
        scale = (t.index_total_size - extra) / total if total else 1.0
        note = f"weights per GPU from the config formula ({layout}) scaled x{scale:.3f} to the index's total_size" + (
            f" (less {len(extra_names)} MTP embedding/head copies vLLM shares)" if extra_names else ""
        )
        if not 0.5 < scale < 2.0:
            return (
                formula,
                f"the config formula ({layout})",
                [note.replace("scaled", "not scaled: the index's total_size differs too much")],
            )
        return (
            [wt.Tensor(x.name, round(x.nbytes * scale), x.shard, x.rows, x.heads) for x in formula],
            "the index and the config formula",
            [note],
        )
    if formula is not None:
        return formula, f"the config formula ({layout})", []
    return None, "", []


def weights_per_gpu(r: Any, tp: int, moe_ranks: int, n_mtp: int) -> WeightsPerGpu | None:
    """One GPU's share of the target by placement (module docstring), or None when the sizes are unknown."""
    t = r.target
    if t is None or not t.num_layers:
        return None
    n = t.num_layers
    tf = r.target_pack.facts if r.target_pack is not None else None
    layout = tf.weight_layout if tf is not None else None
    tensors, source, notes = _target_tensors(r, layout, n_mtp)
    text = t.text or {}
    tied = bool(text.get("tie_word_embeddings") or (t.config or {}).get("tie_word_embeddings"))
    if tensors is None:
        return _index_only(t, tp, moe_ranks, tied)
    layers = [0.0] * n
    embed = lm = final = mtp = other = 0.0
    unrec = 0
    mla_layers: set[int] = set()
    lm_stored = False
    for x in tensors:
        g = wt.per_gpu(x, tp, moe_ranks)
        if not wt.shard_of(x.name)[1] and tp > 1:
            unrec += x.nbytes
        i = x.layer
        if i is not None and i < n:
            layers[i] += g
            if "kv_b_proj" in x.name and x.name.endswith("weight"):
                mla_layers.add(i)
        elif i is not None:
            if re.search(r"layers\.\d+\.(embed_tokens|shared_head\.head)\.", x.name):
                continue  # an MTP layer's own embedding / head: vLLM shares the target's (eagle/utils.py:89-120, 45-73)
            mtp += g
        elif "embed_tokens" in x.name or x.name.endswith(("wte.weight", "word_embeddings.weight")):
            embed += g
        elif x.shard == "vocab":
            lm += g
            lm_stored = True
        elif re.search(r"(?:^|\.)norm\.weight$", x.name) and "layers." not in x.name:
            final += g
        else:
            other += g
    if tied and not lm_stored:
        lm = embed
    act = TORCH_DTYPE_BYTES.get(str(r.profile.dtype or "").lower()) or t.dtype_bytes or 2
    if _mla_copies(text, tp, act, mla_layers, layers):
        notes.append(
            "MLA layers count kv_b_proj's decode copies W_UV and W_UK_T in the activation dtype "
            "(model_executor/layers/attention/mla_attention.py:1456-1536)"
        )
    if unrec:
        notes.append(f"{unrec / GIB:.2f} GiB of tensors no TP rule recognises are taken as split by TP (a lower bound)")
    return WeightsPerGpu(layers, embed, lm, final, mtp, other, tied, source, notes, unrec, lm_stored)


def _index_only(t: Any, tp: int, moe_ranks: int, tied: bool) -> WeightsPerGpu | None:
    """The index's total alone: embedding and lm_head as vocab x hidden x dtype, the rest spread
    over the layers, every layer tensor taken as split by TP (None: no index total either)."""
    if not t.index_total_size:
        return None
    n = t.num_layers
    names = t.tensor_names() or set()
    v, h, db = t.vocab_size, t.hidden_size, t.dtype_bytes
    vocab_b = v * h * db if v and h and db else 0
    has_embed = any(x.endswith("embed_tokens.weight") for x in names)
    has_lm = any(x.endswith("lm_head.weight") for x in names)
    stored = vocab_b * (int(has_embed) + int(has_lm))
    body = max(0, t.index_total_size - stored)
    padded = wt.per_gpu(wt.Tensor("embed_tokens", vocab_b, "vocab", rows=v or 0), tp, moe_ranks)
    return WeightsPerGpu(
        [body / n / tp] * n,
        padded if has_embed else 0.0,
        padded if has_lm or tied else 0.0,
        0.0,
        0.0,
        0.0,
        tied,
        "the index's total_size",
        [
            "weights per GPU from the index's total alone (no headers, no formula for this family): every layer "
            "tensor taken as split by TP, a lower bound at TP > 1"
            + ("" if has_embed else "; the embedding's size is unknown: spread over the layers")
        ],
        lm_head_stored=has_lm,
    )


def _mla_copies(text: dict[str, Any], tp: int, act: int, mla_layers: set[int], layers: list[float]) -> bool:
    """MLA: W_UV and W_UK_T, kv_b_proj's decode copies in the activation dtype
    (mla_attention.py:1456-1536), added to each MLA layer's bytes; whether any were."""
    heads, kvr, nope, vdim = (
        v if isinstance(v := text.get(k), int) and v > 0 else None
        for k in ("num_attention_heads", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim")
    )
    if not mla_layers or heads is None or kvr is None or nope is None or vdim is None:
        return False
    copy = max(1, heads // tp) * kvr * (nope + vdim) * act
    for i in mla_layers:
        layers[i] += copy
    return True


def drafter_per_gpu(r: Any, tp: int, moe_ranks: int) -> tuple[float | None, str]:
    """One GPU's share of an external drafter: its headers (split by the same rules), else its index's total / TP
    (every tensor taken as split). (None, why) when unknown."""
    d = r.drafter
    if d is None:
        return None, "no drafter checkpoint read"
    if d.tensors:
        text = d.text or {}
        kvh = text.get("num_key_value_heads") or text.get("num_attention_heads")
        shapes = {name: (ti.nbytes, ti.shape) for name, ti in d.tensors.items() if not name.endswith("t2d")}
        ts = wt.tensors_from_header(shapes, kvh if isinstance(kvh, int) else None)
        return sum(wt.per_gpu(x, tp, moe_ranks) for x in ts), "its safetensors headers"
    if d.index_total_size:
        return d.index_total_size / tp, "its index's total size (taken as split by TP)"
    return None, "its size is unknown here (no headers or index read)"


# ---------------------------------------------------------------------------------------------
# KV layers


def _linear_layers(r: Any, n: int) -> set[int]:
    """Layers a hybrid family's pack lists as linear-attention / SSM state (facts.linear_layers)."""
    tf = r.target_pack.facts if r.target_pack is not None else None
    ll = tf.linear_layers if tf is not None else None
    if ll is None or r.target is None:
        return set()
    cur: Any = r.target.text
    for part in ll.key.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if not isinstance(cur, list):
        return set()
    return {x - ll.base for x in cur if isinstance(x, int) and 0 <= x - ll.base < n}


def kv_layer(text: dict[str, Any], tp: int, kv_bytes: int, i: int) -> KvLayer | None:
    """Layer i's KV cache on one GPU (memory.py docstring), or None when the config does not tell."""
    heads = text.get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0:
        return None
    kvr, rope = text.get("kv_lora_rank"), text.get("qk_rope_head_dim")
    if isinstance(kvr, int) and kvr > 0:
        if not isinstance(rope, int) or rope < 0:
            return None
        return KvLayer((kvr + rope) * kv_bytes)
    h = text.get("hidden_size")
    kvh = text.get("num_key_value_heads") or heads
    hd = text.get("head_dim") or (h // heads if isinstance(h, int) else None)
    if not isinstance(kvh, int) or kvh <= 0 or not isinstance(hd, int) or hd <= 0:
        return None
    window = None
    lt = text.get("layer_types")
    sw = text.get("sliding_window")
    if isinstance(lt, list) and i < len(lt) and lt[i] == "sliding_attention" and isinstance(sw, int) and sw > 0:
        window = sw  # models/llama.py:185-204: the window only where layer_types says sliding_attention
    return KvLayer(2 * max(1, kvh // tp) * hd * kv_bytes, window)


# ---------------------------------------------------------------------------------------------
# Overheads


def _pos(cfg: dict[str, Any], *keys: str) -> int:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return 0


def working_set_per_token(text: dict[str, Any], tp: int) -> int:
    """Elements one token keeps alive inside one layer's forward on one GPU: the hidden state and residual, and
    the larger of attention's projections and the MLP's gate/up/activation (a MoE's top-k routed copies)."""
    h = _pos(text, "hidden_size")
    heads = _pos(text, "num_attention_heads")
    if not h or not heads:
        return 0
    hd = _pos(text, "head_dim") or h // heads
    kvh = _pos(text, "num_key_value_heads") or heads
    q = heads // max(1, tp) * (_pos(text, "qk_nope_head_dim") + _pos(text, "qk_rope_head_dim") or hd)
    kv = (
        heads // max(1, tp) * (_pos(text, "qk_nope_head_dim") + _pos(text, "v_head_dim"))
        if _pos(text, "kv_lora_rank")
        else 2 * max(1, kvh // max(1, tp)) * hd
    )
    attn = 2 * q + kv
    experts = _pos(text, "num_experts", "num_local_experts", "n_routed_experts")
    if experts:
        inter = _pos(text, "moe_intermediate_size", "intermediate_size") // max(1, tp)
        top = _pos(text, "num_experts_per_tok", "num_experts_per_token") or 1
        mlp = top * (3 * inter + h)
    else:
        mlp = 3 * (_pos(text, "intermediate_size") // max(1, tp))
    return 2 * h + max(attn, mlp)


def overheads(
    text: dict[str, Any], tp: int, act_bytes: int, s: Settings, n_stage_layers: int, last: bool
) -> tuple[float, float, float]:
    """(activation peak, CUDA-graph pool, runtime) on one GPU of a stage (module docstring)."""
    per_tok = working_set_per_token(text, tp) * act_bytes
    forward = s.max_num_batched_tokens * per_tok
    if last:
        vocab = _pos(text, "vocab_size")
        rows = min(s.max_num_seqs, s.max_num_batched_tokens)
        forward = max(forward, rows * vocab * LOGIT_BYTES)
    graphs = 0.0
    if s.cudagraphs and s.capture_sizes:
        graphs = len(s.capture_sizes) * n_stage_layers * GRAPH_BYTES_PER_LAYER + max(s.capture_sizes) * per_tok
    return float(forward), float(graphs), float(RUNTIME_BYTES)


# ---------------------------------------------------------------------------------------------
# The whole engine


@dataclass
class Memory:
    """The memory plan of a resolved profile and what it was built from (None parts: unknown)."""

    plan: MemoryPlan | None
    inputs: MemoryInput | None
    settings: Settings | None
    device: Device | None
    weights_source: str = ""
    notes: list[str] = field(default_factory=list)
    unknown: str | None = None  # why there is no plan


def memory_of(r: Any) -> Memory:
    """The memory of every stage of a resolved profile on its `hardware` (without one: what each GPU
    needs). Pure; resolve computes it once (`Resolved.memory`: the rule, the plan's table and
    `--json` read it)."""
    plan = r.plan
    if plan is None or r.target is None:
        return Memory(None, None, None, None, unknown="no plan (the target's config could not be read)")
    topo = r.profile.topology
    tp = topo.tensor_parallel
    device, why = device_of(r.profile.hardware, r.platform)
    if why:
        return Memory(None, None, None, None, unknown=why)
    s = settings(r, device.bytes if device else None)
    moe_ranks = tp * topo.data_parallel
    spec = r.spec
    n_mtp = 0
    if spec is not None and not spec.external_drafter:
        n_mtp = len(plan.draft_layer_ids)
    w = weights_per_gpu(r, tp, moe_ranks, n_mtp)
    if w is None:
        return Memory(
            None, None, s, device, unknown="the target's weight sizes are unknown (no headers, index or formula)"
        )
    notes = list(w.notes) + list(s.notes)
    drafter_b, drafter_src = 0.0, ""
    if spec is not None and spec.external_drafter:
        got, drafter_src = drafter_per_gpu(r, tp, moe_ranks)
        if got is None:
            notes.append(f"the drafter is not counted ({drafter_src})")
        drafter_b = got or 0.0
    linear = _linear_layers(r, plan.num_layers)
    stages_in, kv_unknown = _stage_inputs(r, w, s, StageExtras(tp, n_mtp, drafter_b, linear))
    if linear:
        notes.append(
            f"{len(linear)} linear-attention / SSM layer(s) keep a per-request state that is not counted (its size "
            "is not modelled)"
        )
    if kv_unknown:
        notes.append("the KV cache's bytes per token are unknown (the config's head layout or the cache dtype)")
    mi = MemoryInput(
        stages=tuple(stages_in),
        device_bytes=device.bytes if device else None,
        utilization=s.utilization,
        max_model_len=s.max_model_len or 0,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        block_size=s.block_size,
        kv_cache_memory_bytes=s.kv_cache_memory_bytes,
    )
    mp = plan_memory(mi)
    if drafter_src:
        notes.append(f"the drafter counts on the last stage from {drafter_src}")
    notes.extend(mp.notes)
    return Memory(mp, mi, s, device, w.source, notes)


@dataclass(frozen=True)
class StageExtras:
    """What every stage's inputs are built with besides the weights and settings."""

    tp: int
    n_mtp: int  # the target's MTP layers that draft (method mtp), on the last stage
    drafter_b: float  # an external drafter's bytes per GPU, on the last stage
    linear: set[int]  # the linear-attention / SSM layers (no KV cache)


def _stage_weight_bytes(w: Any, st: Any, n_stages: int, x: StageExtras) -> float:
    """The weights on one GPU of stage `st` (module doc, "Placement")."""
    start, end = st.layers
    gpu = float(sum(w.layers[start:end]))
    if st.embedding == "first":
        gpu += w.embed + w.other
    if st.rank == n_stages - 1:
        # a tied lm_head is the embedding: one matrix where the stage holds both (PP = 1)
        tied_here = w.tied and not w.lm_head_stored and st.embedding == "first"
        gpu += (0.0 if tied_here else w.lm_head) + w.final
        if st.embedding == "drafter-needs" and n_stages > 1:
            gpu += w.embed or w.lm_head
        if x.n_mtp:
            gpu += w.mtp
        gpu += x.drafter_b
    return gpu


def _stage_kv(text: dict[str, Any], tp: int, kvb: int, linear: set[int], start: int, end: int) -> list[KvLayer] | None:
    """The KV layers of layers start..end-1 (None: a layer's bytes per token are unknown)."""
    kv: list[KvLayer] = []
    for i in range(start, end):
        if i in linear:
            continue
        ly = kv_layer(text, tp, kvb, i)
        if ly is None:
            return None
        kv.append(ly)
    return kv


def _stage_inputs(r: Any, w: Any, s: Settings, x: StageExtras) -> tuple[list[StageInput], bool]:
    """Every stage's memory inputs, and whether the KV cache's bytes per token are unknown (then no
    stage counts a KV layer)."""
    plan = r.plan
    text = r.target.text or {}
    act_bytes = TORCH_DTYPE_BYTES.get(str(r.profile.dtype or "").lower()) or r.target.dtype_bytes or 2
    out: list[StageInput] = []
    kv_unknown = s.kv_dtype_bytes is None
    n_stages = len(plan.stages)
    for st in plan.stages:
        start, end = st.layers
        last = st.rank == n_stages - 1
        kv = None if kv_unknown else _stage_kv(text, x.tp, s.kv_dtype_bytes or 0, x.linear, start, end)
        if kv is None:
            kv_unknown, kv = True, []
        elif last:
            kv.extend(_drafter_kv(r, x.tp, s, x.n_mtp, text))
        act, graphs, runtime = overheads(text, x.tp, act_bytes, s, end - start, last)
        out.append(StageInput(_stage_weight_bytes(w, st, n_stages, x), tuple(kv), act, graphs, runtime))
    if kv_unknown:
        out = [StageInput(y.weights, (), y.activation, y.cudagraph, y.runtime) for y in out]
    return out, kv_unknown


def _drafter_kv(r: Any, tp: int, s: Settings, n_mtp: int, text: dict[str, Any]) -> list[KvLayer]:
    """The drafter's KV layers on the last stage: MTP layers like the target's; an external drafter's decoder
    layers from its config (its own heads and head_dim)."""
    kvb = s.kv_dtype_bytes or 0
    if n_mtp:
        return [ly for i in range(n_mtp) if (ly := kv_layer(text, tp, kvb, 0)) is not None]
    d = r.drafter
    if d is None or not d.text:
        return []
    nd = d.text.get("num_hidden_layers")
    if not isinstance(nd, int) or nd <= 0:
        return []
    ly = kv_layer(d.text, tp, kvb, 0)
    return [] if ly is None else [ly] * nd


def fits_layouts(r: Any, gpus: int, budget: int) -> list[tuple[int, int]]:
    """(TP, PP) layouts over the same number of GPUs whose every stage's weights fit one GPU's budget
    (default partitions), for a refusal's fix."""
    from ppspec_cli.planning.partition import default_partition

    out: list[tuple[int, int]] = []
    if r.target is None or not r.target.num_layers:
        return out
    n = r.target.num_layers
    heads = (r.target.text or {}).get("num_attention_heads")
    spec = r.spec
    n_mtp = len(r.plan.draft_layer_ids) if r.plan is not None and spec is not None and not spec.external_drafter else 0
    for tp in (1, 2, 4, 8, 16):
        if gpus % tp or (isinstance(heads, int) and heads % tp):
            continue
        pp = gpus // tp
        if pp > n:
            continue
        w = weights_per_gpu(r, tp, tp * r.profile.topology.data_parallel, n_mtp)
        if w is None:
            continue
        d, _ = drafter_per_gpu(r, tp, tp) if spec is not None and spec.external_drafter else (0.0, "")
        parts = default_partition(n, pp)
        start = 0
        worst = 0.0
        for k, cnt in enumerate(parts):
            g = sum(w.layers[start : start + cnt])
            if k == 0:
                g += w.embed + w.other
            if k == pp - 1:
                g += w.lm_head + w.final + w.mtp + (d or 0.0) + (w.embed if pp > 1 and spec is not None else 0.0)
            worst = max(worst, g)
            start += cnt
        if worst <= budget:
            out.append((tp, pp))
    return out


def tokens_for(plan: MemoryPlan | None, concurrency: int, context: int) -> dict[str, Any] | None:
    """What the KV capacity means at `concurrency` requests of `context` tokens (for --predict)."""
    if plan is None or plan.engine_tokens is None:
        return None
    need = concurrency * context
    return {
        "concurrency": concurrency,
        "context": context,
        "tokens_needed": need,
        "kv_tokens": plan.engine_tokens,
        "fits": need <= plan.engine_tokens,
        "share": round(need / plan.engine_tokens, 4) if plan.engine_tokens else None,
    }


def balanced_partition(r: Any) -> Any:
    """The plan with its suggested `layer_partition` balancing memory (planning/partition.py balance_memory):
    the split maximising the smallest stage's KV capacity among those within TIME_SLACK of the time balance,
    the drafter and the lm_head on the last stage. Needs `hardware` (the budget), PP > 1 and known sizes; else
    the plan as it is."""
    from dataclasses import replace

    from ppspec_cli.knowledge.methods import drafter_passes
    from ppspec_cli.planning.partition import TIME_SLACK, StageEnds, balance_memory, default_partition

    plan = r.plan
    topo = r.profile.topology
    if plan is None or r.target is None or topo.pipeline_parallel < 2 or r.profile.disaggregated:
        return plan
    device, why = device_of(r.profile.hardware, r.platform)
    if device is None or why:
        return plan
    tp = topo.tensor_parallel
    spec = r.spec
    n_mtp = len(plan.draft_layer_ids) if spec is not None and not spec.external_drafter else 0
    w = weights_per_gpu(r, tp, tp * topo.data_parallel, n_mtp)
    s = settings(r, device.bytes)
    if w is None or not s.kv_dtype_bytes:
        return plan
    text = r.target.text or {}
    n = plan.num_layers
    linear = _linear_layers(r, n)
    kv = []
    for i in range(n):
        ly = None if i in linear else kv_layer(text, tp, s.kv_dtype_bytes, i)
        if ly is None and i not in linear:
            return plan
        kv.append(0.0 if ly is None else float(ly.bytes_per_token))
    drafter = 0.0
    if spec is not None and spec.external_drafter:
        drafter = drafter_per_gpu(r, tp, tp * topo.data_parallel)[0] or 0.0
    act_bytes = TORCH_DTYPE_BYTES.get(str(r.profile.dtype or "").lower()) or r.target.dtype_bytes or 2
    mid_act, graphs, runtime = overheads(text, tp, act_bytes, s, n // topo.pipeline_parallel, False)
    last_act, _, _ = overheads(text, tp, act_bytes, s, n // topo.pipeline_parallel, True)
    needs_embed = any(st.embedding == "drafter-needs" for st in plan.stages)
    last_mem = w.lm_head + w.final + drafter + w.mtp + (w.embed if needs_embed else 0.0) + (last_act - mid_act)
    passes = drafter_passes(plan.method, r.profile.drafter.num_speculative_tokens) if plan.method else 0
    drafter_read = drafter if spec is not None and spec.external_drafter else w.mtp
    budget = math.ceil(device.bytes * s.utilization) - mid_act - graphs - runtime
    last_kv = sum(ly.bytes_per_token for ly in _drafter_kv(r, tp, s, n_mtp, text))
    got = balance_memory(
        w.layers,
        w.layers,
        kv,
        topo.pipeline_parallel,
        budget=budget,
        ends=StageEnds(
            first_mem=w.embed + w.other,
            last_time=w.lm_head + passes * drafter_read,
            last_mem=last_mem,
            last_kv=last_kv,
        ),
        prefer=default_partition(n, topo.pipeline_parallel),
    )
    if got is None:
        return plan
    notes = tuple(x for x in plan.notes if not x.startswith("suggested layer_partition"))
    if list(got) != list(plan.partition):
        notes = (
            *notes,
            f"suggested layer_partition {got}: the largest KV cache the smallest stage can have on {device.name} "
            f"(vLLM sizes every stage's cache by the smallest), among splits within {TIME_SLACK:.0%} of the "
            "time balance (the weight bytes each stage reads per step, the lm_head and the drafter's passes on the "
            "last stage); docs/memory.md",
        )
    return replace(plan, suggested_partition=tuple(got), notes=notes)
