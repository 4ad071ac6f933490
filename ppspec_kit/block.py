"""Planted block drafters for the relay target: DFlash and DSpark (issue 13).

DFlash and DSpark draft a whole block in one parallel pass. vLLM (0.33, Model Runner V2) projects
the tapped hidden states of every context position through ``fc`` and the drafter's own K/V
projections into the draft KV cache ("context K/V"); the queries are embeddings only:

- DFlash: ``[bonus, mask, mask, ...]`` at positions p+1, p+2, ..., where p is the last verified
  position and the bonus is the target's token at p+1. Draft token i is read at the mask at p+1+i
  and names the token *at* that position.
- DSpark (``sample_from_anchor``, the default): ``[anchor, noise, ...]`` at p+1, p+2, ...; draft
  token i is read at the query at p+i and names the *next* token; a Markov head adds a bias from
  the previous draft token (planted as zero here).

Either way the first draft token is the target's token at p+2, i.e. ``next(next(x_p))``: exactly
what the relay EAGLE3 drafter computes from the taps of x_p. So these drafters reuse its ``fc`` and
its draft rows, and carry the taps of position p to the first draft query through attention:

- every query and key reads only the constant dimension, so after the per-head q/k RMSNorms they
  are fixed vectors (the norm weights) and the attention score depends only on the distance d
  between query and key, through RoPE: ``score(d) = gain * sum_i cos(theta_i * (d - d0))``, which
  peaks at d = d0 (2 for DFlash, 1 for DSpark: the context position p) and is at least
  ``ATTN_MIN_MARGIN`` nats lower at every other distance up to the longest sequence;
- values carry the planted dimensions (code, anti-code, indicators) and the constant; ``o_proj``
  writes them back to the same dimensions, the constant to a spare dimension (``MISS_DIM``) that the
  BOS row reads, so hits and the BOS fallback keep the relay drafter's 2:1 ratio whatever the
  norms; the query's own embedding adds nothing any draft row reads.

Later draft positions attend to the bonus/anchor query (the same distance), whose value holds only
the constant: they propose BOS, which the target never produces. So per position the acceptance is
[every draft, 0], as for the relay EAGLE3 drafter, and served with wrong taps the first position
collapses as well.

``block_draft_tokens`` recomputes what the engine does from the saved tensors (float64), so tests
check the planted behaviour without an engine.
"""

from __future__ import annotations

import math

from ppspec_cli.demo.common import BOS_ID, HEAD_DIM, HIDDEN_SIZE, INTERMEDIATE_SIZE, NUM_HEADS, RMS_EPS, real_tensors
from ppspec_cli.demo.relay import (
    R_ANTI,
    R_CODE,
    R_CONST,
    R_PRE_IND,
    R_TRIG_IND,
    RELAY_DTYPE,
    RELAY_TAPS,
    relay_draft_head,
    relay_draft_rows,
    relay_fc,
    relay_target_config,
    rms_norm,
)

RELAY_DFLASH = "tiny-qwen3-relay-dflash"
RELAY_DSPARK = "tiny-qwen3-relay-dspark"
#: the drafters' own RoPE base: a small one spreads the 32 frequencies over (0.1, 1] rad per
#: position, so neighbouring distances differ clearly in score
BLOCK_ROPE_THETA = 10.0
#: the score gain (q_norm weight amplitude; k_norm weights are 1): score(d0) - score(d) >= margin
ATTN_GAIN = 64.0
#: nats between the attended position and any other, checked when the weights are built
ATTN_MIN_MARGIN = 20.0
#: the longest distance the margin is checked for (queries sit at most this far past a key)
MAX_DISTANCE = 4096
#: the spare residual dimension the BOS ("nothing planted arrived") row reads
MISS_DIM = R_CONST + 1
#: the mask / noise token fed at the parallel query slots (BOS: the target never produces it)
MASK_TOKEN_ID = BOS_ID
MARKOV_RANK = 4
#: where the first draft query sits relative to the last verified position p
QUERY_DISTANCE = {"dflash": 2, "dspark": 1}

# value channels: residual dims read from the context (the planted ones and the constant) and the
# dims o_proj writes them back to
_CHANNELS_IN = [*range(R_CODE[0], R_CODE[1]), *range(R_ANTI[0], R_ANTI[1]), R_PRE_IND, R_TRIG_IND, R_CONST]
_CHANNELS_OUT = [*_CHANNELS_IN[:-1], MISS_DIM]


