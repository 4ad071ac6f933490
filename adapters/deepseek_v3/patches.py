"""deepseek_v3: opt the DeepseekV2Model family (DeepSeek-V2/V3/R1, Kimi-K2, Kimi-K2.5's text model)
in to relaying EAGLE3-family taps over pipeline parallelism.

In vLLM 0.32 DeepseekV2Model is not an EagleModelMixin: it keeps its own tap tuple (unsorted, set
directly by DeepseekV2ForCausalLM.set_aux_hidden_state_layers), captures the tap at a stage's start
on every stage (a boundary tap would be taken twice), crashes on tap 0 (hidden + None), and never
sends taps downstream. Its embed_tokens exists on the first stage only.

This pack gives the class EagleModelMixin's behaviour (added to its bases, so isinstance checks
and the slot layout are vLLM's own), routes the setter through the mixin (sorted, de-duplicated,
PP layout cached), replaces forward with one that follows vLLM's convention exactly (keeping the
family's llama-4 scaling and sequence-parallel gathers), opts the class in where that forward runs,
and builds a real embed_tokens on the last stage when the drafter needs the target's.

Loaded by file path by the ppspec plugin; never imported as part of a package.
"""

from __future__ import annotations

import importlib
from typing import Any

from ppspec_cli.running.engine import relay
from ppspec_cli.running.engine.patching import Patch, PatchTargetMissing

MODULE = "vllm.model_executor.models.deepseek_v2"
CLASS = "DeepseekV2Model"
OUTER = "DeepseekV2ForCausalLM"
HELPERS = ("_get_llama_4_scaling", "tensor_model_parallel_all_gather")


def _vllm_module() -> Any:
    return importlib.import_module(MODULE)


def _mixin() -> type:
    from vllm.model_executor.models.interfaces import EagleModelMixin

    return EagleModelMixin


def _gather_tokens(value: Any, num_tokens: int) -> Any:
    """All-gather a sequence-parallel shard back to every token (the family's own helper)."""
    return _vllm_module().tensor_model_parallel_all_gather(value, 0)[:num_tokens]


def _gather_stream(self: Any, hidden_states: Any, residual: Any, num_tokens: int) -> tuple[Any, Any]:
    import torch

    both = _gather_tokens(torch.cat([hidden_states, residual], dim=-1), num_tokens)
    hidden_states, residual = both.split([self.hidden_size, self.hidden_size], dim=-1)
    return hidden_states, residual


def _capture(self: Any, out: list[Any], tap: int, hidden_states: Any, residual: Any, num_tokens: int) -> None:
    """Tap `tap` = the residual stream entering layer `tap`, over all tokens."""
    if tap not in self.aux_hidden_state_layers:
        return
    value = hidden_states if residual is None else hidden_states + residual
    if value.shape[0] != num_tokens:
        value = _gather_tokens(value, num_tokens)
    out.append(value)


def _llama4_scaling(config: Any, positions: Any) -> Any:
    cfg = getattr(config, "llama_4_scaling", None)
    if cfg is None:
        return None
    return _vllm_module()._get_llama_4_scaling(
        original_max_position_embeddings=cfg["original_max_position_embeddings"],
        scaling_beta=cfg["beta"],
        positions=positions,
    )


def relayed_forward(
    self: Any,
    input_ids: Any,
    positions: Any,
    intermediate_tensors: Any,
    inputs_embeds: Any = None,
) -> Any:
    """DeepseekV2Model.forward (ppspec deepseek_v3 pack): the same layer loop, taps in vLLM's
    convention, relayed over PP."""
    group = relay.pp_group()
    if group.is_first_rank:
        if inputs_embeds is not None:
            hidden_states = inputs_embeds
        elif input_ids is None:
            raise ValueError("Either input_ids or inputs_embeds must be provided to DeepseekV2Model.forward")
        else:
            hidden_states = self.embed_input_ids(input_ids)
        residual = None
    else:
        assert intermediate_tensors is not None
        hidden_states = intermediate_tensors["hidden_states"]
        residual = intermediate_tensors["residual"]

    upstream = self.collect_remote_aux_hidden_states(intermediate_tensors)
    scaling = _llama4_scaling(self.config, positions)
    num_tokens = positions.shape[0]
    own: list[Any] = []
    if group.is_first_rank:
        _capture(self, own, self.start_layer, hidden_states, residual, num_tokens)
    for idx in range(self.start_layer, self.end_layer):
        layer = self.layers[idx]
        if hidden_states.shape[0] != num_tokens and not layer.use_sequence_parallel_moe:
            hidden_states, residual = _gather_stream(self, hidden_states, residual, num_tokens)
        hidden_states, residual = layer(positions, hidden_states, residual, scaling)
        _capture(self, own, idx + 1, hidden_states, residual, num_tokens)

    if not group.is_last_rank:
        return relay.stage_output(hidden_states, residual, self.pack_local_aux_hidden_states(own))

    if hidden_states.shape[0] != num_tokens:
        hidden_states, residual = _gather_stream(self, hidden_states, residual, num_tokens)
    hidden_states, _ = self.norm(hidden_states, residual)
    taps = upstream + own
    if taps:
        return hidden_states, taps
    return hidden_states


