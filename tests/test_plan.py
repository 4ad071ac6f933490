"""The stage plan's pure functions: partition, tap config rules, tap placement, relay, draft ids.

Expected values are worked out by hand from vLLM's rules (see the comments), not computed with the
code under test; tests/test_vllm_mirror.py checks the same functions against vLLM itself."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import fixture_config

from ppspec_cli.planning.plan import (
    EngineTaps,
    PlanInputs,
    TapSource,
    WeightBytes,
    build_plan,
    default_partition,
    default_taps,
    draft_layer_ids,
    normalize_taps,
    pp_rank_of,
    relay_bytes,
    stage_bounds,
    stage_taps,
    trained_taps,
    upstream_slots,
    v1_taps_from_config,
    v2_taps_from_config,
)

# ---------------------------------------------------------------------------------------------
# Partition


@pytest.mark.parametrize(
    "n,pp,expected",
    [
        (93, 8, [11, 11, 12, 12, 12, 12, 12, 11]),  # rem 5 -> stages -2..-6
        (93, 2, [47, 46]),  # rem 1 -> stage -2 (the first)
        (61, 4, [15, 15, 16, 15]),  # rem 1 -> stage -2 only
        (61, 2, [31, 30]),
        (61, 8, [7, 7, 8, 8, 8, 8, 8, 7]),  # rem 5
        (62, 4, [15, 16, 16, 15]),  # rem 2 -> stages -2, -3; never the first or last
        (80, 4, [20, 20, 20, 20]),
        (32, 2, [16, 16]),
        (36, 5, [7, 7, 7, 8, 7]),
        (5, 4, [1, 1, 2, 1]),
        (7, 4, [2, 2, 2, 1]),  # rem 3 == pp-1 -> the first stage gets one too
        (7, 8, [1, 1, 1, 1, 1, 1, 1, 0]),  # more stages than layers: the last stage is empty
        (6, 1, [6]),
    ],
)
def test_default_partition(n, pp, expected):
    assert default_partition(n, pp) == expected
    assert sum(expected) == n


def test_default_partition_last_stage_never_gets_the_remainder():
    for n in range(1, 130):
        for pp in range(2, 17):
            parts = default_partition(n, pp)
            assert sum(parts) == n and len(parts) == pp
            assert parts[-1] == n // pp
            assert max(parts) - min(parts) <= 1
            if n % pp < pp - 1:
                assert parts[0] == n // pp


def test_default_partition_rejects_zero_stages():
    with pytest.raises(ValueError):
        default_partition(10, 0)


def test_stage_bounds():
    assert stage_bounds([47, 46]) == [(0, 47), (47, 93)]
    assert stage_bounds([11, 11, 12, 12, 12, 12, 12, 11])[-1] == (82, 93)
    assert stage_bounds([3, 0, 2]) == [(0, 3), (3, 3), (3, 5)]


def test_pp_rank_layout_tp_fastest():
    # TP=8, PP=2: ranks 0-7 are stage 0, 8-15 stage 1, then DP replicas repeat the pattern.
    assert [pp_rank_of(r, tp=8, pp=2) for r in (0, 7, 8, 15, 16, 24)] == [0, 0, 1, 1, 0, 1]
    assert [pp_rank_of(r, tp=2, pp=2, pcp=2) for r in (0, 3, 4, 7, 8)] == [0, 0, 1, 1, 0]


# ---------------------------------------------------------------------------------------------
# Tap config rules


@pytest.mark.parametrize(
    "n,expected",
    [
        (61, (2, 30, 58)),
        (32, (2, 16, 29)),
        (93, (2, 46, 90)),
        (80, (2, 40, 77)),
        (36, (2, 18, 33)),
        (6, (2, 3)),
        (4, (1, 2)),
    ],
)
def test_default_taps(n, expected):
    """(2, n//2, n-3), sorted and de-duplicated as vLLM stores them."""
    assert default_taps(n) == expected


V2_CASES = [
    # (config, key, raw, taps)
    ({"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}, "eagle_aux_hidden_state_layer_ids", (1, 29, 57), (1, 29, 57)),
    (
        {"dflash_config": {"target_layer_ids": [1, 9, 17, 25, 33]}},
        "dflash_config.target_layer_ids",
        (1, 9, 17, 25, 33),
        (2, 10, 18, 26, 34),
    ),
    ({"dspark_target_layer_ids": [4, 30]}, "dspark_target_layer_ids", (4, 30), (5, 31)),
    ({"dspark_target_layer_ids": [4, 30], "model_type": "deepseek_v41"}, "dspark_target_layer_ids", (4, 30), (4, 30)),
    ({"dspark_target_layer_ids": [4, 30], "model_type": "deepseek_v4"}, "dspark_target_layer_ids", (4, 30), (5, 31)),
    ({"target_layer_ids": [0, 17, 34]}, "target_layer_ids", (0, 17, 34), (1, 18, 35)),
    ({"dflash_config": {"layer_ids": [3, 7]}}, "dflash_config.layer_ids", (3, 7), (3, 7)),
    ({"eagle_config": {"layer_ids": [3, 7]}}, "eagle_config.layer_ids", (3, 7), (3, 7)),
    # first match wins, in vLLM's order
    (
        {"eagle_aux_hidden_state_layer_ids": [5], "dflash_config": {"target_layer_ids": [1]}},
        "eagle_aux_hidden_state_layer_ids",
        (5,),
        (5,),
    ),
    (
        {"dflash_config": {"target_layer_ids": [1], "layer_ids": [9]}, "dspark_target_layer_ids": [2]},
        "dflash_config.target_layer_ids",
        (1,),
        (2,),
    ),
    ({"dspark_target_layer_ids": [2], "target_layer_ids": [7]}, "dspark_target_layer_ids", (2,), (3,)),
    ({"target_layer_ids": [7], "eagle_config": {"layer_ids": [1]}}, "target_layer_ids", (7,), (8,)),
    ({"dflash_config": {"layer_ids": [4]}, "eagle_config": {"layer_ids": [1]}}, "dflash_config.layer_ids", (4,), (4,)),
    # empty lists fall through
    ({"eagle_aux_hidden_state_layer_ids": [], "target_layer_ids": [2]}, "target_layer_ids", (2,), (3,)),
    (
        {"dflash_config": {"target_layer_ids": []}, "eagle_config": {"layer_ids": [6]}},
        "eagle_config.layer_ids",
        (6,),
        (6,),
    ),
]


@pytest.mark.parametrize("cfg,key,raw,taps", V2_CASES)
def test_v2_tap_rules(cfg, key, raw, taps):
    assert v2_taps_from_config(cfg) == TapSource(key, raw, taps)


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}},  # V2 ignores the nested key
        {"eagle_config": {"use_aux_hidden_state": True}},
        {"dflash_config": {}},
        {"eagle_aux_hidden_state_layer_ids": None},
    ],
)
def test_v2_defaults(cfg):
    assert v2_taps_from_config(cfg) == TapSource("default", None, None)