def _freqs():
    import torch

    half = HEAD_DIM // 2
    return BLOCK_ROPE_THETA ** (-2.0 * torch.arange(half, dtype=torch.float64) / HEAD_DIM)


def attention_scores(d0: int, distances) -> "object":
    """Pre-softmax attention score of a query at distance d from a key (float64), as built."""
    import torch

    d = torch.as_tensor(distances, dtype=torch.float64)
    th = _freqs()
    return ATTN_GAIN / math.sqrt(HEAD_DIM) * torch.cos((d[:, None] - d0) * th[None, :]).sum(-1)


def attention_margin(d0: int) -> float:
    """score(d0) minus the best score at any other distance in [-(block), MAX_DISTANCE] (a value,
    so computed on real tensors even when the drafter is only described)."""
    import torch

    with real_tensors():
        d = torch.arange(-16, MAX_DISTANCE + 1)
        s = attention_scores(d0, d)
        return float(s[d == d0].item() - s[d != d0].max().item())


def block_config(method: str, draft_vocab: int) -> dict:
    """config.json of the planted DFlash / DSpark drafter (Qwen3 layer shape of the relay target;
    taps named output-of-layer, the convention of both: vLLM adds 1, giving RELAY_TAPS)."""
    cfg = relay_target_config()
    cfg.update(
        model_type="qwen3",
        num_hidden_layers=1,
        draft_vocab_size=draft_vocab,
        target_hidden_size=HIDDEN_SIZE,
        rope_theta=BLOCK_ROPE_THETA,
        rope_parameters={"rope_type": "default", "rope_theta": BLOCK_ROPE_THETA},
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=1,
    )
    cfg.pop("mlp_bias", None)
    ids = [t - 1 for t in RELAY_TAPS]
    if method == "dflash":
        cfg.update(
            architectures=["DFlashDraftModel"],
            block_size=3,
            dflash_config={"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": ids},
        )
    elif method == "dspark":
        cfg.update(
            architectures=["Qwen3DSparkModel"],
            dspark_target_layer_ids=ids,
            dspark_noise_token_id=MASK_TOKEN_ID,
            markov_rank=MARKOV_RANK,
            sample_from_anchor=True,
        )
    else:
        raise ValueError(f"not a block drafter method: {method}")
    return cfg


def block_weights(method: str) -> dict:
    """Tensors of the planted DFlash / DSpark drafter (names as in their checkpoints)."""
    import torch

    d0 = QUERY_DISTANCE[method]
    margin = attention_margin(d0)
    if margin < ATTN_MIN_MARGIN:
        raise RuntimeError(f"planted {method} attention margin {margin:.1f} nats < {ATTN_MIN_MARGIN}")
    h, hd, nh = HIDDEN_SIZE, HEAD_DIM, NUM_HEADS
    qd = nh * hd
    q = torch.zeros(qd, h)
    q[:, R_CONST] = 1.0  # every query and key = the constant dim: fixed vectors after the q/k norms
    v = torch.zeros(qd, h)
    o = torch.zeros(h, qd)
    for k, (src, dst) in enumerate(zip(_CHANNELS_IN, _CHANNELS_OUT)):
        v[k, src] = 1.0
        o[dst, k] = 1.0
    th = _freqs().to(torch.float32)
    half = hd // 2
    q_norm = torch.zeros(hd)  # neox pairs (i, i + half): the query pre-rotated by -d0 positions
    q_norm[:half] = ATTN_GAIN * torch.cos(d0 * th)
    q_norm[half:] = -ATTN_GAIN * torch.sin(d0 * th)
    k_norm = torch.zeros(hd)
    k_norm[:half] = 1.0
    lm_head, d2t, _ = relay_draft_head(relay_draft_rows(miss_dim=MISS_DIM))
    p = "layers.0"
    sd = {
        "fc.weight": relay_fc(),
        "hidden_norm.weight": torch.ones(h),
        "norm.weight": torch.ones(h),
        f"{p}.input_layernorm.weight": torch.ones(h),
        f"{p}.post_attention_layernorm.weight": torch.ones(h),
        f"{p}.self_attn.q_proj.weight": q,
        f"{p}.self_attn.k_proj.weight": q.clone(),
        f"{p}.self_attn.v_proj.weight": v,
        f"{p}.self_attn.o_proj.weight": o,
        f"{p}.self_attn.q_norm.weight": q_norm,
        f"{p}.self_attn.k_norm.weight": k_norm,
        f"{p}.mlp.gate_proj.weight": torch.zeros(INTERMEDIATE_SIZE, h),
        f"{p}.mlp.up_proj.weight": torch.zeros(INTERMEDIATE_SIZE, h),
        f"{p}.mlp.down_proj.weight": torch.zeros(h, INTERMEDIATE_SIZE),
        "lm_head.weight": lm_head,
        "d2t": d2t,
    }
    if method == "dspark":  # the Markov head adds nothing: the proposals are the backbone's
        sd["markov_head.markov_w1.weight"] = torch.zeros(relay_target_config()["vocab_size"], MARKOV_RANK)
        sd["markov_head.markov_w2.weight"] = torch.zeros(lm_head.shape[0], MARKOV_RANK)
    return {
        k: t.to(getattr(torch, RELAY_DTYPE)).contiguous() if t.is_floating_point() else t for k, t in sorted(sd.items())
    }


