"""Disaggregated prefill/decode (issue 15): roles in the profile, one plan per engine with the KV
layer names side by side, the cross-engine checks (draft layer names per drafter family, pack and
vLLM version; connector facts), and each engine's launch with its --kv-transfer-config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import fixture_config
from judging import judged

from ppspec_cli.errors import PpspecError
from ppspec_cli.knowledge import connectors
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.planning.pd import kv_transfer_config, name_table, run_pd_rules
from ppspec_cli.planning.profile import parse_profile

REPO = Path(__file__).resolve().parent.parent
LLAMA = "meta-llama__Llama-3.1-8B-Instruct"


#: The vLLM the facts say is installed here (a value: nothing is patched).
INSTALL: list = [None]


def pin(monkeypatch, version: str, platform: str = "cuda") -> None:
    INSTALL[0] = VllmInstall(version, "vllm", platform)


def resolve_roles(profile, offline: bool = True):
    """Both engines of a disaggregated profile, judged on the pinned install."""
    return judged(profile, install=INSTALL[0], offline=offline).deployment


@pytest.fixture
def k3(make_checkpoint):
    """SYNTHETIC Kimi-K3-shaped target: the Llama fixture's text model with 93 layers under
    text_config (the field report's depth: PP=2 splits it 47 + 46)."""
    text = {**fixture_config(LLAMA), "num_hidden_layers": 93}
    text.pop("architectures")
    return make_checkpoint(
        "k3", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
    )


@pytest.fixture
def dspark(make_checkpoint):
    """SYNTHETIC one-layer K3 DSpark drafter (vLLM: K3DSparkModel)."""
    cfg = {
        "architectures": ["K3DSparkModel"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": 4096,
        "vocab_size": 128256,
        "dspark_target_layer_ids": [1, 46, 89],
    }
    return make_checkpoint("dspark", cfg)


@pytest.fixture
def eagle1(make_checkpoint):
    """SYNTHETIC one-layer EAGLE-1 drafter."""
    return make_checkpoint(
        "eagle1",
        {
            "architectures": ["EagleLlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": 4096,
            "vocab_size": 128256,
        },
    )


def k3_profile(
    target, drafter, *, method="dspark", adapter="auto", connector="NixlConnector", pre_pp=2, dec_pp=1, **extra
):
    """profiles/kimi_k3_dspark_pd.yaml with local checkpoints in place of the hub ids."""
    data = yaml.safe_load((REPO / "profiles/kimi_k3_dspark_pd.yaml").read_text())
    data["target"] = {"model": str(target)}
    data["drafter"] = {**data["drafter"], "method": method, "model": str(drafter)}
    data["adapter"] = adapter
    data["kv_transfer"]["connector"] = connector
    data["roles"]["prefill"]["topology"]["pipeline_parallel"] = pre_pp
    data["roles"]["prefill"]["topology"]["nodes"] = pre_pp
    data["roles"]["decode"]["topology"]["pipeline_parallel"] = dec_pp
    data["roles"]["decode"]["topology"]["nodes"] = dec_pp
    for k, v in extra.items():
        data[k] = v
    return parse_profile(yaml.safe_dump(data))


def codes(d):
    return {f.code: f for f in run_pd_rules(d)}


# -- profile -------------------------------------------------------------------------------


def test_the_k3_profile_parses_and_each_role_is_a_single_engine_profile():
    p = parse_profile((REPO / "profiles/kimi_k3_dspark_pd.yaml").read_text())
    assert p.disaggregated and p.kv_transfer.connector == "NixlConnector"
    pre, dec = p.for_role("prefill"), p.for_role("decode")
    assert (pre.topology.pipeline_parallel, dec.topology.pipeline_parallel) == (2, 1)
    assert (pre.name, dec.name) == ("kimi-k3-dspark-pd-prefill", "kimi-k3-dspark-pd-decode")
    assert pre.server.served_model_name == dec.server.served_model_name == "kimi-k3-dspark-pd"
    assert pre.drafter == dec.drafter == p.drafter and pre.roles is None


def test_a_single_engine_profile_is_unchanged():
    p = parse_profile((REPO / "profiles/tiny_cpu_demo.yaml").read_text())
    assert p.roles is None and p.kv_transfer is None and not p.disaggregated
    with pytest.raises(ValueError):
        p.for_role("prefill")


@pytest.mark.parametrize(
    "bad, says",
    [
        (
            {"roles": {"prefill": {"topology": {}}}, "kv_transfer": {"connector": "NixlConnector"}},
            "both `prefill` and `decode`",
        ),
        ({"roles": {"prefill": {"topology": {}}, "decode": {"topology": {}}}}, "needs `kv_transfer`"),
        ({"kv_transfer": {"connector": "NixlConnector"}}, "needs `roles`"),
        (
            {
                "roles": {"prefill": {"topology": {}}, "decode": {"topology": {}}},
                "kv_transfer": {"connector": "NixlConnector"},
                "topology": {"pipeline_parallel": 2},
            },
            "top-level `topology`",
        ),
        (
            {
                "roles": {"prefill": {"topology": {}}, "decode": {"topology": {}}},
                "kv_transfer": {"connector": "NixlConnector", "options": {"kv_role": "kv_both"}},
            },
            "set by ppspec",
        ),
        (
            {
                "roles": {"prefill": {"topology": {}}, "mixed": {"topology": {}}},
                "kv_transfer": {"connector": "NixlConnector"},
            },
            "roles.mixed",
        ),
    ],
)
def test_malformed_roles_are_refused_with_the_key(bad, says):
    with pytest.raises(PpspecError) as e:
        parse_profile(yaml.safe_dump({"name": "x", "target": {"model": "demo:tiny-llama"}, **bad}))
    assert says in e.value.what


# -- the K3 case: draft layer names per drafter family, pack and vLLM version ----------------


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0", "0.33.0"])
def test_k3_dspark_numbers_globally_so_names_agree(monkeypatch, k3, dspark, version):
    """DSpark numbers draft layers from the global depth since 0.30 (dspark_mla.py:
    get_total_num_hidden_layers): both engines register model.layers.93 for the draft."""
    pin(monkeypatch, version)
    d = resolve_roles(k3_profile(k3, dspark), offline=True)
    assert d.roles["prefill"].plan.draft_layer_ids == d.roles["decode"].plan.draft_layer_ids == (93,)
    got = codes(d)
    assert "pd-draft-layer-names" not in got and "pd-draft-layer-collision" not in got
    assert [row for row in name_table(d) or [] if row.mismatch] == []
    assert not [f for f in got.values() if f.severity == "error"], [
        f.code for f in got.values() if f.severity == "error"
    ]


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0", "0.33.0"])
def test_k3_eagle1_numbers_pp_locally_without_the_pack(monkeypatch, k3, eagle1, version):
    """EAGLE-1 drafters number from the last stage's local count in 0.30-0.33: the PP=2 prefill
    names its draft layer 46 (stage 1 holds 46 layers), the PP=1 decode 93 -- the field report."""
    pin(monkeypatch, version)
    d = resolve_roles(k3_profile(k3, eagle1, method="eagle", adapter="kimi_k3"), offline=True)
    assert d.roles["prefill"].plan.draft_layer_ids == (46,) and d.roles["decode"].plan.draft_layer_ids == (93,)
    got = codes(d)
    f = got["pd-draft-layer-names"]
    assert f.severity == "error" and "model.layers.46" in f.message and "model.layers.93" in f.message
    assert "eagle_global_layer_ids" in f.hint
    assert got["pd-draft-layer-collision"].field == "roles.prefill.topology"
    bad = {(r.first, r.last) for r in [row for row in name_table(d) or [] if row.mismatch]}
    assert (46, 46) in bad and (93, 93) in bad


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0", "0.33.0"])
def test_k3_eagle1_with_the_global_ids_pack_agrees(monkeypatch, k3, eagle1, version):
    pin(monkeypatch, version)
    d = resolve_roles(k3_profile(k3, eagle1, method="eagle", adapter="auto"), offline=True)
    assert d.roles["prefill"].pack.name == "kimi_k3+eagle_global_layer_ids"
    assert d.roles["prefill"].plan.draft_layer_ids == d.roles["decode"].plan.draft_layer_ids == (93,)
    got = codes(d)
    assert "pd-draft-layer-names" not in got and "pd-draft-layer-collision" not in got


def test_eagle1_collision_says_what_where_and_the_fix(monkeypatch, k3, eagle1):
    """The PP-local collision names the layer, the two stages and the pack that renumbers it."""
    pin(monkeypatch, "0.33.0")
    f = codes(resolve_roles(k3_profile(k3, eagle1, method="eagle", adapter="kimi_k3"), offline=True))[
        "pd-draft-layer-collision"
    ]
    assert "model.layers.46 (the draft's on stage 1, the target's on stage 0)" in f.message
    assert "PP-local" in f.message and "prefill engine (PP=2)" in f.message
    assert "adapter: eagle_global_layer_ids" in f.hint and "roles.prefill.topology.pipeline_parallel: 1" in f.hint


def glm47_mtp_profile(target, pre_pp=2, dec_pp=1):
    """zai-org/GLM-4.7-Flash with its own MTP layer, disaggregated like the K3 profile."""
    data = yaml.safe_load((REPO / "profiles/kimi_k3_dspark_pd.yaml").read_text())
    data["target"] = {"model": str(target)}
    data["drafter"] = {"method": "mtp", "num_speculative_tokens": 1}
    data["adapter"] = "auto"
    for role, pp in (("prefill", pre_pp), ("decode", dec_pp)):
        data["roles"][role]["topology"].update(pipeline_parallel=pp, nodes=pp)
    return parse_profile(yaml.safe_dump(data))


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_mtp_numbered_from_zero_collision_says_what_where_and_the_fix(monkeypatch, make_checkpoint, version):
    """GLM-4.7-Flash: vLLM's mtp rewrite sets num_hidden_layers: 0 (config/speculative.py:863 in 0.33,
    :961 in 0.34) and Glm4MoeLiteMTPModel numbers its layers from it (glm4_moe_lite_mtp.py:175): the
    draft layer is model.layers.0, the target's first layer's name. The finding says so, where, and a
    fix that exists for MTP (no EAGLE-1 pack, which has nothing to renumber here)."""
    from test_field_cases import GLM47_FLASH

    pin(monkeypatch, version)
    d = resolve_roles(glm47_mtp_profile(make_checkpoint("glm47", GLM47_FLASH)), offline=True)
    assert d.roles["prefill"].plan.draft_layer_ids == d.roles["decode"].plan.draft_layer_ids == (0,)
    got = codes(d)
    for role, pp, stage in (("prefill", 2, 1), ("decode", 1, 0)):
        f = [x for x in run_pd_rules(d) if x.code == "pd-draft-layer-collision" and x.field == f"roles.{role}.topology"]
        assert len(f) == 1, got
        f = f[0]
        assert f"the {role} engine (PP={pp})" in f.message
        assert f"model.layers.0 (the draft's on stage {stage}, the target's on stage 0)" in f.message
        assert "Glm4MoeLiteMTPModel" in f.message and "from 0" in f.message and "PP-local" not in f.message
        assert "glm4_moe_lite_mtp.py" in f.message  # vLLM's line that decides it
        assert "eagle_global_layer_ids" not in f.hint and "pipeline_parallel: 1" not in f.hint
        assert "remove `roles` and `kv_transfer`" in f.hint and "eagle3" in f.hint


def test_symmetric_pp_agrees_even_when_numbering_is_pp_local(monkeypatch, k3, eagle1):
    """Both PP=2: both engines compute the same (wrong) number, so the names match across engines
    (the field report's green decode-PP2 arms); the single-engine rule still flags the numbering."""
    pin(monkeypatch, "0.32.0")
    d = resolve_roles(
        k3_profile(k3, eagle1, method="eagle", adapter="kimi_k3", dec_pp=2, connector="MooncakeConnector"), offline=True
    )
    got = codes(d)
    assert "pd-draft-layer-names" not in got
    assert "eagle1-pp-local-ids" in got


def test_name_table_side_by_side(monkeypatch, k3, dspark):
    pin(monkeypatch, "0.33.0")
    rows = name_table(resolve_roles(k3_profile(k3, dspark), offline=True))
    assert [(r.first, r.last, r.prefill, r.decode) for r in rows] == [
        (0, 46, ("target@0",), ("target@0",)),
        (47, 92, ("target@1",), ("target@0",)),
        (93, 93, ("draft@1",), ("draft@0",)),
    ]
    assert not any(r.mismatch for r in rows)


# -- connector facts --------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0", "0.33.0"])
def test_nixl_refuses_decode_side_pp(monkeypatch, k3, dspark, version):
    pin(monkeypatch, version)
    got = codes(resolve_roles(k3_profile(k3, dspark, pre_pp=1, dec_pp=2), offline=True))
    f = got["pd-connector-pp"]
    assert (
        f.severity == "error" and f.field == "roles.decode.topology.pipeline_parallel" and "base_worker.py" in f.message
    )


def test_push_side_facts_per_connector():
    """Which side may have PP, per connector (read off vLLM 0.30-0.33)."""
    for v in ("0.30.0", "0.32.0", "0.33.0"):
        for name in ("NixlConnector", "NixlPullConnector", "NixlPushConnector"):
            c = connectors.get(name)
            assert connectors.status(c.pp["prefill"], v)[0] == "supported"
            assert connectors.status(c.pp["decode"], v)[0] == "refused"
            assert connectors.status(c.kv_dtype_mismatch, v)[0] == "refused"
            assert c.kv_role == {"prefill": "kv_producer", "decode": "kv_consumer"}
        for name in ("MooncakeConnector", "ExampleConnector"):
            c = connectors.get(name)
            assert {connectors.status(c.pp[s], v)[0] for s in ("prefill", "decode")} == {"supported"}
    # HMA under PP: refused in 0.30 for both modes; since 0.31 only the pull worker refuses it
    assert connectors.status(connectors.get("NixlPushConnector").pp_hybrid, "0.30.0")[0] == "refused"
    assert connectors.status(connectors.get("NixlPushConnector").pp_hybrid, "0.32.0")[0] == "supported"
    assert connectors.status(connectors.get("NixlConnector").pp_hybrid, "0.33.0")[0] == "refused"
    # outside the checked range: unknown, never guessed
    assert connectors.status(connectors.get("NixlConnector").pp["decode"], "0.34.0")[0] == "unknown"
    for c in connectors.CONNECTORS.values():
        for facts in (
            *c.pp.values(),
            c.pp_hybrid,
            c.pp_mamba,
            c.tp_mismatch,
            c.block_size_mismatch,
            c.kv_dtype_mismatch,
            c.pcp_decode,
        ):
            assert all(f.source and f.why for f in facts), c.name


def test_unknown_and_unsuitable_connectors(monkeypatch, k3, dspark):
    pin(monkeypatch, "0.33.0")
    assert (
        codes(resolve_roles(k3_profile(k3, dspark, connector="LMCacheConnectorV1"), offline=True))[
            "pd-connector-unknown"
        ].severity
        == "warning"
    )
    assert (
        codes(resolve_roles(k3_profile(k3, dspark, connector="OffloadingConnector"), offline=True))[
            "pd-connector-unsuitable"
        ].severity
        == "error"
    )
    assert (
        codes(resolve_roles(k3_profile(k3, dspark, connector="P2pNcclConnector"), offline=True))[
            "pd-connector-unsuitable"
        ].severity
        == "error"
    )


def test_layout_mismatches_the_connector_cannot_map(monkeypatch, k3, dspark):
    pin(monkeypatch, "0.33.0")
    p = k3_profile(k3, dspark, connector="ExampleConnector")
    roles = p.roles
    roles = {
        "prefill": roles["prefill"].model_copy(
            update={
                "engine": {"kv-cache-dtype": "fp8"},
                "topology": roles["prefill"].topology.model_copy(update={"tensor_parallel": 4, "gpus_per_node": 4}),
            }
        ),
        "decode": roles["decode"],
    }
    got = codes(resolve_roles(p.model_copy(update={"roles": roles}), offline=True))
    assert got["pd-kv-dtype-mismatch"].severity == "error" and "fp8" in got["pd-kv-dtype-mismatch"].message
    assert got["pd-tp-mismatch"].severity == "error"
    nixl = codes(
        resolve_roles(
            p.model_copy(
                update={"roles": roles, "kv_transfer": p.kv_transfer.model_copy(update={"connector": "NixlConnector"})}
            ),
            offline=True,
        )
    )
    assert "pd-tp-mismatch" not in nixl  # NIXL maps heterogeneous TP


def test_dp_rank_layout_and_decode_pcp(monkeypatch, k3, dspark):
    pin(monkeypatch, "0.33.0")
    p = k3_profile(k3, dspark)
    pre = p.roles["prefill"].model_copy(
        update={
            "topology": p.roles["prefill"].topology.model_copy(
                update={"data_parallel": 2, "tensor_parallel": 2, "gpus_per_node": 4}
            )
        }
    )
    dec = p.roles["decode"].model_copy(update={"engine": {"prefill-context-parallel-size": 2}})
    got = codes(resolve_roles(p.model_copy(update={"roles": {"prefill": pre, "decode": dec}}), offline=True))
    f = got["pd-rank-layout"]
    assert "stage 0: ranks [0, 1], stage 1: ranks [2, 3]" in f.message and "replica k adds 4*k" in f.message
    assert got["pd-connector-pcp"].severity == "error"


def test_hybrid_target_stages(monkeypatch, make_checkpoint, dspark):
    """A target whose config lists layer_types: which stage holds which attention types."""
    pin(monkeypatch, "0.32.0")
    text = {
        **fixture_config(LLAMA),
        "num_hidden_layers": 8,
        "layer_types": ["full_attention"] * 4 + ["linear_attention"] * 4,
    }
    text.pop("architectures")
    t = make_checkpoint(
        "hyb", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
    )
    got = codes(resolve_roles(k3_profile(t, dspark, connector="NixlPushConnector"), offline=True))
    f = got["pd-hybrid-pp"]
    assert (
        f.severity == "error"
        and "stage 0: full_attention; stage 1: linear_attention" in f.message
        and "Mamba" in f.message
    )


def test_same_port_is_refused(monkeypatch, k3, dspark):
    pin(monkeypatch, "0.33.0")
    p = k3_profile(k3, dspark)
    dec = p.roles["decode"].model_copy(update={"server": p.roles["prefill"].server})
    assert (
        codes(
            resolve_roles(p.model_copy(update={"roles": {"prefill": p.roles["prefill"], "decode": dec}}), offline=True)
        )["pd-port-clash"].severity
        == "error"
    )


# -- launch -------------------------------------------------------------------------------------


def test_kv_transfer_config_per_side_and_router():
    p = parse_profile((REPO / "profiles/kimi_k3_dspark_pd.yaml").read_text())
    assert kv_transfer_config(p, "prefill") == {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    assert kv_transfer_config(p, "decode") == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}
    ex = p.model_copy(
        update={
            "kv_transfer": p.kv_transfer.model_copy(
                update={"connector": "ExampleConnector", "extra_config": {"shared_storage_path": "/x"}}
            )
        }
    )
    assert kv_transfer_config(ex, "decode") == {
        "kv_connector": "ExampleConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"shared_storage_path": "/x"},
    }


@pytest.mark.parametrize(
    "version, says", [("0.30.0", "hybrid layout refused under PP"), ("0.32.0", "Mamba/SSM"), ("0.33.0", "Mamba/SSM")]
)
def test_k3_kda_layers_from_the_pack_make_nixl_refuse_prefill_pp(monkeypatch, make_checkpoint, dspark, version, says):
    """Kimi-K3 is hybrid: KDA (linear attention with recurrent state) and MLA layers, listed 1-based in
    linear_attn_config.kda_layers (the kimi_k3 pack's linear_layers fact). Stock NIXL refuses PP>1 with
    that layout on the prefill side in every checked version: the seed's PP=2 prefill needed a fork."""
    pin(monkeypatch, version)
    text = {
        **fixture_config(LLAMA),
        "num_hidden_layers": 93,
        "linear_attn_config": {
            "kda_layers": [i for i in range(1, 94) if i % 4],
            "full_attn_layers": [i for i in range(1, 94) if i % 4 == 0],
        },
    }
    text.pop("architectures")
    t = make_checkpoint(
        "k3kda", {"architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "text_config": text}
    )
    got = codes(resolve_roles(k3_profile(t, dspark), offline=True))
    f = got["pd-hybrid-pp"]
    assert (
        f.severity == "error" and says in f.message and "linear_attn_config.kda_layers (the kimi_k3 pack)" in f.message
    )
    assert "stage 0: full_attention, linear_attention; stage 1: full_attention, linear_attention" in f.message
    assert "pd-hybrid-not-checked" not in got
    # a target no pack describes, with the same config key: not read (said, not guessed)
    u = make_checkpoint("unknown", {"architectures": ["SomeHybridForCausalLM"], "model_type": "x", "text_config": text})
    assert "pd-hybrid-not-checked" in codes(resolve_roles(k3_profile(u, dspark, adapter="none"), offline=True))
