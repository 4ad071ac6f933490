"""The float32 relay models: a target with planted structure and an EAGLE3 drafter whose acceptance
depends on exactly which taps reach it (the CPU demo, profiles/tiny_cpu_demo.yaml, and PP relay checks).

The GPU validation's variants of them (the always-one control drafter, the same target as
Qwen3-MoE or DeepSeek-V3, DFlash/DSpark/EAGLE-1 drafters) build on what is here but live in the
repo's ppspec_kit package, not in the wheel."""

from __future__ import annotations

import random

from ppspec_cli.demo.common import (
    ALWAYS_TOKEN,
    BOS_ID,
    HEAD_DIM,
    HIDDEN_SIZE,
    INTERMEDIATE_SIZE,
    NUM_HEADS,
    NUM_LAYERS,
    RMS_EPS,
    VOCAB_SIZE,
    Rand,
    Spec,
    layer_weights,
    linear_std,
    real_tensors,
    trigger_tokens,
)
from ppspec_cli.demo.tiny import target_config

# The relay models: float32 (what a GPU validation compares at PP=1 vs PP=2), taps chosen so that
# PP=2 (3+3) puts tap 3 exactly on the stage boundary and tap 6 (= the last layer's output) local.
RELAY_TARGET = "tiny-llama-relay"
RELAY_DRAFTER = "tiny-llama-relay-eagle3"
RELAY_DTYPE = "float32"
RELAY_SEED = 3003
RELAY_TAPS = (1, 3, NUM_LAYERS)

# A drafter fed the wrong taps still proposes tokens; only acceptance drops. To show that on a
# random model, the relay target carries planted structure in reserved residual dimensions, and
# the relay drafter reads exactly those, each from one tap:
#
#   dim 0        trigger flag (+/-8, embedding): the target's next token is ALWAYS_TOKEN
#   dim 1        pre-trigger flag (+/-8, embedding): the token after next is ALWAYS_TOKEN
#   dims 2-127   token identity (embedding); the target's lm_head reads it: next(x) = successor
#   dims 128-223 code c(x), written by layer 2: first carried by tap 3 (the PP=2 boundary)
#   dims 224-239 anti-code d(x), written by layer 3: taps 4.. carry c + d
#   dim 240      pre-trigger indicator, written by layer 0: taps 1..
#   dim 241      trigger indicator, written by layer 5: tap 6 only
#   dim 242      constant 1.0 (embedding), in every tap: the drafter's BOS row reads it
#
# Attention is random but small and writes only dims 2-127, so the planted dims are a function of
# the current token alone and every decision has a wide margin (float32 vs bfloat16, PP=1 vs PP=2
# and kernel differences cannot flip it). The drafter proposes next(next(x)) for the tapped
# token x: from the code in its tap-3 slot (read as c/|c|^2 - d/|d|^2, so tap 2 gives nothing and
# tap 4 cancels), the pre-trigger indicator in its tap-1 slot and the trigger indicator in its
# tap-6 slot. With the taps served one layer off, no slot carries what it reads.

_R_FLAG = 8.0
_R_TRIG, _R_PRE = 0, 1
_R_TOKEN = (2, 128)
#: The residual dims that carry token identity (written by the embedding and each layer's attention).
RELAY_TOKEN_DIMS = _R_TOKEN
R_CODE = (128, 224)
R_ANTI = (224, 240)
R_PRE_IND = 240
R_TRIG_IND = 241
R_CONST = 242  # 1.0 for every token (embedding), never written: the drafter's "never right" row reads it
_R_ATTN_SCALE = 0.1  # attention output relative to the 1/sqrt(fan_in) init: small, context-dependent noise
_R_TARGET_LOGIT = 2.0  # target lm_head scale (identity rows and the ALWAYS_TOKEN rule)
_R_DRAFT_LOGIT = 8.0  # drafter identity-row logit for the right token (before the final norm)
_R_DRAFT_FLAG = 1.5  # drafter flag-row logit relative to an identity hit
#: drafter logit (before the final norm) of its BOS row: below every planted hit, above every
#: spurious identity row, so with wrong taps the drafter proposes BOS, which the target never produces
_R_DRAFT_MISS = 0.5 * _R_DRAFT_LOGIT


