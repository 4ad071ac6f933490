"""Demo models for the GPU validation's wider arms (benchmarks/gpu_pp_validation.py, issue 13):

- the relay drafter with its taps named by the top-level ``target_layer_ids`` key: output-of-layer
  ids, which vLLM shifts by +1 (the rule DFlash and DSpark configs follow; with the
  ``dflash_config`` / ``dspark_target_layer_ids`` keys themselves the checkpoint would be a DFlash /
  DSpark drafter, whose block-parallel heads this planted construction does not cover);
- an EAGLE-1 drafter for the relay target (no taps; it proposes the target's next token from the
  token it is fed), for the eagle_global_layer_ids pack at PP=2;
- the relay target as a DeepSeek-V3 checkpoint (MLA attention, dense MLPs) for the deepseek_v3 pack;
- an 8B-class Llama (32 layers, hidden 4096) with a planted EAGLE3 drafter whose acceptance is known
  (right for a seeded share of tokens, never right otherwise), built where it runs: its 16 GB of
  weights are generated from a seed, on the GPU when there is one, and never travel.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ppspec_cli.demo.common import (
    ALWAYS_TOKEN,
    BOS_ID,
    EOS_ID,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    MAX_POSITIONS,
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
from ppspec_cli.demo.relay import (
    RELAY_DTYPE,
    RELAY_SEED,
    RELAY_TOKEN_DIMS,
    relay_eagle3_config,
    relay_successors,
    relay_target_config,
    relay_target_weights,
)

RELAY_PLUS1 = "tiny-llama-relay-eagle3-plus1"
RELAY_EAGLE1 = "tiny-llama-relay-eagle"
RELAY_DSV3_TARGET = "tiny-deepseek-v3-relay"
BIG_TARGET = "llama-8b-planted"
BIG_DRAFTER = "llama-8b-planted-eagle3"


# --------------------------------------------------------------------------------------------
# taps named the output-of-layer way (+1 in vLLM)


def relay_plus1_config(spec: Spec, draft_vocab: int) -> dict:
    """The relay drafter's config with its taps only as top-level `target_layer_ids`, in
    output-of-layer terms: vLLM adds 1, so the capture points are RELAY_TAPS again."""
    cfg = relay_eagle3_config(spec, draft_vocab)
    cfg["target_layer_ids"] = [t - 1 for t in cfg.pop("eagle_aux_hidden_state_layer_ids")]
    return cfg


# --------------------------------------------------------------------------------------------
# EAGLE-1


def relay_eagle1_config() -> dict:
    cfg = relay_target_config()
    cfg.update(architectures=["EagleLlamaForCausalLM"], num_hidden_layers=1)
    return cfg


def relay_eagle1_weights(seed: int) -> dict:
    """vLLM's EAGLE-1 Llama head: fc([embed(t) | hidden]) -> one decoder layer (no input norm) ->
    the target's lm_head, no final norm. fc passes embed(t) through and the layer adds nothing
    (o_proj and down_proj are zero), so the logits are lm_head . embed(t): the relay target's
    lm_head then names succ(t), the target's own next token. Its own embed_tokens is the target's."""
    import torch

    r = Rand(seed, RELAY_DTYPE)
    h = HIDDEN_SIZE
    layer = layer_weights(r, "layers.0", h)
    layer.pop("layers.0.input_layernorm.weight")  # vLLM drops the first layer's input norm
    layer["layers.0.self_attn.o_proj.weight"] = torch.zeros_like(layer["layers.0.self_attn.o_proj.weight"])
    layer["layers.0.mlp.down_proj.weight"] = torch.zeros_like(layer["layers.0.mlp.down_proj.weight"])
    fc = torch.zeros(h, 2 * h)
    fc[:, :h] = torch.eye(h)
    sd = {
        **layer,
        "fc.weight": fc,
        "embed_tokens.weight": relay_target_weights(RELAY_SEED)["model.embed_tokens.weight"].clone(),
    }
    return dict(sorted(sd.items()))


# --------------------------------------------------------------------------------------------
# DeepSeek-V3 (MLA)

# DeepSeek-V2-Lite's attention shape (what vLLM's MLA kernels are built for); the residual stream
# keeps the relay's 256 dims.
_DSV3_HEADS, _DSV3_NOPE, _DSV3_ROPE, _DSV3_V, _DSV3_KV_LORA = 16, 128, 64, 128, 512


def relay_dsv3_config() -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "moe_intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": _DSV3_HEADS,
        "num_key_value_heads": _DSV3_HEADS,
        "n_shared_experts": 1,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "first_k_dense_replace": NUM_LAYERS,  # every layer dense: the relay's planted MLPs
        "moe_layer_freq": 1,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "kv_lora_rank": _DSV3_KV_LORA,
        "q_lora_rank": None,
        "qk_rope_head_dim": _DSV3_ROPE,
        "qk_nope_head_dim": _DSV3_NOPE,
        "v_head_dim": _DSV3_V,
        "num_nextn_predict_layers": 0,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "dtype": RELAY_DTYPE,
        "torch_dtype": RELAY_DTYPE,
    }


def relay_dsv3_weights(seed: int) -> dict:
    """The relay target with MLA attention: embedding, planted MLPs, norms and lm_head are the
    relay's; attention is random and, like the relay's, writes only small noise into the token
    dims (o_proj's other rows are zero), so the function and every tap are the relay target's."""
    import torch

    r = Rand(seed + 7, RELAY_DTYPE)
    relay = relay_target_weights(seed)
    h = HIDDEN_SIZE
    qd, vd = _DSV3_HEADS * (_DSV3_NOPE + _DSV3_ROPE), _DSV3_HEADS * _DSV3_V
    sd: dict = {}
    for name, t in relay.items():
        if ".self_attn." in name:
            continue
        sd[name] = t
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}.self_attn"
        o = torch.zeros(h, vd)
        t0, t1 = RELAY_TOKEN_DIMS  # the token dims the relay's attention writes (its o_proj's non-zero rows)
        o[t0:t1] = r.normal(t1 - t0, vd, std=0.1 * linear_std(vd))
        sd.update(
            {
                f"{p}.q_proj.weight": r.normal(qd, h, std=linear_std(h)),
                f"{p}.kv_a_proj_with_mqa.weight": r.normal(_DSV3_KV_LORA + _DSV3_ROPE, h, std=linear_std(h)),
                f"{p}.kv_a_layernorm.weight": r.ones(_DSV3_KV_LORA),
                f"{p}.kv_b_proj.weight": r.normal(
                    _DSV3_HEADS * (_DSV3_NOPE + _DSV3_V), _DSV3_KV_LORA, std=linear_std(_DSV3_KV_LORA)
                ),
                f"{p}.o_proj.weight": o,
            }
        )
    return dict(sorted(sd.items()))


# --------------------------------------------------------------------------------------------
# the 8B-class planted Llama


@dataclass(frozen=True)
class BigShape:
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    intermediate: int = 14336
    vocab: int = 32768  # the tokenizer has VOCAB_SIZE tokens; the rest are never produced
    draft_vocab: int = 32000
    taps: tuple[int, ...] = (2, 16, 29)  # vLLM's default taps for 32 layers (2, n//2, n-3)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


BIG = BigShape()
#: Share of tokens after which the big drafter's first proposal is right (its other proposals
#: are BOS, which the target never produces). With 2 speculative tokens (the second is never
#: right) the acceptance rate is about half of that share over the generated tokens: ~20%, the
#: acceptance the PR thread reported its 1.25x at.
BIG_RIGHT_SHARE = 0.45
BIG_SEED = 8008

# planted residual dims of the big target (the rest carry small noise the layers write)
_B_TRIG = 0  # +/-8: the next token is ALWAYS_TOKEN
_B_TOKEN = (2, 128)  # token identity (embedding), read by the target's lm_head and the drafter
_B_CONST = 128  # 1.0 for every token: the drafter's "never right" row reads it
_B_PLANTED = 129
_B_NOISE = 0.02  # the layers' writes into the free dims, relative to a 1/sqrt(fan_in) init
_B_TARGET_LOGIT = 2.0
_B_HIT = 8.0  # drafter logit (before its final norm) of the right token
_B_MISS = 4.0  # drafter logit of BOS, the row that wins when no identity row matches


def _big_rand(seed: int, device: str | None):
    import torch

    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator(device=dev).manual_seed(seed)

    def normal(*shape: int, std: float):
        return (torch.randn(*shape, generator=gen, device=dev, dtype=torch.float32) * std).to(torch.bfloat16).cpu()

    return normal


def big_target_config(shape: BigShape = BIG) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": shape.vocab,
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "dtype": "bfloat16",
        "torch_dtype": "bfloat16",
    }


def big_successors() -> dict[int, int]:
    """The big target's greedy next token for every tokenizer id (>= 2): the relay map."""
    return relay_successors(BIG_SEED)


def big_right_tokens(shape: BigShape = BIG) -> list[int]:
    """Tokens x after which the drafter's first proposal, next(next(x)), is right: a seeded share
    of the tokens that are neither triggers nor followed by one (so next(next(x)) is injective)."""
    succ = big_successors()
    trig = set(trigger_tokens())
    pool = sorted(x for x, y in succ.items() if x not in trig and y not in trig)
    return sorted(random.Random(BIG_SEED + 1).sample(pool, int(BIG_RIGHT_SHARE * len(pool))))


def _big_embedding(normal, shape: BigShape):
    import torch

    t0, t1 = _B_TOKEN
    emb = torch.zeros(shape.vocab, shape.hidden, dtype=torch.bfloat16)
    emb[:VOCAB_SIZE, t0:t1] = normal(VOCAB_SIZE, t1 - t0, std=1.0)
    emb[:, _B_TRIG] = -8.0
    emb[trigger_tokens(), _B_TRIG] = 8.0
    emb[:, _B_CONST] = 1.0
    return emb


def _quiet_rows(w):
    """A projection into the residual stream: small noise into the free dims, nothing into the planted ones."""
    w = w * _B_NOISE
    w[:_B_PLANTED] = 0
    return w


def _big_layer(normal, p: str, shape: BigShape, qkv_in: int) -> dict:
    h, i, kvd = shape.hidden, shape.intermediate, shape.kv_heads * shape.head_dim
    return {
        f"{p}.self_attn.q_proj.weight": normal(h, qkv_in, std=linear_std(qkv_in)),
        f"{p}.self_attn.k_proj.weight": normal(kvd, qkv_in, std=linear_std(qkv_in)),
        f"{p}.self_attn.v_proj.weight": normal(kvd, qkv_in, std=linear_std(qkv_in)),
        f"{p}.self_attn.o_proj.weight": _quiet_rows(normal(h, h, std=linear_std(h))),
        f"{p}.mlp.gate_proj.weight": normal(i, h, std=linear_std(h)),
        f"{p}.mlp.up_proj.weight": normal(i, h, std=linear_std(h)),
        f"{p}.mlp.down_proj.weight": _quiet_rows(normal(h, i, std=linear_std(i))),
        f"{p}.input_layernorm.weight": _ones(h),
        f"{p}.post_attention_layernorm.weight": _ones(h),
    }


def _ones(n: int):
    import torch

    return torch.ones(n, dtype=torch.bfloat16)


def big_target_weights(shape: BigShape = BIG, *, device: str | None = None) -> dict:
    """Every layer reads the whole stream (random q/k/v/gate/up: the real arithmetic of the shape)
    but writes only small noise into the free dims, so the planted dims - the trigger flag, the
    token identity, the constant - reach every tap and the lm_head unchanged: the next token after
    x is big_successors()[x] with the relay target's margins."""
    import torch

    normal = _big_rand(BIG_SEED, device)
    emb = _big_embedding(normal, shape)
    sd: dict = {"model.embed_tokens.weight": emb}
    for n in range(shape.layers):
        sd.update(_big_layer(normal, f"model.layers.{n}", shape, shape.hidden))
    sd["model.norm.weight"] = _ones(shape.hidden)
    t0, t1 = _B_TOKEN
    lm = normal(shape.vocab, shape.hidden, std=1e-4)
    lm[:, :_B_PLANTED] = 0
    lm[ALWAYS_TOKEN, _B_TRIG] = _B_TARGET_LOGIT
    tok = emb[:VOCAB_SIZE, t0:t1].float()
    unit = tok / tok.norm(dim=1, keepdim=True)
    trig = set(trigger_tokens())
    for x, y in big_successors().items():
        if x not in trig:
            lm[y, t0:t1] = (_B_TARGET_LOGIT * unit[x]).to(torch.bfloat16)
    sd["lm_head.weight"] = lm
    _release_gpu()
    return sd


def _release_gpu() -> None:
    """Give the generator's cached blocks back: the engines started next want the whole GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def big_drafter_config(shape: BigShape = BIG) -> dict:
    cfg = big_target_config(shape)
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        target_hidden_size=shape.hidden,
        draft_vocab_size=shape.draft_vocab,
        eagle_aux_hidden_state_layer_ids=list(shape.taps),
    )
    return cfg


def big_drafter_weights(shape: BigShape = BIG, *, device: str | None = None) -> dict:
    """EAGLE3 head of the real shape (one layer over [embeds | hidden], fc over three taps, a
    draft vocabulary of shape.draft_vocab). fc copies the last tap's token dims and the constant;
    the layer writes only free dims. Its lm_head has an identity row (logit _B_HIT) naming
    next(next(x)) for every x in big_right_tokens(), a BOS row reading the constant (_B_MISS) that
    wins for every other x, and filler rows (target ids >= VOCAB_SIZE, never produced) near 0."""
    import torch

    normal = _big_rand(BIG_SEED + 2, device)
    h, n_taps = shape.hidden, len(shape.taps)
    sd = _big_layer(normal, "midlayer", shape, 2 * h)
    sd["midlayer.hidden_norm.weight"] = _ones(h)
    sd["norm.weight"] = _ones(h)
    fc = _quiet_rows(normal(h, n_taps * h, std=linear_std(n_taps * h)))
    last = (n_taps - 1) * h
    t0, t1 = _B_TOKEN
    fc[t0:t1, last + t0 : last + t1] = torch.eye(t1 - t0, dtype=torch.bfloat16)
    fc[_B_CONST, last + _B_CONST] = 1.0
    sd["fc.weight"] = fc
    emb = _big_embedding(_big_rand(BIG_SEED, device), shape)  # the target's, same seed and order
    tok = emb[:VOCAB_SIZE, t0:t1].float()
    succ = big_successors()
    rows: dict[int, torch.Tensor] = {}
    for x in big_right_tokens(shape):
        w = torch.zeros(h)
        w[t0:t1] = _B_HIT * tok[x] / tok[x].pow(2).sum()
        rows[succ[succ[x]]] = w
    w = torch.zeros(h)
    w[_B_CONST] = _B_MISS
    rows[BOS_ID] = w
    fillers = range(VOCAB_SIZE, shape.vocab)
    if len(rows) + len(fillers) < shape.draft_vocab:
        raise ValueError(
            f"draft vocab {shape.draft_vocab} does not fit: {len(rows)} planted rows + {len(fillers)} unused target ids"
        )
    for t in fillers[: shape.draft_vocab - len(rows)]:
        rows[t] = torch.zeros(h)
    ids = sorted(rows)
    lm = normal(len(ids), h, std=1e-5)  # free dims: noise the identity rows do not read
    lm[:, :_B_PLANTED] = torch.stack([rows[t][:_B_PLANTED] for t in ids]).to(torch.bfloat16)
    sd["lm_head.weight"] = lm
    sd["d2t"] = torch.tensor([t - i for i, t in enumerate(ids)], dtype=torch.int64)
    t2d = torch.zeros(shape.vocab, dtype=torch.bool)
    t2d[ids] = True
    sd["t2d"] = t2d
    _release_gpu()
    return sd


def big_costs(shape: BigShape = BIG) -> tuple[list[int], int, int]:
    """(parameters per decoder layer, lm_head parameters, drafter parameters) of the big models:
    the inputs of ppspec_cli.planning.partition's cost model (bytes are these times 2 in bf16)."""
    h, i, kvd = shape.hidden, shape.intermediate, shape.kv_heads * shape.head_dim
    layer = h * h * 2 + 2 * kvd * h + 3 * h * i
    draft_layer = h * 2 * h + 2 * kvd * 2 * h + h * h + 3 * h * i
    drafter = draft_layer + h * len(shape.taps) * h + shape.draft_vocab * h
    return [layer] * shape.layers, shape.vocab * h, drafter
