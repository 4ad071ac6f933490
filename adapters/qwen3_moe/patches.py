"""qwen3_moe: opt Qwen3MoeModel in to relaying EAGLE3-family taps over pipeline parallelism.

vLLM 0.32's Qwen3MoeModel.forward collects taps but never sends them downstream (a non-last stage
returns only hidden_states/residual) and captures the stage's start tap on every stage, so a tap on
a boundary would be taken twice. This pack replaces forward with one that follows vLLM's
convention exactly (see ppspec_cli.engine.relay), opts the class in where that forward runs, and
makes sure the last stage has a real embed_tokens when the drafter needs it (0.32 builds it on every
stage already; the wrapper only acts if a later version stops doing so).

Loaded by file path by the ppspec plugin; never imported as part of a package.
"""

from __future__ import annotations

from typing import Any

from ppspec_cli.engine import relay
from ppspec_cli.engine.patching import Patch

MODULE = "vllm.model_executor.models.qwen3_moe"
CLASS = "Qwen3MoeModel"

#: The EagleModelMixin behaviour the relaying forward calls into.
MIXIN = ("_maybe_add_hidden_state", "pack_local_aux_hidden_states", "collect_remote_aux_hidden_states", "_set_aux_hidden_state_layers")


def relayed_forward(
    self: Any,
    input_ids: Any,
    positions: Any,
    intermediate_tensors: Any = None,
    inputs_embeds: Any = None,
) -> Any:
    """Qwen3MoeModel.forward (ppspec qwen3_moe pack): the same layer loop, plus tap relay over PP."""
    group = relay.pp_group()
    if group.is_first_rank:
        hidden_states = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        residual = None
    else:
        assert intermediate_tensors is not None
        hidden_states = intermediate_tensors["hidden_states"]
        residual = intermediate_tensors["residual"]

    upstream = self.collect_remote_aux_hidden_states(intermediate_tensors)
    own: list[Any] = []
    if group.is_first_rank:
        # Tap 0 (the embeddings) exists only on the first stage; elsewhere the start tap is the
        # previous stage's last one.
        self._maybe_add_hidden_state(own, self.start_layer, hidden_states, residual)
    for idx in range(self.start_layer, self.end_layer):
        hidden_states, residual = self.layers[idx](positions, hidden_states, residual)
        self._maybe_add_hidden_state(own, idx + 1, hidden_states, residual)

    if not group.is_last_rank:
        return relay.stage_output(hidden_states, residual, self.pack_local_aux_hidden_states(own))

    hidden_states, _ = self.norm(hidden_states, residual)
    taps = upstream + own
    if taps:
        return hidden_states, taps
    return hidden_states


def get_patches() -> list[Patch]:
    return [
        Patch(
            name="relay_forward",
            module=MODULE,
            target=CLASS,
            attrs={"forward": relayed_forward},
            description="forward relays taps between PP stages (vLLM's convention)",
            requires=("forward", "embed_input_ids", *MIXIN),
            check=relay.check_relay,
        ),
        Patch(
            name="opt_in",
            module=MODULE,
            target=CLASS,
            attrs={"supports_aux_hidden_states_over_pp": relay.OptInWhereRelayed(relayed_forward)},
            description="supports_aux_hidden_states_over_pp = True where the relaying forward runs",
            requires=("supports_aux_hidden_states_over_pp",),
            check=relay.check_opt_in,
        ),
        Patch(
            name="target_embed_on_last_stage",
            module=MODULE,
            target=CLASS,
            attrs=lambda orig: {"__init__": relay.init_with_target_embed(orig["__init__"])},
            description="real embed_tokens on the last stage when the drafter needs the target's",
            check=relay.check_target_embed_rule,
        ),
    ]