def relay_successors(seed: int = RELAY_SEED) -> dict[int, int]:
    """The relay target's greedy next token for every non-special token id.

    Triggers (ids >= 2 divisible by TRIGGER_EVERY) are followed by ALWAYS_TOKEN; every other
    token x by succ(x), a seeded injection onto the non-special ids other than ALWAYS_TOKEN
    (no fixed points). ALWAYS_TOKEN is never anyone's successor except after a trigger, so every
    successor chain reaches a trigger and the output keeps returning to ALWAYS_TOKEN.
    """
    triggers = set(trigger_tokens())
    domain = [x for x in range(2, VOCAB_SIZE) if x not in triggers]
    pool = [y for y in range(2, VOCAB_SIZE) if y != ALWAYS_TOKEN]
    image = random.Random(seed).sample(pool, len(domain))
    for i in range(len(domain)):  # no token is its own successor: swap with the next slot
        if image[i] == domain[i]:
            j = (i + 1) % len(domain)
            image[i], image[j] = image[j], image[i]
    succ = dict(zip(domain, image))
    succ.update({t: ALWAYS_TOKEN for t in triggers})
    return succ


def relay_two_ahead(seed: int = RELAY_SEED) -> dict[int, int]:
    """next(next(x)) for every non-special token: what the relay drafter proposes after x."""
    succ = relay_successors(seed)
    return {x: succ[succ[x]] for x in succ if succ[x] in succ}


def relay_target_config() -> dict:
    cfg = target_config()
    cfg.update(dtype=RELAY_DTYPE, torch_dtype=RELAY_DTYPE)
    return cfg


def _relay_pre_tokens(succ: dict[int, int]) -> list[int]:
    trig = set(trigger_tokens())
    return sorted(x for x, y in succ.items() if x not in trig and y in trig)


def relay_target_weights(seed: int) -> dict:
    import torch

    r = Rand(seed, RELAY_DTYPE)
    h = HIDDEN_SIZE
    t0, t1 = _R_TOKEN
    succ = relay_successors(seed)
    embed = torch.zeros(VOCAB_SIZE, h)
    embed[:, t0:t1] = r.normal(VOCAB_SIZE, t1 - t0, std=1.0)
    embed[:, _R_TRIG] = -_R_FLAG
    embed[trigger_tokens(), _R_TRIG] = _R_FLAG
    embed[:, _R_PRE] = -_R_FLAG
    embed[_relay_pre_tokens(succ), _R_PRE] = _R_FLAG
    embed[:, R_CONST] = 1.0
    sd: dict = {"model.embed_tokens.weight": embed}
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}"
        qd = NUM_HEADS * HEAD_DIM
        o = torch.zeros(h, qd)
        o[t0:t1] = r.normal(t1 - t0, qd, std=_R_ATTN_SCALE * linear_std(qd))
        sd.update(
            {
                f"{p}.self_attn.q_proj.weight": r.normal(qd, h, std=linear_std(h)),
                f"{p}.self_attn.k_proj.weight": r.normal(qd, h, std=linear_std(h)),
                f"{p}.self_attn.v_proj.weight": r.normal(qd, h, std=linear_std(h)),
                f"{p}.self_attn.o_proj.weight": o,
                f"{p}.input_layernorm.weight": r.ones(h),
                f"{p}.post_attention_layernorm.weight": r.ones(h),
            }
        )
        gate, up, down = _relay_mlp(r, n)
        sd.update({f"{p}.mlp.gate_proj.weight": gate, f"{p}.mlp.up_proj.weight": up, f"{p}.mlp.down_proj.weight": down})
    sd["model.norm.weight"] = r.ones(h)
    lm = torch.zeros(VOCAB_SIZE, h)
    lm[ALWAYS_TOKEN, _R_TRIG] = _R_TARGET_LOGIT
    tok = embed[:, t0:t1]
    unit = tok / tok.norm(dim=1, keepdim=True)
    trig = set(trigger_tokens())
    for x, y in succ.items():
        if x not in trig:  # triggers are followed by ALWAYS_TOKEN through the dim-0 rule
            lm[y, t0:t1] = _R_TARGET_LOGIT * unit[x]
    sd["lm_head.weight"] = lm
    return sd


