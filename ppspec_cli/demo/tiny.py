"""tiny-llama (a random bfloat16 Llama with one planted rule) and its EAGLE3 drafters."""

from __future__ import annotations

import random

from ppspec_cli.demo.common import (
    ALWAYS_TOKEN,
    BOS_ID,
    DTYPE,
    EAGLE3_TAPS,
    EAGLE3_TAPS_OUTPUT_OF_LAYER,
    EOS_ID,
    HEAD_DIM,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    MAX_POSITIONS,
    NUM_HEADS,
    NUM_LAYERS,
    RMS_EPS,
    ROPE_THETA,
    VOCAB_SIZE,
    Rand,
    Spec,
    layer_weights,
    linear_std,
    trigger_tokens,
)

# How the rule is planted: embedding dim 0 is +FLAG for trigger tokens and -FLAG for all others,
# and ALWAYS_TOKEN's lm_head row reads only dim 0 (weight LOGIT), so its logit is large after a
# trigger token and very negative otherwise.
_RULE_FLAG = 8.0
_RULE_LOGIT = 6.0


def target_config() -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID,
        "dtype": DTYPE,
        "torch_dtype": DTYPE,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def eagle3_config(spec: Spec) -> dict:
    cfg = target_config()
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        target_hidden_size=HIDDEN_SIZE,
        draft_vocab_size=spec.draft_vocab,
    )
    if spec.taps == "top":
        cfg["eagle_aux_hidden_state_layer_ids"] = list(EAGLE3_TAPS)
    else:  # the SGLang/SpecForge layout: nested, output-of-layer ids
        cfg["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": list(EAGLE3_TAPS_OUTPUT_OF_LAYER),
            "use_aux_hidden_state": True,
        }
    return cfg


def target_weights(seed: int) -> dict:
    """HF Llama checkpoint names (model.layers.N.*, lm_head); vLLM and transformers both load them."""
    r = Rand(seed)
    embed = r.normal(VOCAB_SIZE, HIDDEN_SIZE, std=1.0)
    sd: dict = {}
    for n in range(NUM_LAYERS):
        sd.update(layer_weights(r, f"model.layers.{n}", HIDDEN_SIZE))
    lm_head = r.normal(VOCAB_SIZE, HIDDEN_SIZE, std=4 * linear_std(HIDDEN_SIZE))
    # The planted rule (see ALWAYS_TOKEN).
    embed[:, 0] = -_RULE_FLAG
    embed[trigger_tokens(), 0] = _RULE_FLAG
    lm_head[ALWAYS_TOKEN] = 0
    lm_head[ALWAYS_TOKEN, 0] = _RULE_LOGIT
    sd["model.embed_tokens.weight"] = embed
    sd["model.norm.weight"] = r.ones(HIDDEN_SIZE)
    sd["lm_head.weight"] = lm_head
    return sd


def _draft_target_ids(seed: int, k: int) -> list[int]:
    """The k target ids a k-token draft vocabulary covers (sorted, like trained EAGLE3 heads)."""
    if k == VOCAB_SIZE:
        return list(range(VOCAB_SIZE))
    rng = random.Random(seed)
    return sorted(rng.sample(range(2, VOCAB_SIZE), k))  # never the special tokens 0, 1


def eagle3_weights(spec: Spec) -> dict:
    """EAGLE3 head in the EAGLE/SpecForge checkpoint layout vLLM's Eagle3 Llama drafter loads.

    midlayer.* is one decoder layer whose q/k/v take [embeds, hidden] (2 x hidden);
    fc projects the concatenated taps (n_taps x target hidden) to hidden; no embed_tokens, so
    vLLM shares the target's. d2t[i] is the offset from draft id i to its target id; t2d marks
    the covered target ids (vLLM ignores it, trained checkpoints carry it).
    """
    import torch

    r = Rand(spec.seed)
    h = HIDDEN_SIZE
    sd = layer_weights(r, "midlayer", 2 * h)
    sd["midlayer.hidden_norm.weight"] = r.ones(h)
    n_taps = len(EAGLE3_TAPS)
    sd["fc.weight"] = r.normal(h, n_taps * h, std=linear_std(n_taps * h))
    sd["norm.weight"] = r.ones(h)
    sd["lm_head.weight"] = r.normal(spec.draft_vocab, h, std=4 * linear_std(h))
    if spec.always_token is not None:
        ids = [spec.always_token]
    else:
        ids = _draft_target_ids(spec.seed + 1, spec.draft_vocab)
    if spec.draft_vocab != VOCAB_SIZE:
        sd["d2t"] = torch.tensor([t - i for i, t in enumerate(ids)], dtype=torch.int64)
        t2d = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
        t2d[ids] = True
        sd["t2d"] = t2d
    return sd