V1_CASES = [
    ({"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}, "eagle_aux_hidden_state_layer_ids", (1, 29, 57)),
    ({"dflash_config": {"target_layer_ids": [1, 9]}}, "dflash_config.target_layer_ids", (2, 10)),
    # the nested key, read as is (one layer early for SGLang/SpecForge heads)
    (
        {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}},
        "eagle_config.eagle_aux_hidden_state_layer_ids",
        (2, 30, 58),
    ),
    # ... and it overrides dflash_config whenever eagle_config is a non-empty mapping
    (
        {"dflash_config": {"target_layer_ids": [1]}, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [7]}},
        "eagle_config.eagle_aux_hidden_state_layer_ids",
        (7,),
    ),
]


@pytest.mark.parametrize("cfg,key,taps", V1_CASES)
def test_v1_tap_rules(cfg, key, taps):
    src = v1_taps_from_config(cfg)
    assert (src.key, src.taps) == (key, taps)


@pytest.mark.parametrize(
    "cfg",
    [
        {},
        {"dspark_target_layer_ids": [4, 30]},  # V1 reads no dspark key
        {"target_layer_ids": [1, 2]},  # nor the top-level target_layer_ids
        {"eagle_config": {"layer_ids": [3]}},  # nor the layer_ids keys
        # an eagle_config without the key wipes the dflash reading (V1 assigns None)
        {"dflash_config": {"target_layer_ids": [1, 9]}, "eagle_config": {"use_aux_hidden_state": True}},
    ],
)
def test_v1_defaults(cfg):
    assert v1_taps_from_config(cfg).taps is None and v1_taps_from_config(cfg).key == "default"


@pytest.mark.parametrize("bad", ["1,2", 3, [1, "2"], [1.0, 2.0], [True, 2]])
def test_malformed_tap_ids_raise(bad):
    with pytest.raises(TypeError):
        v2_taps_from_config({"eagle_aux_hidden_state_layer_ids": bad})
    with pytest.raises(TypeError):
        v1_taps_from_config({"eagle_config": {"eagle_aux_hidden_state_layer_ids": bad}})


def test_trained_taps_nested_is_output_of_layer_by_default():
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    assert trained_taps(cfg) == TapSource("eagle_config.eagle_aux_hidden_state_layer_ids", (2, 30, 58), (3, 31, 59))
    assert trained_taps(cfg, "layer_output").taps == (3, 31, 59)
    assert trained_taps(cfg, "capture_point").taps == (2, 30, 58)