# --------------------------------------------------------------------------------------------
# what the engine computes (float64), for tests


def _rope(x, pos, th):
    import torch

    half = x.shape[-1] // 2
    ang = pos.to(torch.float64)[:, None] * th[None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def block_draft_tokens(method: str, sd: dict, embed, taps_ctx, bonus: int, num_spec: int) -> list[int]:
    """The draft tokens the engine proposes after one verification step: `taps_ctx` holds the
    concatenated taps ([n, 3 * hidden]) of context positions 0..p (the last row is p), `bonus` is
    the target's token at p + 1, `embed` the target's embedding table. Non-causal attention over
    the context and the whole query block, as DFlash / DSpark run it."""
    import torch

    f = {k: (t.to(torch.float64) if t.is_floating_point() else t) for k, t in sd.items()}
    p = "layers.0.self_attn"
    nh, hd = NUM_HEADS, HEAD_DIM
    th = _freqs()
    n = taps_ctx.shape[0]
    ctx = taps_ctx.to(torch.float64) @ f["fc.weight"].T
    ctx_n = rms_norm(ctx, RMS_EPS) * f["hidden_norm.weight"]
    if method == "dflash":
        ids = [bonus] + [MASK_TOKEN_ID] * num_spec
        sample = list(range(1, num_spec + 1))
    else:
        ids = [bonus] + [MASK_TOKEN_ID] * (num_spec - 1)
        sample = list(range(num_spec))
    x = embed.to(torch.float64)[ids]
    xn = rms_norm(x, RMS_EPS) * f["layers.0.input_layernorm.weight"]

    def heads(t):
        return t.view(t.shape[0], nh, hd)

    def kv(hn, pos):
        k = heads(hn @ f[f"{p}.k_proj.weight"].T)
        k = rms_norm(k, RMS_EPS) * f[f"{p}.k_norm.weight"]
        k = torch.stack([_rope(k[:, j], pos, th) for j in range(nh)], dim=1)
        return k, heads(hn @ f[f"{p}.v_proj.weight"].T)

    q_pos = torch.arange(n, n + len(ids))
    kc, vc = kv(ctx_n, torch.arange(n))
    kq, vq = kv(xn, q_pos)
    q = rms_norm(heads(xn @ f[f"{p}.q_proj.weight"].T), RMS_EPS) * f[f"{p}.q_norm.weight"]
    q = torch.stack([_rope(q[:, j], q_pos, th) for j in range(nh)], dim=1)
    k, v = torch.cat([kc, kq]), torch.cat([vc, vq])
    att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    out = torch.einsum("hqk,khd->qhd", att.softmax(-1), v).reshape(len(ids), nh * hd)
    r = x + out @ f[f"{p}.o_proj.weight"].T  # the MLP adds nothing (its projections are zero)
    logits = (rms_norm(r, RMS_EPS) * f["norm.weight"]) @ f["lm_head.weight"].T
    best = logits[sample].argmax(-1)
    return [int(i) + int(f["d2t"][i]) for i in best]
