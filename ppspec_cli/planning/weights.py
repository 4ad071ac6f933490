"""Weight bytes of a target estimated from its config alone (no index, no safetensors headers here,
e.g. a login node with only config.json cached), for the plan's per-stage memory column.

Only for decoder layouts whose parameter count follows from the config by a known formula: the
Llama-style dense decoder (attention with grouped KV heads + a gated MLP: gate, up and down
projections) and the Qwen3-MoE / Mixtral sparse decoders (the same attention, every layer's MLP a
router plus `num_experts` gated experts). Anything else (MLA attention, shared experts, mixed
dense/sparse layers, a dtype the config does not state) gives None: unknown, never guessed.
Biases are not counted (these layouts have none), norms are. For Llama-3.1-8B the estimate is
within 8 KiB of its index's total_size (16.06 GB); for Qwen3-30B-A3B it gives 30.5 B parameters,
the figure of its model card.
"""

from __future__ import annotations

from typing import Any

#: Architectures with the dense layout above, and those with the sparse one.
DENSE = frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
SPARSE = frozenset({"Qwen3MoeForCausalLM", "MixtralForCausalLM"})


def _pos_int(cfg: dict[str, Any], key: str) -> int | None:
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def estimate(architectures: list[str] | tuple[str, ...], text: dict[str, Any], dtype_bytes: int | None) -> tuple[list[int], int, int] | None:
    """(bytes per decoder layer, embedding bytes, lm_head bytes), or None when the layout or a
    needed key is not known."""
    arch = next((a for a in architectures if a in DENSE | SPARSE), None)
    h, n, v, heads = (_pos_int(text, k) for k in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads"))
    if arch is None or not dtype_bytes or None in (h, n, v, heads):
        return None
    kv = _pos_int(text, "num_key_value_heads") or heads
    hd = _pos_int(text, "head_dim") or h // heads  # type: ignore[operator]
    attn = h * heads * hd * 2 + h * kv * hd * 2  # q, o; k, v  # type: ignore[operator]
    if arch in DENSE:
        inter = _pos_int(text, "intermediate_size")
        if inter is None:
            return None
        mlp = 3 * h * inter  # type: ignore[operator]
    else:
        experts = _pos_int(text, "num_experts") or _pos_int(text, "num_local_experts")
        inter = _pos_int(text, "moe_intermediate_size") if arch == "Qwen3MoeForCausalLM" else _pos_int(text, "intermediate_size")
        if experts is None or inter is None or text.get("mlp_only_layers") or text.get("decoder_sparse_step", 1) != 1:
            return None
        mlp = experts * 3 * h * inter + h * experts  # type: ignore[operator]
    per_layer = (attn + mlp + 2 * h) * dtype_bytes  # type: ignore[operator]
    embed = v * h * dtype_bytes  # type: ignore[operator]
    return [per_layer] * n, embed, embed  # type: ignore[list-item]