def test_trained_taps_top_level_wins_over_nested():
    cfg = {"eagle_aux_hidden_state_layer_ids": [1, 2], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [5, 6]}}
    assert trained_taps(cfg) == TapSource("eagle_aux_hidden_state_layer_ids", (1, 2), (1, 2))


def test_trained_taps_other_keys_follow_v2():
    for cfg, key, raw, taps in V2_CASES:
        assert trained_taps(cfg) == TapSource(key, raw, taps)


def test_real_fixture_configs():
    kimi = fixture_config("AQ-MedAI__Kimi-K25-eagle3")
    assert v2_taps_from_config(kimi).key == "default"
    assert v1_taps_from_config(kimi).taps == (2, 30, 58)
    assert trained_taps(kimi).taps == (3, 31, 59)
    dflash = fixture_config("z-lab__Qwen3-8B-DFlash-b16", "config.partial.json")
    assert v2_taps_from_config(dflash).taps == (2, 10, 18, 26, 34)
    assert v1_taps_from_config(dflash).taps == (2, 10, 18, 26, 34)
    # SpecForge's qwen3-8b-dflash.json (this revision) names no taps at all
    assert v2_taps_from_config(fixture_config("sgl-project__SpecForge", "qwen3-8b-dflash.json")).key == "default"
    assert v2_taps_from_config(fixture_config("yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")).key == "default"


def test_normalize_taps():
    assert normalize_taps((58, 2, 30, 30)) == (2, 30, 58)
    assert normalize_taps(()) == ()


# ---------------------------------------------------------------------------------------------
# Tap placement and relay


def test_stage_taps_boundaries():
    bounds = stage_bounds([31, 30])  # 61 layers: [0,31) [31,61)
    # tap 31 = output of layer 30, the last layer of stage 0: produced by stage 0
    assert stage_taps((3, 31, 59), bounds) == [(3, 31), (59,)]
    # tap 32 = output of layer 31, the first layer of stage 1
    assert stage_taps((31, 32), bounds) == [(31,), (32,)]


def test_stage_taps_zero_and_last_layer():
    bounds = stage_bounds([16, 16])
    # tap 0 (embeddings) on stage 0; tap 16 on the boundary -> stage 0; tap 32 (L == n) -> last stage
    assert stage_taps((0, 16, 32), bounds) == [(0, 16), (32,)]
    assert stage_taps((1,), bounds) == [(1,), ()]
    # tap 0 is only ever produced by the first stage, even if that stage is empty
    assert stage_taps((0, 5), stage_bounds([0, 10])) == [(0,), (5,)]


def test_stage_taps_beyond_the_model_are_produced_nowhere():
    assert stage_taps((2, 33), stage_bounds([16, 16])) == [(2,), ()]


def test_upstream_slots_bisect_right():
    taps = (3, 31, 59)
    assert upstream_slots(taps, 0) == 0
    assert upstream_slots(taps, 3) == 1  # a tap on the start boundary came from upstream
    assert upstream_slots(taps, 31) == 2
    assert upstream_slots(taps, 32) == 2
    assert upstream_slots(taps, 60) == 3
    assert upstream_slots((0, 16, 32), 16) == 2


def test_relay_bytes():
    assert relay_bytes(2, 7168, 2) == 28672
    assert relay_bytes(0, 7168, 2) == 0
    assert relay_bytes(3, None, 2) == 0 and relay_bytes(3, 4096, None) == 0


def test_draft_layer_ids():
    assert draft_layer_ids(93, 5, "global", 46) == (93, 94, 95, 96, 97)
    # the seed's collision: a PP=2 prefiller named its 93-layer target's draft layers 46..50
    assert draft_layer_ids(93, 5, "pp-local", default_partition(93, 2)[-1]) == (46, 47, 48, 49, 50)
    assert draft_layer_ids(61, 1, "none", 30) == ()
    assert draft_layer_ids(61, 0, "global", 30) == ()


#: the taps of the 61-layer eagle3 example: trained on (2, 30, 58) in output-of-layer terms, served as (3, 31, 59)
_TAPS = EngineTaps(
    (3, 31, 59),
    "overlay",
    trained=TapSource("eagle_config.eagle_aux_hidden_state_layer_ids", (2, 30, 58), (3, 31, 59)),
    overlay={"eagle_aux_hidden_state_layer_ids": [3, 31, 59]},
)


def _plan(**kw):
    base = dict(
        num_layers=61,
        pp=2,
        layer_partition=None,
        method="eagle3",
        runner="v2",
        taps=_TAPS,
        hidden_size=7168,
        dtype_bytes=2,
        n_draft_layers=1,
        draft_numbering="global",
        drafter_needs_target_embed=True,
    )
    base.update(kw)
    return build_plan(PlanInputs(**base))


