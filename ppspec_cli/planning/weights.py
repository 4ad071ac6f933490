"""Weights as vLLM holds them on one GPU: every tensor of the target (from its safetensors headers, or
from config.json by a formula when no headers are at hand), how tensor parallelism splits it, and the
bytes each GPU of a stage holds. Pure: no I/O (planning/memory_inputs.py reads the checkpoints).

How vLLM splits a tensor over the TP ranks (`Shard`, vLLM 0.34.0 source; 0.30-0.33 the same):
- `split`: column- and row-parallel linears divide by TP (model_executor/layers/linear.py:500
  `output_size_per_partition = divide(output_size, tp_size)`, :1741 `input_size_per_partition`);
- `kv`: the K and V projections hold `total_kv_heads // TP` heads per rank, one replicated head when
  TP exceeds the KV heads (linear.py:1113-1119 `num_kv_head_replicas = divide(tp_size, total_num_kv_heads)`);
- `vocab`: the embedding and lm_head pad the vocabulary to a multiple of 64 and divide the rows by TP
  (model_executor/layers/vocab_parallel_embedding.py:39 `DEFAULT_VOCAB_PADDING_SIZE = 64`, :291-311);
- `experts`: a fused MoE layer splits its experts over TP x DP x PCP ranks: by intermediate size without
  expert parallelism, whole experts with it (model_executor/layers/fused_moe/config.py:1244-1270
  `flatten_tp_across_dp_and_pcp`; :1398 `intermediate_size_per_partition = intermediate_size // tp_size`);
  either way each rank holds 1/(TP x DP x PCP) of the expert bytes;
- `replicated`: norms, the MoE router (fused_moe/router/gate_linear.py:26 `GateLinear(ReplicatedLinear)`),
  MLA's low-rank down projections (models/deepseek_v2.py:1053-1065 `fused_qkv_a_proj` with
  `disable_tp=True`, `kv_a_proj_with_mqa = ReplicatedLinear`), an MTP layer's `eh_proj` (models/deepseek_mtp.py:84
  `nn.Linear`), an EAGLE3 drafter's `fc` (models/llama_eagle3.py:242 `ReplicatedLinear`) and `d2t`.

A tensor whose name none of these rules recognises is counted as `split` (a lower bound at TP > 1, exact
at TP = 1); `unrecognised` says how many bytes that is.

Config formulas (`config_tensors`), for the layouts a family's pack declares (`facts.weight_layout`):
- `dense-gated`: attention with grouped KV heads (q, k, v, o) and a gated MLP (gate, up, down), two norms;
- `sparse-gated`: the same attention, and in the sparse layers a router plus `num_experts` (or
  `num_local_experts` / `n_routed_experts`) gated experts of `moe_intermediate_size`, and shared experts
  (`n_shared_experts` x `moe_intermediate_size`, or `shared_expert_intermediate_size` with its gate); a layer is
  sparse unless listed in `mlp_only_layers`, below `first_k_dense_replace`, or off the `decoder_sparse_step` /
  `moe_layer_freq` step;
- `mla-sparse-gated`: multi-head latent attention (DeepSeek-V2/V3: `q_lora_rank`, `kv_lora_rank`,
  `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`) and the sparse-gated MLP rule, plus the MTP layers
  (`num_nextn_predict_layers`: a decoder layer, `enorm`, `hnorm`, `eh_proj`, `shared_head.norm`).
Each in the config's dtype, quantized per `quantization_config` (`quant_of`): linear weights only; the
embedding, lm_head, norms, router and `eh_proj` stay in the model dtype. Biases are not counted (under
0.01% of these layouts). A missing key, an unknown quantization or an undeclared layout: None (unknown).
For Llama-3.1-8B the formula is within 8 KiB of its index's total_size (16.06 GB); Qwen3-30B-A3B gives
30.5 B parameters and Qwen3-235B-A22B 235.1 B (their model cards); DeepSeek-V3 (FP8, MTP included) 684.5 B
elements, the model card's "685B" (tests/test_memory.py).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

LAYOUTS = ("dense-gated", "sparse-gated", "mla-sparse-gated")

Shard = Literal["replicated", "split", "vocab", "kv", "experts"]

#: vLLM pads the vocabulary to a multiple of this (vocab_parallel_embedding.py:39)
VOCAB_PADDING = 64

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERTS = re.compile(r"(?:^|\.)experts\.")
_NORM = re.compile(r"(?:^|\.|_)(?:[a-z]*norm|ln_?\w*|layernorm)(?:\.|$)")
_VOCAB = ("embed_tokens", "word_embeddings", "wte", "lm_head", "shared_head.head", "embedding.weight")
_REPLICATED = frozenset(
    {
        "q_a_proj",
        "kv_a_proj_with_mqa",
        "fused_qkv_a_proj",
        "eh_proj",
        "router",
        "shared_expert_gate",
        "e_score_correction_bias",
        "fc",
        "d2t",
        "t2d",
        "inv_freq",
    }
)
_KV = frozenset({"k_proj", "v_proj"})
_SPLIT = frozenset(
    {
        "q_proj",
        "q_b_proj",
        "kv_b_proj",
        "o_proj",
        "qkv_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
        "gate_up_proj",
        "w1",
        "w2",
        "w3",
        "dense",
        "fc1",
        "fc2",
        "c_attn",
        "c_proj",
        "c_fc",
        "query_key_value",
        "dense_h_to_4h",
        "dense_4h_to_h",
        "out_proj",
    }
)


@dataclass(frozen=True)
class Tensor:
    """One weight tensor: its checkpoint name, its bytes on all TP ranks together (as stored), how TP splits it,
    and for `vocab` the vocabulary rows, for `kv` the KV heads it holds."""

    name: str
    nbytes: int
    shard: Shard
    rows: int = 0
    heads: int = 0

    @property
    def layer(self) -> int | None:
        m = _LAYER.search(self.name)
        return int(m.group(1)) if m else None


def shard_of(name: str) -> tuple[Shard, bool]:
    """How vLLM splits the tensor `name` over TP ranks, and whether a rule recognised it (module docstring)."""
    return _shard_of(_DIGITS.sub("#", name))


_DIGITS = re.compile(r"(?<=\.)\d+(?=\.)")  # layer and expert numbers: one cache entry for every layer


@functools.lru_cache(maxsize=4096)
def _shard_of(name: str) -> tuple[Shard, bool]:
    parts = name.split(".")
    if any(v in name for v in _VOCAB) and not _EXPERTS.search(name):
        return "vocab", True
    if _EXPERTS.search(name) and "shared_experts" not in name:
        return "experts", True
    mods = set(parts)
    if mods & _REPLICATED or name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight", ".gate.weight")):
        # `mlp.gate` is the router (a Linear h -> experts); `gate_proj` is another name
        return "replicated", True
    if _NORM.search(name):
        return "replicated", True
    if mods & _KV:
        return "kv", True
    if mods & _SPLIT:
        return "split", True
    return "split", False


def per_gpu(t: Tensor, tp: int, moe_ranks: int) -> float:
    """The bytes of `t` on one GPU of a TP group of `tp` ranks (`moe_ranks`: TP x DP x PCP, the ranks experts
    spread over)."""
    if t.shard == "replicated" or tp <= 1 and t.shard != "experts":
        return float(t.nbytes)
    if t.shard == "split":
        return t.nbytes / tp
    if t.shard == "experts":
        return t.nbytes / max(1, moe_ranks)
    if t.shard == "kv":
        if t.heads <= 0:
            return t.nbytes / tp
        per_rank = t.heads // tp if t.heads >= tp else 1
        return t.nbytes * per_rank / t.heads
    # vocab: rows padded to a multiple of 64, divided by TP
    if t.rows <= 0:
        return t.nbytes / tp
    padded = math.ceil(t.rows / VOCAB_PADDING) * VOCAB_PADDING
    return t.nbytes / t.rows * math.ceil(padded / tp)


# ---------------------------------------------------------------------------------------------
# Quantization (config.json's quantization_config)


@dataclass(frozen=True)
class Quant:
    """How a quantized linear weight is stored: `bits` per element, plus scales of `scale_bytes` per group of
    `group` elements (along the input dim), or per `block` (rows, cols), or one per output row (`per_row`);
    `experts_only`: only fused-MoE experts are quantized (MXFP4 in vLLM's Mxfp4Config); `ignore`: module name
    fragments left unquantized."""

    method: str
    bits: float
    scale_bytes: int = 0
    group: int = 0
    block: tuple[int, int] | None = None
    per_row: bool = False
    experts_only: bool = False
    ignore: tuple[str, ...] = ()

    def nbytes(self, out: int, inp: int) -> int:
        """Weight plus scales of one [out, inp] linear weight."""
        b = math.ceil(out * inp * self.bits / 8)
        if self.block:
            b += math.ceil(out / self.block[0]) * math.ceil(inp / self.block[1]) * self.scale_bytes
        elif self.group:
            b += out * math.ceil(inp / self.group) * self.scale_bytes
        elif self.per_row:
            b += out * self.scale_bytes
        return b

    def applies(self, name: str, expert: bool) -> bool:
        if self.experts_only and not expert:
            return False
        return not any(frag and frag in name for frag in self.ignore)


def _ignore_list(qc: dict[str, Any]) -> tuple[str, ...]:
    for k in ("ignored_layers", "modules_to_not_convert", "ignore", "exclude_modules"):
        v = qc.get(k)
        if isinstance(v, list):
            return tuple(str(x).removeprefix("re:") for x in v if isinstance(x, str))
    return ()


def _fp8(qc: dict[str, Any], ignore: tuple[str, ...]) -> Quant:
    blk = qc.get("weight_block_size")
    if isinstance(blk, list) and len(blk) == 2 and all(isinstance(x, int) and x > 0 for x in blk):
        return Quant("fp8", 8, 4, block=(blk[0], blk[1]), ignore=ignore)
    return Quant("fp8", 8, ignore=ignore)


def _modelopt(qc: dict[str, Any], ignore: tuple[str, ...]) -> Quant | Literal["unknown"]:
    algo = str(qc.get("quant_algo", (qc.get("quantization") or {}).get("quant_algo", ""))).upper()
    if algo == "FP8":
        return Quant("fp8", 8, ignore=ignore)
    if algo == "NVFP4":
        return Quant("nvfp4", 4, 1, group=16, ignore=ignore)
    return "unknown"


def _int_groups(qc: dict[str, Any], ignore: tuple[str, ...], method: str) -> Quant | Literal["unknown"]:
    bits, group = qc.get("bits"), qc.get("group_size")
    if not (isinstance(bits, int) and bits in (2, 3, 4, 8) and isinstance(group, int)):
        return "unknown"
    # an fp16 scale and a packed zero point per group (per output row when group_size is -1)
    g = max(0, group)
    return Quant(method, bits + (bits / g if g else 0), 2, group=g, per_row=not g, ignore=ignore)


def _compressed(qc: dict[str, Any], ignore: tuple[str, ...]) -> Quant | Literal["unknown"]:
    groups = qc.get("config_groups")
    first = next(iter(groups.values()), None) if isinstance(groups, dict) and len(groups) == 1 else None
    w = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(w, dict):
        return "unknown"
    bits, kind, strategy, gs = w.get("num_bits"), w.get("type"), w.get("strategy"), w.get("group_size")
    if bits == 8 and kind == "float":
        return Quant("fp8", 8, 4, per_row=strategy == "channel", ignore=ignore)
    if bits == 4 and kind == "float" and gs == 16:
        return Quant("nvfp4", 4, 1, group=16, ignore=ignore)
    if isinstance(bits, int) and kind == "int" and strategy == "group" and isinstance(gs, int) and gs > 0:
        return Quant("int", bits, 2, group=gs, ignore=ignore)
    if isinstance(bits, int) and kind == "int" and strategy == "channel":
        return Quant("int", bits, 2, per_row=True, ignore=ignore)
    return "unknown"


def quant_of(config: dict[str, Any] | None) -> Quant | None | Literal["unknown"]:
    """The checkpoint's quantization as vLLM stores its weights: None (unquantized), a Quant, or "unknown"
    (a method these formulas do not cover: no estimate). Read from `quantization_config` (vLLM's
    model_executor/layers/quantization: fp8.py Fp8Config (block scales fp32 `weight_scale_inv`, else one fp32
    scale per tensor), mxfp4.py (MoE experts only, an E8M0 byte per 32 elements), modelopt.py (FP8; NVFP4: an
    FP8 scale per 16 elements), compressed-tensors (float8 / nvfp4 / int groups), gptq and awq (int groups,
    fp16 scale and packed zero per group))."""
    qc = (config or {}).get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, dict):
        return "unknown"
    method = str(qc.get("quant_method", "")).lower()
    ignore = _ignore_list(qc)
    if method == "mxfp4":
        return Quant("mxfp4", 4, 1, group=32, experts_only=True, ignore=ignore)
    if method in ("gptq", "awq"):
        return _int_groups(qc, ignore, method)
    readers = {"fp8": _fp8, "modelopt": _modelopt, "compressed-tensors": _compressed}
    return readers[method](qc, ignore) if method in readers else "unknown"


# ---------------------------------------------------------------------------------------------
# Formulas from config.json


def _pos(cfg: dict[str, Any], *keys: str) -> int | None:
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def sparse_layer(text: dict[str, Any], i: int, only: frozenset[int] | None = None) -> bool:
    """Whether decoder layer `i` has a MoE MLP, by the keys vLLM's MoE families read (deepseek_v2.py: layer >=
    first_k_dense_replace and layer % moe_layer_freq == 0; qwen3_moe.py / qwen2_moe.py: not in mlp_only_layers
    and (layer + 1) % decoder_sparse_step == 0)."""
    if only is None:
        got = text.get("mlp_only_layers")
        only = frozenset(x for x in got if isinstance(x, int)) if isinstance(got, list) else frozenset()
    if i in only:
        return False
    first = text.get("first_k_dense_replace")
    if isinstance(first, int) and i < first:
        return False
    freq = text.get("moe_layer_freq")
    if isinstance(freq, int) and freq > 1 and i % freq:
        return False
    step = text.get("decoder_sparse_step")
    return not (isinstance(step, int) and step > 1 and (i + 1) % step)


class _Builder:
    def __init__(self, dtype_bytes: int, quant: Quant | None):
        self.db, self.q = dtype_bytes, quant
        self.out: list[Tensor] = []

    def linear(
        self, name: str, out: int, inp: int, shard: Shard, *, heads: int = 0, expert: bool = False, count: int = 1
    ) -> None:
        q = self.q
        b = q.nbytes(out, inp) if q is not None and q.applies(name, expert) else out * inp * self.db
        self.out.append(Tensor(name + ".weight", b * count, shard, heads=heads))

    def plain(
        self, name: str, elems: int, shard: Shard = "replicated", *, rows: int = 0, db: int | None = None
    ) -> None:
        self.out.append(Tensor(name, elems * (db or self.db), shard, rows=rows))


def _attention(b: _Builder, p: str, text: dict[str, Any], h: int, mla: bool) -> bool:
    heads = _pos(text, "num_attention_heads")
    if heads is None:
        return False
    if mla:
        kvr, rope, nope, v = (
            _pos(text, k) for k in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        )
        if kvr is None or rope is None or nope is None or v is None:
            return False
        qr = _pos(text, "q_lora_rank")
        if qr:
            b.linear(f"{p}.q_a_proj", qr, h, "replicated")
            b.plain(f"{p}.q_a_layernorm.weight", qr)
            b.linear(f"{p}.q_b_proj", heads * (nope + rope), qr, "split")
        else:
            b.linear(f"{p}.q_proj", heads * (nope + rope), h, "split")
        b.linear(f"{p}.kv_a_proj_with_mqa", kvr + rope, h, "replicated")
        b.plain(f"{p}.kv_a_layernorm.weight", kvr)
        b.linear(f"{p}.kv_b_proj", heads * (nope + v), kvr, "split")
        b.linear(f"{p}.o_proj", h, heads * v, "split")
        return True
    kv = _pos(text, "num_key_value_heads") or heads
    hd = _pos(text, "head_dim") or h // heads
    b.linear(f"{p}.q_proj", heads * hd, h, "split")
    b.linear(f"{p}.k_proj", kv * hd, h, "kv", heads=kv)
    b.linear(f"{p}.v_proj", kv * hd, h, "kv", heads=kv)
    b.linear(f"{p}.o_proj", h, heads * hd, "split")
    return True


def _mlp(b: _Builder, p: str, text: dict[str, Any], h: int, i: int, sparse_ok: bool, only: frozenset[int]) -> bool:
    experts = _pos(text, "num_experts", "num_local_experts", "n_routed_experts")
    if sparse_ok and experts and sparse_layer(text, i, only):
        inter = _pos(text, "moe_intermediate_size", "intermediate_size")
        if inter is None:
            return False
        b.plain(f"{p}.gate.weight", experts * h)  # the router: unquantized, replicated
        if text.get("topk_method") == "noaux_tc":
            b.plain(f"{p}.gate.e_score_correction_bias", experts, db=4)
        for proj, (o, n) in (("gate_proj", (inter, h)), ("up_proj", (inter, h)), ("down_proj", (h, inter))):
            # all `experts` experts of one projection as one tensor (vLLM's fused w13 / w2 weights)
            b.linear(f"{p}.experts.{proj}", o, n, "experts", expert=True, count=experts)
        shared = (_pos(text, "n_shared_experts") or 0) * inter or _pos(text, "shared_expert_intermediate_size")
        if shared:
            for proj, (o, n) in (("gate_proj", (shared, h)), ("up_proj", (shared, h)), ("down_proj", (h, shared))):
                b.linear(f"{p}.shared_experts.{proj}", o, n, "split")
            if "shared_expert_intermediate_size" in text:
                b.plain(f"{p}.shared_expert_gate.weight", h)
        return True
    inter = _pos(text, "intermediate_size")
    if inter is None:
        return False
    b.linear(f"{p}.gate_proj", inter, h, "split")
    b.linear(f"{p}.up_proj", inter, h, "split")
    b.linear(f"{p}.down_proj", h, inter, "split")
    return True


def config_tensors(
    layout: str | None, text: dict[str, Any], dtype_bytes: int | None, quant: Quant | None, *, mtp_layers: int = 0
) -> list[Tensor] | None:
    """Every weight tensor of the target by its pack's `layout` (module docstring), the decoder layers and
    `mtp_layers` MTP layers after them; None when the layout is not declared or a key is not known."""
    h, n, vocab = (_pos(text, k) for k in ("hidden_size", "num_hidden_layers", "vocab_size"))
    if layout not in LAYOUTS or not dtype_bytes or h is None or n is None or vocab is None:
        return None
    b = _Builder(dtype_bytes, quant)
    mla = layout == "mla-sparse-gated"
    sparse = layout != "dense-gated"
    b.plain("model.embed_tokens.weight", vocab * h, "vocab", rows=vocab)
    got = text.get("mlp_only_layers")
    only = frozenset(x for x in got if isinstance(x, int)) if isinstance(got, list) else frozenset()
    for i in range(n + max(0, mtp_layers)):
        p = f"model.layers.{i}"
        b.plain(f"{p}.input_layernorm.weight", h)
        b.plain(f"{p}.post_attention_layernorm.weight", h)
        if not _attention(b, f"{p}.self_attn", text, h, mla) or not _mlp(b, f"{p}.mlp", text, h, i, sparse, only):
            return None
        if i >= n:  # an MTP layer's own parts (models/deepseek_mtp.py:82-100); its embedding and head are shared
            b.plain(f"{p}.enorm.weight", h)
            b.plain(f"{p}.hnorm.weight", h)
            b.plain(f"{p}.eh_proj.weight", 2 * h * h)
            b.plain(f"{p}.shared_head.norm.weight", h)
    b.plain("model.norm.weight", h)
    if not text.get("tie_word_embeddings"):
        b.plain("lm_head.weight", vocab * h, "vocab", rows=vocab)
    return b.out


def tensors_from_header(shapes: dict[str, tuple[int, tuple[int, ...]]], heads_kv: int | None) -> list[Tensor]:
    """Tensors of a checkpoint read from its headers: name -> (bytes, shape). The vocabulary rows of a vocab
    tensor are its first dimension; `heads_kv`: the config's KV heads for the k/v projections."""
    out = []
    for name, (nbytes, shape) in shapes.items():
        shard, _ = shard_of(name)
        out.append(
            Tensor(
                name,
                nbytes,
                shard,
                rows=shape[0] if shard == "vocab" and shape else 0,
                heads=(heads_kv or 0) if shard == "kv" else 0,
            )
        )
    return out


