"""Validation variants of the relay models (ppspec_cli/demo/relay.py): the always-one control
drafter, the relay target as a Qwen3-MoE checkpoint, and the broken tap sets the checks serve the
relay drafter with."""

from __future__ import annotations

from ppspec_cli.demo.common import HEAD_DIM, HIDDEN_SIZE, INTERMEDIATE_SIZE, NUM_LAYERS, Rand, Spec, linear_std
from ppspec_cli.demo.relay import (
    RELAY_DTYPE,
    RELAY_TAPS,
    relay_draft_head,
    relay_drafter_layer,
    relay_target_config,
    relay_target_weights,
)

RELAY_ONE = "tiny-llama-relay-eagle3-one"
#: The relay target as a Qwen3-MoE checkpoint (a family vLLM does not opt in; a ppspec pack patches it).
RELAY_MOE_TARGET = "tiny-qwen3-moe-relay"
RELAY_MOE_EXPERTS = 4
RELAY_MOE_TOP_K = 2
#: The relay drafter served with every tap one layer early (the capture-point vs output-of-layer
#: slip): no slot carries what the drafter reads, so acceptance collapses.
RELAY_TAPS_EARLY = tuple(t - 1 for t in RELAY_TAPS)
#: Every tap one layer late except the last (which cannot be): the boundary slot gets code + anti-code.
RELAY_TAPS_LATE = (2, 4, NUM_LAYERS)


def relay_one_weights(spec: Spec) -> dict:
    """The control drafter: the relay drafter's seeded layer, a random fc, and one draft row that
    maps to `spec.always_token`, so it proposes that token whatever the taps carry."""
    r, sd = relay_drafter_layer(spec.seed)
    h, n_taps = HIDDEN_SIZE, len(RELAY_TAPS)
    sd["fc.weight"] = r.normal(h, n_taps * h, std=linear_std(n_taps * h))
    lm_head, d2t, t2d = relay_draft_head([(spec.always_token, r.normal(h, std=4 * linear_std(h)))])
    sd.update({"lm_head.weight": lm_head, "d2t": d2t, "t2d": t2d})
    return sd


def relay_moe_config() -> dict:
    cfg = relay_target_config()
    cfg.update(
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        moe_intermediate_size=INTERMEDIATE_SIZE,
        num_experts=RELAY_MOE_EXPERTS,
        num_experts_per_tok=RELAY_MOE_TOP_K,
        norm_topk_prob=True,  # the chosen experts' weights sum to 1: identical experts = the dense MLP
        decoder_sparse_step=1,
        mlp_only_layers=[],
        output_router_logits=False,
        router_aux_loss_coef=0.001,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=NUM_LAYERS,
    )
    cfg.pop("mlp_bias", None)
    return cfg


def relay_moe_weights(seed: int) -> dict:
    """The relay target's tensors in the Qwen3-MoE layout: every expert is the layer's planted MLP
    and a seeded router picks among them, so routing varies per token but the output does not."""
    import torch

    r = Rand(seed + 1, RELAY_DTYPE)
    sd: dict = {}
    for name, t in relay_target_weights(seed).items():
        if ".mlp." not in name:
            sd[name] = t
            continue
        prefix, proj = name.split(".mlp.")
        for e in range(RELAY_MOE_EXPERTS):
            sd[f"{prefix}.mlp.experts.{e}.{proj}"] = t.clone()
    hd = HEAD_DIM
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}"
        sd[f"{p}.mlp.gate.weight"] = r.normal(RELAY_MOE_EXPERTS, HIDDEN_SIZE, std=linear_std(HIDDEN_SIZE))
        sd[f"{p}.self_attn.q_norm.weight"] = torch.ones(hd, dtype=torch.float32)
        sd[f"{p}.self_attn.k_norm.weight"] = torch.ones(hd, dtype=torch.float32)
    return dict(sorted(sd.items()))