def set_aux_hidden_state_layers(self: Any, layers: tuple[int, ...]) -> None:
    """DeepseekV2ForCausalLM.set_aux_hidden_state_layers (ppspec): through the inner decoder's
    EagleModelMixin setter, so the tap set is sorted, de-duplicated and the PP slot layout cached."""
    inner = self.model
    setter = getattr(inner, "_set_aux_hidden_state_layers", None)
    if setter is not None:
        setter(tuple(layers))
    else:  # a drafter subclass whose .model is not the target decoder
        inner.aux_hidden_state_layers = tuple(sorted(set(layers)))


def _with_mixin(orig: Any) -> dict[str, Any]:
    cls = orig.target
    mixin = _mixin()
    if issubclass(cls, mixin):
        raise PatchTargetMissing(
            f"{MODULE}:{CLASS} is already an EagleModelMixin: this vLLM differs from what the deepseek_v3 pack was "
            "written for"
        )
    bases = tuple(cls.__bases__)
    # Right after nn.Module, before the torch.compile wrapper base vLLM appended.
    return {"__bases__": (bases[0], mixin, *bases[1:])}


def _check_mixin(cls: type) -> bool:
    if not issubclass(cls, _mixin()):
        raise AssertionError(f"{cls.__name__} is not an EagleModelMixin")
    return True


def _check_setter(outer: type) -> bool:
    """The outer setter sorts and de-duplicates through the mixin (on a bare stand-in)."""
    mixin = _mixin()
    inner = type("_BareDecoder", (mixin,), {"start_layer": 0})()
    holder = type("_Holder", (), {})()
    holder.model = inner
    with relay.quiet():
        outer.set_aux_hidden_state_layers(holder, (5, 1, 5, 3))
    if tuple(inner.aux_hidden_state_layers) != (1, 3, 5):
        raise AssertionError(f"taps stored as {inner.aux_hidden_state_layers}, expected (1, 3, 5)")
    return True


def get_patches() -> list[Patch]:
    return [
        Patch(
            name="eagle_mixin",
            module=MODULE,
            target=CLASS,
            native=relay.natively_relays,
            attrs=_with_mixin,
            description="DeepseekV2Model gains EagleModelMixin (slot layout, pack/collect of relayed taps)",
            requires=("forward", "embed_input_ids"),
            requires_module=HELPERS,
            check=_check_mixin,
        ),
        Patch(
            name="relay_forward",
            module=MODULE,
            target=CLASS,
            native=relay.natively_relays,
            attrs={"forward": relayed_forward},
            description="forward captures taps in vLLM's convention and relays them between PP stages",
            expects={"forward": ("self", *relay.FORWARD_PARAMS)},
            requires=("forward",),
            requires_module=HELPERS,
            check=relay.check_relay,
        ),
        Patch(
            name="opt_in",
            module=MODULE,
            target=CLASS,
            native=relay.natively_relays,
            attrs={"supports_aux_hidden_states_over_pp": relay.OptInWhereRelayed(relayed_forward)},
            description="supports_aux_hidden_states_over_pp = True where the relaying forward runs",
            check=relay.check_opt_in,
        ),
        Patch(
            name="target_embed_on_last_stage",
            module=MODULE,
            target=CLASS,
            native=relay.natively_builds_target_embed,
            attrs=lambda orig: {"__init__": relay.init_with_target_embed(orig["__init__"])},
            description="real embed_tokens on the last stage when the drafter needs the target's",
            check=relay.check_target_embed_rule,
        ),
        Patch(
            name="sorted_tap_setter",
            module=MODULE,
            target=OUTER,
            attrs={"set_aux_hidden_state_layers": set_aux_hidden_state_layers},
            description="set_aux_hidden_state_layers goes through EagleModelMixin (sorted, de-duplicated)",
            requires=("set_aux_hidden_state_layers", "model_cls"),
            check=_check_setter,
        ),
    ]