def _relay_mlp(r: Rand, layer: int):
    """The planted MLP of one relay-target layer (all zero except the writes listed above)."""
    import torch

    h, i = HIDDEN_SIZE, INTERMEDIATE_SIZE
    gate, up, down = torch.zeros(i, h), torch.zeros(i, h), torch.zeros(h, i)
    t0, t1 = _R_TOKEN
    if layer in (0, NUM_LAYERS - 1):
        # One unit computes silu(f) * f of a flag f = +/-8: ~64 when the flag is up, ~0.02 when down.
        src, dst = (_R_PRE, R_PRE_IND) if layer == 0 else (_R_TRIG, R_TRIG_IND)
        gate[0, src] = 1.0
        up[0, src] = 1.0
        down[dst, 0] = 1.0 / _R_FLAG
    elif layer in (2, 3):
        lo, hi = R_CODE if layer == 2 else R_ANTI
        gate[:, t0:t1] = r.normal(i, t1 - t0, std=linear_std(t1 - t0))
        up[:, t0:t1] = r.normal(i, t1 - t0, std=linear_std(t1 - t0))
        down[lo:hi] = r.normal(hi - lo, i, std=1.6 * linear_std(i))
    return gate, up, down


def rms_norm(x, eps: float = RMS_EPS):
    return x / (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()


def relay_taps_clean(target_sd: dict) -> list:
    """Residual stream of the relay target for every token alone, attention left out: taps[L] is
    the [VOCAB_SIZE, HIDDEN_SIZE] tap L (float64). The planted dims do not depend on attention."""
    import torch

    x = target_sd["model.embed_tokens.weight"].to(torch.float64)
    taps = [x]
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}.mlp"
        g, u, d = (target_sd[f"{p}.{k}_proj.weight"].to(torch.float64) for k in ("gate", "up", "down"))
        a = rms_norm(x)
        x = x + (torch.nn.functional.silu(a @ g.T) * (a @ u.T)) @ d.T
        taps.append(x)
    return taps


def relay_eagle3_config(spec: Spec, draft_vocab: int) -> dict:
    cfg = relay_target_config()
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        target_hidden_size=HIDDEN_SIZE,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=list(RELAY_TAPS),
    )
    return cfg


def relay_drafter_layer(seed: int) -> tuple[Rand, dict]:
    """The seeded stream of a relay EAGLE3 drafter and what it draws first: the midlayer and the
    norms. A drafter built on it draws the rest of its tensors from the same stream afterwards."""
    r = Rand(seed, RELAY_DTYPE)
    h = HIDDEN_SIZE
    sd = layer_weights(r, "midlayer", 2 * h)
    sd["midlayer.hidden_norm.weight"] = r.ones(h)
    sd["norm.weight"] = r.ones(h)
    return r, sd


def relay_eagle3_weights(spec: Spec) -> dict:
    import torch

    if spec.always_token is not None:
        raise ValueError(
            "relay_eagle3_weights builds the planted relay drafter; the always-one control is ppspec_kit.relay's"
        )
    _, sd = relay_drafter_layer(spec.seed)
    h = HIDDEN_SIZE
    # The midlayer passes its input through (attention and MLP outputs are zero), so the
    # drafter's logits are lm_head . rmsnorm(fc . [tap1 | tap3 | tap6]).
    sd["midlayer.self_attn.o_proj.weight"] = torch.zeros(h, NUM_HEADS * HEAD_DIM)
    sd["midlayer.mlp.down_proj.weight"] = torch.zeros(h, INTERMEDIATE_SIZE)
    sd["fc.weight"] = relay_fc()
    lm_head, d2t, t2d = relay_draft_head(relay_draft_rows())
    sd.update({"lm_head.weight": lm_head, "d2t": d2t, "t2d": t2d})
    return sd


