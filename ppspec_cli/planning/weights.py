"""Weight bytes of a target estimated from its config alone (no index, no safetensors headers here,
e.g. a login node with only config.json cached), for the plan's per-stage memory column.

Only for the layouts a family's pack declares (`facts.weight_layout`), whose parameter count follows
from the config by a known formula: `dense-gated` (attention with grouped KV heads + a gated MLP:
gate, up and down projections) and `sparse-gated` (the same attention; every layer's MLP a router
plus `num_experts` gated experts). Anything else (no declared layout, mixed dense/sparse layers, a
dtype the config does not state, a missing key) gives None: unknown, never guessed. Biases are not
counted (these layouts have none), norms are. For the Llama-3.1-8B fixture the estimate is within
8 KiB of its index's total_size (16.06 GB); for the Qwen3-30B-A3B fixture it gives 30.5 B parameters,
the figure of its model card.
"""

from __future__ import annotations

from typing import Any

LAYOUTS = ("dense-gated", "sparse-gated")


def _pos_int(cfg: dict[str, Any], key: str) -> int | None:
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def estimate(layout: str | None, text: dict[str, Any], dtype_bytes: int | None) -> tuple[list[int], int, int] | None:
    """(bytes per decoder layer, embedding bytes, lm_head bytes) for a pack-declared `layout`, or
    None when there is none or a needed key is not known."""
    h, n, v, heads = (
        _pos_int(text, k) for k in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")
    )
    if layout not in LAYOUTS or not dtype_bytes or h is None or n is None or v is None or heads is None:
        return None
    kv = _pos_int(text, "num_key_value_heads") or heads
    hd = _pos_int(text, "head_dim") or h // heads
    attn = h * heads * hd * 2 + h * kv * hd * 2  # q and o; k and v
    if layout == "dense-gated":
        inter = _pos_int(text, "intermediate_size")
        if inter is None:
            return None
        mlp = 3 * h * inter
    else:
        experts = _pos_int(text, "num_experts") or _pos_int(text, "num_local_experts")
        inter = _pos_int(text, "moe_intermediate_size") or _pos_int(text, "intermediate_size")
        if experts is None or inter is None or text.get("mlp_only_layers") or text.get("decoder_sparse_step", 1) != 1:
            return None
        mlp = experts * 3 * h * inter + h * experts
    per_layer = (attn + mlp + 2 * h) * dtype_bytes
    embed = v * h * dtype_bytes
    return [per_layer] * n, embed, embed
