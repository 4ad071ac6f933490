"""Generated checkpoint indexes of the flagship checkpoints' real sizes (issue 29 item 2).

DeepSeek-V3's model.safetensors.index.json is about 9 MB with ~92k tensors; Kimi-K2's about 13 MB
(~140k: 384 routed experts). The generator below writes the same layout (61 layers; per routed expert
gate/up/down weights with their FP8 `weight_scale_inv`; attention and norms; 163 shards) so the
reader meets files of the real size and shape, not a token-sized stand-in."""

from __future__ import annotations

import json
from pathlib import Path

#: (layers, routed experts) -> the real checkpoints' tensor counts and sizes, for the asserts.
DEEPSEEK_V3 = (61, 256)
KIMI_K2 = (61, 384)


def write_index(path: Path, layers: int, experts: int, shards: int = 163) -> tuple[int, int]:
    """Write an index at `path`; (tensor count, bytes)."""
    wm: dict[str, str] = {}

    def put(name: str) -> None:
        wm[name] = f"model-{len(wm) % shards + 1:05d}-of-{shards:06d}.safetensors"

    put("model.embed_tokens.weight")
    for layer in range(layers):
        for e in range(experts):
            for m in ("gate_proj", "up_proj", "down_proj"):
                put(f"model.layers.{layer}.mlp.experts.{e}.{m}.weight")
                put(f"model.layers.{layer}.mlp.experts.{e}.{m}.weight_scale_inv")
        for n in (
            "self_attn.q_a_proj",
            "self_attn.kv_a_proj_with_mqa",
            "self_attn.o_proj",
            "input_layernorm",
            "post_attention_layernorm",
        ):
            put(f"model.layers.{layer}.{n}.weight")
    put("model.norm.weight")
    put("lm_head.weight")
    text = json.dumps({"metadata": {"total_size": 688_586_727_753}, "weight_map": wm}, indent=2)
    path.write_text(text)
    return len(wm), len(text)
