"""What every demo model shares: the tiny Llama shape, its special tokens and taps, the planted
ALWAYS_TOKEN rule, a model's build spec, and the seeded tensor helpers the builders use."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The target's shape. 6 layers so PP=2 splits 3+3 and a tap can sit exactly on the boundary.
VOCAB_SIZE = 1024
HIDDEN_SIZE = 256
NUM_HEADS = 4  # head_dim 64: one the CPU attention backend supports
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
INTERMEDIATE_SIZE = 512
NUM_LAYERS = 6
MAX_POSITIONS = 512
RMS_EPS = 1e-5
ROPE_THETA = 10000.0
# bfloat16: what vLLM serves with --dtype auto anyway (on CPU it downcasts a float32 config to
# bf16), so config, plan arithmetic (bytes per relayed element) and the running engine agree.
DTYPE = "bfloat16"

# Special tokens of the byte-level BPE tokenizer (ids 0, 1).
BOS_TOKEN, EOS_TOKEN = "<s>", "</s>"
BOS_ID, EOS_ID = 0, 1

# EAGLE3 taps in vLLM capture-point terms (tap L = residual stream entering layer L).
# With 6 layers split 3+3, stage 0 holds layers [0, 3): it produces taps 1 and 3 (3 is exactly
# the boundary), stage 1 produces tap 5.
EAGLE3_TAPS = (1, 3, 5)
# The same taps in SGLang/SpecForge output-of-layer terms (id v = output of layer v = tap v+1).
EAGLE3_TAPS_OUTPUT_OF_LAYER = tuple(t - 1 for t in EAGLE3_TAPS)
EAGLE3_DRAFT_VOCAB = 512

# The token the always-one drafter proposes at every position: a learned BPE token (not special,
# not padding). tiny-llama carries one planted rule so that drafter gets real acceptance: after any
# "trigger" token (id a multiple of TRIGGER_EVERY, ids >= 2; ALWAYS_TOKEN itself is not one) the
# greedy next token is ALWAYS_TOKEN (about 90% of the time in vLLM on CPU; the rest of the model
# is random). So ~1 in 5 generated tokens is ALWAYS_TOKEN, and acceptance follows from the output:
# a draft position is accepted exactly when the target's own next token is ALWAYS_TOKEN.
ALWAYS_TOKEN = 505
TRIGGER_EVERY = 4


@dataclass(frozen=True)
class Spec:
    # what the model is ("target", "eagle3", "relay-target", "relay-dflash", ...); a builder shared by two kinds reads
    # it
    kind: str
    seed: int
    description: str
    draft_vocab: int = 0
    taps: str = "top"  # "top": top-level capture-point ids; "nested": eagle_config, output-of-layer
    always_token: int | None = None


def trigger_tokens() -> list[int]:
    """Target ids after which tiny-llama's greedy next token is (almost always) ALWAYS_TOKEN."""
    return [t for t in range(2, VOCAB_SIZE) if t % TRIGGER_EVERY == 0]


def write_json(path: Path, obj: object) -> None:
    from ppspec_cli.io import safeio

    safeio.write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", what=path.name)


class Rand:
    """Seeded N(0, std) tensors in a fixed order; same bytes on any machine for one torch build."""

    def __init__(self, seed: int, dtype: str = DTYPE):
        import torch

        self.torch = torch
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype = getattr(torch, dtype)

    def normal(self, *shape: int, std: float):
        t = self.torch.randn(*shape, generator=self.gen, dtype=self.torch.float32) * std
        return t.to(self.dtype).contiguous()

    def ones(self, n: int):
        return self.torch.ones(n, dtype=self.dtype)


@contextlib.contextmanager
def real_tensors() -> Iterator[None]:
    """Compute on real tensors even while a model is only being described (factory.describe_demo_model
    runs builders on fake tensors): for the small computations a model's shapes depend on, such as a
    planted drafter's vocabulary, which comes from running the tiny target. A no-op otherwise."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        yield


def linear_std(fan_in: int) -> float:
    # 1/sqrt(fan_in): activations stay O(1) through the stack, so logits are decisive (greedy
    # decoding is not a coin toss between near-equal logits).
    return fan_in**-0.5


def layer_weights(r: Rand, prefix: str, qkv_in: int) -> dict:
    h, i, qd = HIDDEN_SIZE, INTERMEDIATE_SIZE, NUM_HEADS * HEAD_DIM
    return {
        f"{prefix}.self_attn.q_proj.weight": r.normal(qd, qkv_in, std=linear_std(qkv_in)),
        f"{prefix}.self_attn.k_proj.weight": r.normal(qd, qkv_in, std=linear_std(qkv_in)),
        f"{prefix}.self_attn.v_proj.weight": r.normal(qd, qkv_in, std=linear_std(qkv_in)),
        f"{prefix}.self_attn.o_proj.weight": r.normal(h, qd, std=linear_std(qd)),
        f"{prefix}.mlp.gate_proj.weight": r.normal(i, h, std=linear_std(h)),
        f"{prefix}.mlp.up_proj.weight": r.normal(i, h, std=linear_std(h)),
        f"{prefix}.mlp.down_proj.weight": r.normal(h, i, std=linear_std(i)),
        f"{prefix}.input_layernorm.weight": r.ones(h),
        f"{prefix}.post_attention_layernorm.weight": r.ones(h),
    }
