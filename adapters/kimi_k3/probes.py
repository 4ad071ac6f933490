"""kimi_k3's own behaviour probe of the installed vLLM, run by `ppspec check --probes`: the fact
its rule `kimi_k3-aux-attn-res-boundary` relies on, asked of vLLM itself.

Loaded by file path (never as a top-level `adapters` package); imports vLLM only when it runs.
"""

from __future__ import annotations

import importlib
from typing import Any

from ppspec_cli.running.engine.probes import ProbeResult, env_set

MODULE = "vllm.models.kimi_k3.nvidia.model"
RULE = "kimi_k3-aux-attn-res-boundary"


def _set_taps(cls: type, taps: tuple[int, ...], stage: int) -> str | None:
    """Stage `stage` of 2 (layers [0, 3) then [3, 6)) of an attention-residual KimiLinearModel sets
    its taps with the stream env on; the refusal vLLM raises, or None."""
    import torch

    from ppspec_cli.running.engine import relay

    # object.__new__, not cls.__new__: SupportsQuant.__new__ only looks for a quantization config
    # among the constructor's arguments (there are none here), importing all of VllmConfig to do so.
    model = object.__new__(cls)
    torch.nn.Module.__init__(model)
    model.use_attn_res, model.attn_res_block_size = True, 2
    model.start_layer, model.end_layer = (0, 3) if stage == 0 else (3, 6)
    model.aux_hidden_state_layers = ()
    with (
        env_set("VLLM_KIMI_K3_AUX_ATTN_RES_STREAM", "1"),
        relay.simulated_pp(stage, 2, (importlib.import_module(MODULE),)),
        relay.quiet(),
    ):
        try:
            model._set_aux_hidden_state_layers(taps)
        except ValueError as e:
            return str(e)
    return None


def aux_attn_res_boundary() -> ProbeResult:
    name = "kimi_k3-aux-attn-res-boundary"
    cls = importlib.import_module(MODULE).KimiLinearModel
    refused = _set_taps(cls, (1, 3), stage=0)
    if refused is None or "cannot end a non-final PP stage" not in refused:
        return ProbeResult(
            name,
            "failed",
            f"vLLM no longer refuses a tap that ends a non-final stage with the stream env on (got {refused!r}): "
            f"rule {RULE} is out of date",
            "warning",
            "report this: the kimi_k3 pack's rule needs updating",
        )
    others = [_set_taps(cls, (1, 2), stage=0), _set_taps(cls, (3, 6), stage=1)]
    if any(others):
        return ProbeResult(
            name,
            "failed",
            f"vLLM refuses more than rule {RULE} predicts: {others}",
            "warning",
            "report this: the kimi_k3 pack's rule needs updating",
        )
    return ProbeResult(
        name,
        "passed",
        f"vLLM refuses tap 3 ending stage 0 of 2 ({refused!r}) and accepts taps off the boundary and on the last "
        f"stage, as rule {RULE} assumes",
        "info",
    )


def get_probes() -> list[tuple[str, Any]]:
    return [("aux-attn-res-boundary", aux_attn_res_boundary)]