def relay_fc():
    """The relay drafters' fc: [tap1 | tap3 | tap6] -> hidden, keeping only the planted dims each
    slot must carry (pre-trigger indicator from tap 1, code and anti-code from tap 3, trigger
    indicator and the constant from tap 6) plus a quarter of tap 6's token identity (it only
    scales the norm)."""
    import torch

    h, n_taps = HIDDEN_SIZE, len(RELAY_TAPS)
    fc = torch.zeros(h, n_taps * h)
    s0, s1, s2 = (k * h for k in range(n_taps))
    fc[R_PRE_IND, s0 + R_PRE_IND] = 1.0
    for lo, hi in (R_CODE, R_ANTI):
        fc[lo:hi, s1 + lo : s1 + hi] = torch.eye(hi - lo)
    fc[R_TRIG_IND, s2 + R_TRIG_IND] = 1.0
    fc[R_CONST, s2 + R_CONST] = 1.0
    t0, t1 = _R_TOKEN
    fc[t0:t1, s2 + t0 : s2 + t1] = 0.25 * torch.eye(t1 - t0)
    return fc


def relay_draft_head(rows: list):
    """(lm_head, d2t, t2d) of a reduced-vocabulary drafter from (target id, lm_head row) pairs."""
    import torch

    rows = sorted(rows, key=lambda row: row[0])
    ids = [t for t, _ in rows]
    if len(set(ids)) != len(ids):
        raise RuntimeError("relay drafter: two draft rows map to one target token")
    lm_head = torch.stack([w for _, w in rows]).to(torch.float32).contiguous()
    d2t = torch.tensor([t - i for i, t in enumerate(ids)], dtype=torch.int64)
    t2d = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
    t2d[ids] = True
    return lm_head, d2t, t2d


def relay_draft_rows(miss_dim: int = R_CONST) -> list:
    """(target id, lm_head row) pairs: one identity row per token whose two-ahead token is
    determined by its code, one row per indicator, and the BOS row reading `miss_dim` (a dim that
    holds the constant 1.0, scaled like the planted dims). Computed on real tensors even when the
    drafter is only described: its vocabulary (the number of rows) comes from the target's taps."""
    with real_tensors():
        return _relay_draft_rows(miss_dim)


def _relay_draft_rows(miss_dim: int) -> list:
    import torch

    target_sd = relay_target_weights(RELAY_SEED)
    taps = relay_taps_clean(target_sd)
    succ = relay_successors(RELAY_SEED)
    trig = set(trigger_tokens())
    pre = set(_relay_pre_tokens(succ))
    lo, hi = R_CODE
    alo, ahi = R_ANTI
    code, anti = taps[3][:, lo:hi], taps[4][:, alo:ahi]
    rows = []
    for x, y in sorted(succ.items()):
        if x in trig or x in pre:
            continue  # covered by the indicator rows
        w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
        w[lo:hi] = _R_DRAFT_LOGIT * code[x] / code[x].pow(2).sum()
        w[alo:ahi] = -_R_DRAFT_LOGIT * anti[x] / anti[x].pow(2).sum()
        rows.append((succ[y], w))
    on_pre = taps[1][sorted(pre), R_PRE_IND].min().item()
    on_trig = taps[NUM_LAYERS][sorted(trig), R_TRIG_IND].min().item()
    w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
    w[R_PRE_IND] = _R_DRAFT_FLAG * _R_DRAFT_LOGIT / on_pre
    rows.append((ALWAYS_TOKEN, w))  # x is a pre-trigger: next(next(x)) = ALWAYS_TOKEN
    w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
    w[R_TRIG_IND] = _R_DRAFT_FLAG * _R_DRAFT_LOGIT / on_trig
    rows.append((succ[ALWAYS_TOKEN], w))  # x is a trigger: next(next(x)) = succ(ALWAYS_TOKEN)
    w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
    w[miss_dim] = _R_DRAFT_MISS
    rows.append((BOS_ID, w))  # nothing planted arrived (wrong taps): BOS, never the target's next token
    return rows