def test_build_plan_61_layers_pp2():
    p = _plan()
    assert p.partition == (31, 30) and p.partition_source == "default"
    s0, s1 = p.stages
    assert (s0.layers, s0.taps, s0.upstream_slots) == ((0, 31), (3, 31), 0)
    assert (s1.layers, s1.taps, s1.upstream_slots) == ((31, 61), (59,), 2)
    assert s0.relay_out.slots == 2 and s0.relay_out.taps == (3, 31)
    assert s0.relay_out.bytes_per_token == 2 * 7168 * 2
    assert s1.relay_out is None
    assert (s0.embedding, s1.embedding) == ("first", "drafter-needs")
    assert (s0.lm_head, s1.lm_head, s0.drafter, s1.drafter) == (False, True, False, True)
    assert p.draft_layer_ids == (61,)
    assert p.trained_taps == (3, 31, 59) and p.trained_source.startswith("eagle_config")
    j = p.to_json()
    assert j["stages"][0]["relay_out"] == {"slots": 2, "bytes_per_token": 28672, "taps": [3, 31]}
    assert j["stages"][1]["relay_out"] is None and j["taps"] == [3, 31, 59] and j["partition"] == [31, 30]


def test_build_plan_pp4_relay_is_cumulative_hop_by_hop():
    p = _plan(num_layers=80, pp=4, taps=replace(_TAPS, taps=(2, 40, 77)), hidden_size=8192)
    assert p.partition == (20, 20, 20, 20)
    assert [s.taps for s in p.stages] == [(2,), (40,), (), (77,)]
    assert [s.upstream_slots for s in p.stages] == [0, 1, 2, 2]
    # a middle stage forwards every upstream slot plus its own
    assert [s.relay_out.slots for s in p.stages[:3]] == [1, 2, 2]
    assert [s.relay_out.bytes_per_token for s in p.stages[:3]] == [16384, 32768, 32768]
    assert [s.embedding for s in p.stages] == ["first", "none", "none", "drafter-needs"]


def test_build_plan_explicit_partition_and_taps_sorted():
    p = _plan(layer_partition=[40, 21], taps=replace(_TAPS, taps=(59, 3, 31, 31)))
    assert p.partition == (40, 21) and p.partition_source == "profile"
    assert p.taps == (3, 31, 59)
    assert p.stages[0].taps == (3, 31) and p.stages[1].taps == (59,)
    assert p.stages[1].upstream_slots == 2


@pytest.mark.parametrize("bad", [[40, 20], [61], [62, -1], [30, 30, 1]])
def test_build_plan_bad_partition_falls_back_to_default(bad):
    """Rules report the bad partition; the plan still shows vLLM's default so the rest is visible."""
    p = _plan(layer_partition=bad)
    assert p.partition == (31, 30) and p.partition_source == "default"


def test_build_plan_no_drafter_and_mtp():
    p = _plan(
        method=None,
        taps=EngineTaps((), "none"),
        n_draft_layers=0,
        draft_numbering="none",
        drafter_needs_target_embed=False,
    )
    assert p.taps == () and all(s.relay_out is None or s.relay_out.slots == 0 for s in p.stages)
    assert p.stages[-1].drafter is False and p.stages[-1].embedding == "none"
    m = _plan(
        method="mtp",
        taps=EngineTaps((), "none"),
        n_draft_layers=1,
        draft_numbering="global",
        drafter_needs_target_embed=False,
    )
    assert m.draft_layer_ids == (61,) and m.stages[-1].drafter is True and m.to_json()["taps"] == []


def test_build_plan_pp1_has_one_stage_without_relay():
    p = _plan(pp=1, drafter_needs_target_embed=False)
    assert len(p.stages) == 1 and p.stages[0].relay_out is None
    assert p.stages[0].taps == (3, 31, 59) and p.stages[0].embedding == "first"


def test_build_plan_pp_local_numbering():
    p = _plan(
        num_layers=93, pp=2, method="eagle", taps=replace(_TAPS, taps=()), n_draft_layers=5, draft_numbering="pp-local"
    )
    assert p.draft_layer_ids == (46, 47, 48, 49, 50)


def test_build_plan_weight_memory_per_stage():
    p = _plan(weights=WeightBytes((10,) * 61, embed=1000, lm_head=500, drafter=70))
    s0, s1 = p.stages
    assert s0.weight_bytes == 31 * 10 + 1000
    # last stage: its layers + lm_head + drafter + the target embedding it loads for the drafter
    assert s1.weight_bytes == 30 * 10 + 500 + 70 + 1000
    assert _plan().stages[0].weight_bytes is None
