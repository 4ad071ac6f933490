"""The planted DFlash and DSpark drafters (ppspec_kit/block.py, issue 13): recomputed in
float64 the way vLLM 0.33's Model Runner V2 runs them (context K/V from the projected taps,
non-causal attention over the context and the query block), they propose the relay target's
token two ahead at the first draft position and BOS (never right) after it, only when served the
taps they name; their configs name those taps the way vLLM reads them (vLLM's own function)."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

import ppspec_kit as kit
from ppspec_cli import demo
from ppspec_cli.demo.relay import RELAY_SEED, relay_target_weights
from ppspec_kit import block

pytestmark = pytest.mark.slow  # builds the planted drafters' weights with torch (and imports vLLM's config reader)

METHODS = ("dflash", "dspark")


@pytest.fixture(scope="module")
def relay():
    import torch

    tsd = relay_target_weights(RELAY_SEED)
    taps = demo.relay_taps_clean(tsd)
    return SimpleNamespace(
        embed=tsd["model.embed_tokens.weight"],
        taps=taps,
        succ=demo.relay_successors(),
        cat=lambda tapset, seq: torch.cat([taps[t][seq] for t in tapset], dim=-1),
    )


@pytest.fixture(scope="module")
def weights():
    return {m: block.block_weights(m) for m in METHODS}


def _sequences(succ, n: int, seed: int = 7):
    """Greedy continuations of the relay target (its next token is succ[x]) of varied lengths."""
    rng = random.Random(seed)
    starts = sorted(succ)
    for _ in range(n):
        seq = [rng.choice(starts)]
        for _ in range(rng.randint(0, 40)):
            seq.append(succ[seq[-1]])
        yield seq


@pytest.mark.parametrize("method", METHODS)
def test_first_draft_is_two_ahead_and_the_rest_bos(method, relay, weights):
    for seq in _sequences(relay.succ, 40):
        bonus = relay.succ[seq[-1]]
        drafts = block.block_draft_tokens(
            method, weights[method], relay.embed, relay.cat(demo.RELAY_TAPS, seq), bonus, 3
        )
        assert drafts == [relay.succ[bonus], demo.BOS_ID, demo.BOS_ID], (method, seq[-3:], drafts)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "taps", [kit.RELAY_TAPS_EARLY, kit.RELAY_TAPS_LATE, (3, 1, 6)], ids=["early", "late", "swapped"]
)
def test_wrong_taps_are_never_right_at_the_first_position(method, taps, relay, weights):
    """Served other taps (what a relay bug or the +1 slip gives), the first proposal is wrong for
    (almost) every token: one layer early gives BOS always, the GPU run's broken-tap arms accept 0."""
    seqs = list(_sequences(relay.succ, 30, seed=11))
    hits = sum(
        block.block_draft_tokens(method, weights[method], relay.embed, relay.cat(taps, s), relay.succ[s[-1]], 2)[0]
        == relay.succ[relay.succ[s[-1]]]
        for s in seqs
    )
    if taps == kit.RELAY_TAPS_EARLY:
        assert hits == 0
    else:
        assert hits < 0.6 * len(seqs)


@pytest.mark.parametrize("method", METHODS)
def test_attention_reads_only_the_last_verified_position(method):
    d0 = block.QUERY_DISTANCE[method]
    assert block.attention_margin(d0) >= block.ATTN_MIN_MARGIN
    scores = block.attention_scores(d0, range(-8, 600))
    assert int(scores.argmax()) - 8 == d0


def test_a_weak_planting_is_refused(monkeypatch):
    monkeypatch.setattr(block, "ATTN_GAIN", 4.0)
    with pytest.raises(RuntimeError, match="attention margin"):
        block.block_weights("dflash")


@pytest.mark.parametrize("method", METHODS)
def test_config_names_the_relay_taps_output_of_layer(method, weights):
    from ppspec_cli.planning.plan import v2_taps_from_config

    cfg = json.loads(json.dumps(block.block_config(method, weights[method]["lm_head.weight"].shape[0])))  # as written
    assert v2_taps_from_config(cfg).taps == demo.RELAY_TAPS


@pytest.mark.vllm
@pytest.mark.parametrize("method", METHODS)
def test_vllm_reads_the_config_as_built(method, weights):
    """vLLM's own reading of the config: the V2 runner's tap lookup
    (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py) gives the relay taps, the parallel-drafting
    token is the planted mask, and the DFlash layer is served non-causal (as the reference computes)."""
    from transformers import PretrainedConfig
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu.spec_decode.utils import get_parallel_drafting_token_id

    hf = PretrainedConfig(**block.block_config(method, weights[method]["lm_head.weight"].shape[0]))
    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf))
    assert get_eagle3_aux_layers_from_config(spec) == demo.RELAY_TAPS
    assert get_parallel_drafting_token_id(hf) == block.MASK_TOKEN_ID
    if method == "dflash":
        assert dflash_has_any_non_causal(hf)


def test_draft_passes_per_step_follow_the_method():
    from ppspec_cli.knowledge.facts import drafter_passes

    assert drafter_passes("eagle3", 3) == 3 and drafter_passes("mtp", 2) == 2
    assert drafter_passes("dflash", 3) == 1 and drafter_passes("dspark", 7) == 1