def estimate(layout: str | None, text: dict[str, Any], dtype_bytes: int | None) -> tuple[list[int], int, int] | None:
    """(bytes per decoder layer, embedding bytes, lm_head bytes) of the whole checkpoint by a pack-declared
    `layout` (quantized per the config's quantization_config), or None when unknown. A tied lm_head is the
    embedding's bytes again (what the plan's last stage holds under PP)."""
    q = quant_of(text)
    if q == "unknown":
        return None
    ts = config_tensors(layout, text, dtype_bytes, q)
    n = _pos(text, "num_hidden_layers")
    if ts is None or n is None:
        return None
    per = [0] * n
    embed = lm = 0
    for t in ts:
        i = t.layer
        if i is not None and i < n:
            per[i] += t.nbytes
        elif "embed_tokens" in t.name:
            embed = t.nbytes
        elif t.name.startswith("lm_head"):
            lm = t.nbytes
    return per, embed, lm or embed


def mtp_bytes(target: Any, layout: str | None, n_layers: int, n_mtp: int) -> int | None:
    """The bytes of the target's MTP layers (layer index >= `n_layers`) on all TP ranks together, without the
    embedding and head copies a checkpoint stores in them (vLLM shares the target's): from the headers, else the
    config formula; None when unknown."""
    skip = re.compile(r"layers\.\d+\.(embed_tokens|shared_head\.head)\.")
    tensors = getattr(target, "tensors", None)
    if tensors:
        total = 0
        for name, t in tensors.items():
            m = _LAYER.search(name)
            if m and int(m.group(1)) >= n_layers and not skip.search(name):
                total += t.nbytes
        return total or None
    q = quant_of(getattr(target, "config", None) or target.text)
    if q == "unknown":
        return None
    ts = config_tensors(layout, target.text or {}, target.dtype_bytes, q, mtp_layers=n_mtp)
    if ts is None:
        return None
    return sum(t.nbytes for t in ts if (t.layer or 0) >= n_layers and t.layer is not None) or None
