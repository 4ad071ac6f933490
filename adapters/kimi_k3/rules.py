"""kimi_k3's own check rules, run by `ppspec check` for profiles this pack describes.

Loaded by file path (never as a top-level `adapters` package); must not import vLLM or torch.
"""

from __future__ import annotations

from typing import Any, Iterator

from ppspec_cli.findings import Code, Finding
from ppspec_cli.findings.codes import PACKS

#: vLLM reads it as bool(int(value)) (envs.py). The rule judges the profile's `env:` (what every
#: node's engine gets); a shell's own value is the `here` question's (`shell-vllm-env`).
STREAM_ENV = "VLLM_KIMI_K3_AUX_ATTN_RES_STREAM"

AUX_ATTN_RES_BOUNDARY = Code(
    "kimi_k3-aux-attn-res-boundary",
    ("error",),
    "With the attention-residual stream on, vLLM refuses a tap that ends a non-final PP stage of an attention-residual "
    "Kimi-K3.",
    "Move the stage boundary off the taps with `topology.layer_partition`, or unset the variable the message names.",
    section=PACKS,
)
#: The codes these rules report (registered as the pack's when this file loads).
CODES = (AUX_ATTN_RES_BOUNDARY,)


def _stream_on(r: Any) -> bool:
    raw = r.profile.env.get(STREAM_ENV, "0")
    try:
        return int(raw) != 0
    except ValueError:
        return False  # vLLM itself fails to parse it; not this rule's concern


def aux_attn_res_boundary(r: Any) -> Iterator[Finding]:
    """vLLM's CUDA KimiLinearModel (nvidia/model.py _set_aux_hidden_state_layers) refuses a tap
    that ends a non-final PP stage when the model uses attention residuals (`attn_res_block_size`
    set) and VLLM_KIMI_K3_AUX_ATTN_RES_STREAM=1: such a tap would need the stage's pending
    attention-residual stream, which is not relayed."""
    p = r.plan
    if p is None or r.pp == 1 or not p.taps or r.target is None or r.platform == "rocm":
        return
    if r.target.text.get("attn_res_block_size") is None or not _stream_on(r):
        return
    ends = {s.layers[1]: s.rank for s in p.stages[:-1]}
    bad = sorted(t for t in p.taps if t in ends)
    if bad:
        stages = ", ".join(f"tap {t} ends stage {ends[t]}" for t in bad)
        yield AUX_ATTN_RES_BOUNDARY.at(
            "topology.layer_partition",
            f"{stages}: with {STREAM_ENV}=1 vLLM refuses a tap that ends a non-final PP stage of an "
            "attention-residual Kimi-K3 "
            f"('Auxiliary layer {bad[0]} cannot end a non-final PP stage')",
            fix=f"move the stage boundary off the taps with topology.layer_partition, or unset {STREAM_ENV}",
        )


def get_rules() -> list[tuple[str, Any]]:
    return [("aux-attn-res-boundary", aux_attn_res_boundary)]
