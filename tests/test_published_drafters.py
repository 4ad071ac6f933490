"""Published drafter configs from every trainer vLLM users bring (issue 40), each decided by a line
of vLLM's source, on 0.33 and 0.34.

The configs are copies in tests/fixtures/models (their sources: tests/fixtures/models/SOURCES.md):
the speculators library (vllm-project/speculators), SGLang's SpecForge, the official EAGLE repo
(yuhuili), NVIDIA Model-Optimizer's EAGLE3 export, z-lab's DFlash, RedHatAI's speculators
checkpoints and deepseek-ai's (DeepSeek-V3's MTP, dspark_qwen3_8b_block7).

Two levels:
- `check` on a profile (the whole preflight), on every verified release from 0.33 (knowledge/versions.py);
- the release's table applied to the config (knowledge/drafterfacts: what `check` reads), on 0.33
  and 0.34 both, with the file:line each decision cites. The lines are vLLM's, read by the scanner;
  where this file names one it was checked by hand against the release's source.
"""

from __future__ import annotations

import pytest
from conftest import fixture_config
from packaging.version import Version
from test_rules import INSTALL, check, eagle3_shards, expect

from ppspec_cli.knowledge import archtable, drafterfacts
from ppspec_cli.knowledge.versions import verdict

#: Releases whose verdict is their own (check-level tests).
VERIFIED = [v for v in archtable.committed_versions() if Version(v) >= Version("0.33.0") and verdict(v).verified]
#: Releases with a committed table (table-level tests).
TABLES = ["0.33.0", "0.34.0"]

LLAMA8B = "meta-llama__Llama-3.1-8B-Instruct"
LLAMA70B = "meta-llama__Llama-3.3-70B-Instruct"
QWEN3_8B = "Qwen__Qwen3-8B"


@pytest.fixture(autouse=True)
def no_installed_vllm():
    """The verdict is the declared release's, whatever vLLM this machine has installed (the facts
    say none is installed: nothing is patched)."""
    INSTALL[0] = None


def table(v: str) -> archtable.ArchTable:
    t = archtable.committed(v)
    assert t is not None and "drafter_rules" in t.doc, f"no table of vLLM {v} with its drafter side"
    return t


# ---------------------------------------------------------------------------------------------
# speculators (vllm-project/speculators): the loader registers eagle3, peagle, dflash, dflash2, dspark


@pytest.mark.parametrize("v", TABLES)
def test_speculators_eagle1_is_refused_at_config_load(v):
    """speculators_model_type `eagle` (the speculators EAGLE-1/HASS format): vLLM's speculators loader
    registers no such algorithm and raises 'Expected one of: ...'
    (transformers_utils/configs/speculators/base.py:53 in 0.33.0)."""
    got = drafterfacts.speculators_load(table(v), fixture_config("speculators__eagle1-llama3.1-8b"))
    assert got is not None and got.refused, got
    assert got.kind == "eagle" and got.at and got.at.endswith(("speculators/base.py:53", "speculators/base.py:55"))
    assert "registers no algorithm 'eagle'" in got.why


@pytest.mark.parametrize("v", VERIFIED)
def test_speculators_eagle1_check_refuses(make_checkpoint, v):
    target = make_checkpoint("llama8b", LLAMA8B)
    drafter = make_checkpoint("spec-eagle1", "speculators__eagle1-llama3.1-8b")
    _, by = check(target, drafter, method="eagle", engine_version=v)
    f = expect(by, "speculators-refused", "error", "drafter.model")
    assert "speculators/base.py:" in f.message and "'eagle'" in f.message
    assert "method-mismatch" not in by  # vLLM's refusal says it; ppspec's recognition adds nothing


@pytest.mark.parametrize("v", TABLES)
def test_speculators_eagle3_heads_are_served_as_vllms_class(v):
    """RedHatAI's and nm-testing's speculators EAGLE3 heads: vLLM maps transformer_layer_config's
    model_type (llama, the default when it is absent) to Eagle3LlamaForCausalLM (algos.py:46 in 0.33)."""
    for name, file in (
        ("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted", "config.json"),
        ("RedHatAI__Llama-3.1-8B-Instruct-speculator.eagle3", "config.partial.json"),
    ):
        got = drafterfacts.speculators_load(table(v), fixture_config(name, file))
        assert got is not None and not got.refused, (name, got)
        assert got.architectures == ("Eagle3LlamaForCausalLM",) and got.method == "eagle3"
        assert table(v).drafter("Eagle3LlamaForCausalLM", "cuda") is not None


@pytest.mark.parametrize("v", VERIFIED)
def test_speculators_eagle3_check_passes_the_load(make_checkpoint, v):
    target = make_checkpoint("llama8b", LLAMA8B)
    drafter = make_checkpoint("rh", "nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    r, by = check(target, drafter, method="eagle3", engine_version=v)
    assert r.drafter_served == ("Eagle3LlamaForCausalLM",)
    assert not {"speculators-refused", "eagle3-arch-unknown", "method-unknown", "method-mismatch"} & set(by), by


def test_speculators_peagle_is_served_in_033_and_refused_in_034():
    """P-EAGLE: 0.33 serves it as eagle3 with parallel drafting (PeagleLlamaForCausalLM, base.py:133);
    0.34 refuses it at config load ('P-EAGLE (parallel drafting EAGLE-3) is not supported.', algos.py:55)."""
    cfg = fixture_config("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    cfg.update(speculators_model_type="peagle", mask_token_id=128002)
    old = drafterfacts.speculators_load(table("0.33.0"), cfg)
    assert old is not None and not old.refused and old.architectures == ("PeagleLlamaForCausalLM",)
    assert old.method == "eagle3"
    new = drafterfacts.speculators_load(table("0.34.0"), cfg)
    assert new is not None and new.refused and "P-EAGLE" in new.why
    assert new.at and "speculators/algos.py" in new.at


@pytest.mark.parametrize("v", TABLES)
def test_speculators_eagle3_of_an_unmapped_model_type_is_refused(v):
    """A speculators EAGLE3 head whose transformer_layer_config is qwen2: vLLM maps only llama and qwen3
    ('Unsupported model_type qwen2 for Eagle3 speculator', algos.py:45 in 0.33)."""
    cfg = fixture_config("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")
    cfg["transformer_layer_config"]["model_type"] = "qwen2"
    got = drafterfacts.speculators_load(table(v), cfg)
    assert got is not None and got.refused and "qwen2" in got.why
    assert got.at and "speculators/algos.py" in got.at


@pytest.mark.parametrize("v", TABLES)
def test_speculators_dflash_without_its_required_key_is_refused(v):
    """update_dflash reads config_dict["aux_hidden_state_layer_ids"] unguarded: a KeyError at config load."""
    cfg = {
        "speculators_model_type": "dflash",
        "speculators_config": {"proposal_methods": [{"speculative_tokens": 7}], "verifier": {"name_or_path": "x/y"}},
        "transformer_layer_config": {"model_type": "qwen3"},
        "mask_token_id": 151669,
    }
    got = drafterfacts.speculators_load(table(v), cfg)
    assert got is not None and got.refused and "aux_hidden_state_layer_ids" in got.why
    cfg["aux_hidden_state_layer_ids"] = [2, 10, 18, 26, 34]
    ok = drafterfacts.speculators_load(table(v), cfg)
    assert ok is not None and not ok.refused and ok.architectures == ("DFlashDraftModel",)


# ---------------------------------------------------------------------------------------------
# The official EAGLE repo (yuhuili) and EAGLEConfig's renames


@pytest.mark.parametrize("v", TABLES)
def test_official_eagle3_head_naming_llama_is_served_as_eagle3_llama(v):
    """yuhuili/EAGLE3-LLaMA3.1-Instruct-8B names LlamaForCausalLM: EAGLEConfig renames it
    Eagle3LlamaForCausalLM for eagle3 (transformers_utils/configs/eagle.py:59), a registered class."""
    names = drafterfacts.served_names(table(v), "eagle3", ["LlamaForCausalLM"])
    assert names == ["Eagle3LlamaForCausalLM"]
    assert table(v).drafter(names[0], "cuda")["numbering"] == "global"


@pytest.mark.parametrize("v", VERIFIED)
def test_official_eagle3_head_gets_no_method_unknown_noise(make_checkpoint, v):
    target = make_checkpoint("llama8b", LLAMA8B)
    drafter = make_checkpoint("yuhuili3", "yuhuili__EAGLE3-LLaMA3.1-Instruct-8B")
    r, by = check(target, drafter, method="eagle3", engine_version=v)
    assert r.drafter_served == ("Eagle3LlamaForCausalLM",)
    assert not {"method-unknown", "eagle3-arch-unknown"} & set(by), sorted(by)


@pytest.mark.parametrize("v", TABLES)
def test_eagle1_head_naming_qwen2_is_renamed_to_an_unregistered_class(v):
    """yuhuili/EAGLE-Qwen2-7B-Instruct names Qwen2ForCausalLM: EAGLEConfig renames it EagleQwen2ForCausalLM
    (eagle.py:50), which vLLM's registry lacks: 'Model architectures ['EagleQwen2ForCausalLM'] are not
    supported for now' (vllm #24967)."""
    names = drafterfacts.served_names(table(v), "eagle", ["Qwen2ForCausalLM"])
    assert names == ["EagleQwen2ForCausalLM"] and not table(v).registers(names[0])
    assert drafterfacts.rename_rule(table(v), "eagle")["at"].endswith("transformers_utils/configs/eagle.py:50")


@pytest.mark.parametrize("v", VERIFIED)
def test_eagle1_qwen2_head_check_refuses(make_checkpoint, v):
    target = make_checkpoint("qwen2", "Qwen__Qwen2-7B-Instruct")
    drafter = make_checkpoint("eagle-qwen2", "yuhuili__EAGLE-Qwen2-7B-Instruct")
    _, by = check(target, drafter, method="eagle", engine_version=v)
    f = expect(by, "eagle-arch-unknown", "error", "drafter.model")
    assert "EagleQwen2ForCausalLM" in f.message and "eagle.py:50" in f.message


# ---------------------------------------------------------------------------------------------
# SGLang SpecForge


@pytest.mark.parametrize("v", TABLES)
def test_specforge_heads_keep_their_names(v):
    """SpecForge's LlamaForCausalLMEagle3 ends with Eagle3 and DFlashDraftModel starts with DFlash:
    EAGLEConfig keeps both (eagle.py:59, :69), and both are registered."""
    t = table(v)
    assert drafterfacts.served_names(t, "eagle3", ["LlamaForCausalLMEagle3"]) == ["LlamaForCausalLMEagle3"]
    assert drafterfacts.served_names(t, "dflash", ["DFlashDraftModel"]) == ["DFlashDraftModel"]
    assert t.drafter("LlamaForCausalLMEagle3", "cuda") and t.drafter("DFlashDraftModel", "cuda")


@pytest.mark.parametrize("v", VERIFIED)
def test_specforge_dflash_head_under_eagle3_is_refused(make_checkpoint, v):
    """A DFlash head with `method: eagle3`: 0.33 renames it Eagle3DFlashDraftModel, unregistered."""
    target = make_checkpoint("qwen3", QWEN3_8B)
    drafter = make_checkpoint("sf-dflash", "sgl-project__SpecForge/qwen3-8b-dflash.json")
    _, by = check(target, drafter, method="eagle3", engine_version=v)
    assert "eagle3-arch-unknown" in by or "drafter-method-declared" in by, sorted(by)
    assert "method-mismatch" not in by
    _, ok = check(target, drafter, method="dflash", engine_version=v)
    assert not {"dflash-arch-unknown", "drafter-method-declared", "method-mismatch"} & set(ok)


def test_034_dflash_class_declares_its_method():
    """vLLM 0.34: DFlashQwen3ForCausalLM sets speculator_config_class = DFlashSpeculatorConfig
    (qwen3_dflash.py:864), so a configured method other than dflash is refused early
    (v1/worker/gpu/spec_decode/speculator_config.py, _resolve_checkpoint_config_class)."""
    dm = table("0.34.0").drafter("DFlashDraftModel", "cuda").get("declares_method")
    assert dm == {
        "method": "dflash",
        "at": "vllm/model_executor/models/qwen3_dflash.py:864",
        "config": "DFlashSpeculatorConfig",
    }
    assert "declares_method" not in table("0.33.0").drafter("DFlashDraftModel", "cuda")


# ---------------------------------------------------------------------------------------------
# NVIDIA Model-Optimizer: the EAGLE3 export (LlamaForCausalLMEagle3, reduced draft vocabulary, optional d2t)


@pytest.mark.parametrize("v", TABLES)
def test_modelopt_export_without_d2t_starts_in_vllm(v):
    """Eagle3LlamaForCausalLM builds its draft-to-target map with torch.zeros when the vocabularies
    differ (llama_eagle3.py:340 in 0.33) and loads d2t only when the checkpoint has it: vLLM starts
    and reads draft id i as target id i."""
    d2t = table(v).drafter("LlamaForCausalLMEagle3", "cuda")["d2t"]
    assert d2t["missing"] == "zeros" and d2t["missing_at"].startswith("vllm/model_executor/models/llama_eagle3.py:")


@pytest.mark.parametrize("v", VERIFIED)
def test_modelopt_export_without_d2t_is_refused_by_ppspec_saying_why(make_checkpoint, v):
    target = make_checkpoint("llama8b", LLAMA8B)
    drafter = make_checkpoint(
        "mo", "nvidia-modelopt__llama3.1-8b-eagle3-export", shards=eagle3_shards(d2t=False, embed=True)
    )
    _, by = check(target, drafter, method="eagle3", engine_version=v)
    f = expect(by, "d2t-missing", "error", "drafter.model")
    assert "starts anyway" in f.message and "llama_eagle3.py:" in f.message and "ppspec refuses" in f.message
    drafter_ok = make_checkpoint(
        "mo-ok", "nvidia-modelopt__llama3.1-8b-eagle3-export", shards=eagle3_shards(embed=True)
    )
    _, ok = check(target, drafter_ok, method="eagle3", engine_version=v)
    assert "d2t-missing" not in ok and "method-unknown" not in ok


# ---------------------------------------------------------------------------------------------
# The narrow head (a user report): its own hidden size, the target's embedding


@pytest.mark.parametrize("v", TABLES)
def test_eagle3_llama_takes_the_checkpoints_word_on_its_embedding(v):
    """Eagle3LlamaForCausalLM keeps its own embedding only when the checkpoint has embed_tokens
    (process_eagle_weight, llama_eagle3.py:448 in 0.33) and builds it at its own hidden_size
    (llama_eagle3.py:192)."""
    emb = table(v).drafter("Eagle3LlamaForCausalLM", "cuda")["embed"]
    assert emb["own"] == "checkpoint" and emb["declared"] is True and emb["width_key"] == "hidden_size"


@pytest.mark.parametrize("v", VERIFIED)
def test_narrow_head_without_embed_tokens_is_refused(make_checkpoint, v):
    """hidden 4096 for an 8192-wide target (target_hidden_size 8192), no embed_tokens: Model Runner V2
    shares the target's 8192-wide embedding with it without a width check
    (v1/worker/gpu/spec_decode/eagle/utils.py maybe_share_target_embed) and the dummy run fails."""
    target = make_checkpoint("llama70b", LLAMA70B)
    head = fixture_config("sgl-project__SpecForge", "llama3-8B-eagle3.json")
    head["target_hidden_size"] = 8192
    shards = eagle3_shards(hidden=4096, embed=False)
    shards["model.safetensors"]["fc.weight"] = ("BF16", [4096, 3 * 8192])
    drafter = make_checkpoint("narrow", head, shards=shards)
    _, by = check(target, drafter, method="eagle3", engine_version=v)
    f = expect(by, "drafter-embed-width", "error", "drafter.model")
    assert "8192" in f.message and "4096" in f.message and "maybe_share_target_embed" in f.message
    # with its own embed_tokens it keeps its own: nothing to say
    shards["model.safetensors"]["embed_tokens.weight"] = ("BF16", [128256, 4096])
    _, ok = check(target, make_checkpoint("narrow-own", head, shards=shards), method="eagle3", engine_version=v)
    assert "drafter-embed-width" not in ok
    # on the CPU platform: up to 0.33 it runs the V1 runner, where vLLM starts with a never-loaded embedding
    # (ppspec says why it refuses); 0.34 runs Model Runner V2 on CPU too, which fails as on a GPU
    _, cpu = check(target, drafter, method="eagle3", engine_version=v, platform="cpu")
    msg = expect(cpu, "drafter-embed-width", "error").message
    assert ("acceptance collapses" if v == "0.33.0" else "maybe_share_target_embed") in msg, msg


# ---------------------------------------------------------------------------------------------
# z-lab DFlash, deepseek-ai DSpark and MTP


@pytest.mark.parametrize("v", VERIFIED)
def test_zlab_dflash_loads(make_checkpoint, v):
    target = make_checkpoint("qwen3", QWEN3_8B)
    drafter = make_checkpoint("zlab", "z-lab__Qwen3-8B-DFlash-b16/config.partial.json")
    r, by = check(target, drafter, method="dflash", engine_version=v)
    assert r.drafter_served == ("DFlashDraftModel",)
    assert not {"dflash-arch-unknown", "method-unknown", "drafter-method-declared"} & set(by), sorted(by)


@pytest.mark.parametrize("v", VERIFIED)
def test_deepseek_dspark_qwen3_loads(make_checkpoint, v):
    target = make_checkpoint("qwen3", QWEN3_8B)
    drafter = make_checkpoint("dspark", "deepseek-ai__dspark_qwen3_8b_block7")
    _, by = check(target, drafter, method="dspark", engine_version=v, dopts={"num_speculative_tokens": 7})
    assert not {"speculators-refused", "method-mismatch", "method-unknown", "dspark-served-as-deepseek-v4"} & set(by), (
        sorted(by)
    )


@pytest.mark.parametrize("v", TABLES)
def test_deepseek_v3_mtp_facts(v):
    """DeepSeek-V3: `mtp` rewrites deepseek_v3 to DeepSeekMTPModel with n_predict =
    num_nextn_predict_layers (config/speculative.py:756 in 0.33); DeepSeekMTP numbers its layer
    from num_hidden_layers (deepseek_mtp.py:151-162): one draft layer, id 61."""
    cfg = fixture_config("deepseek-ai__DeepSeek-V3")
    mf = drafterfacts.mtp_facts(table(v), "deepseek_v3", "DeepseekV3ForCausalLM", cfg, cfg, "cuda")
    assert mf is not None and mf.mtp_arch == "DeepSeekMTPModel"
    assert mf.ids == (61,) and mf.n_predict == 1 and mf.refusal is None


@pytest.mark.parametrize("v", VERIFIED)
def test_deepseek_v3_mtp_check(make_checkpoint, v):
    target = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    r, by = check(target, method="mtp", pp=2, engine_version=v)
    assert list(r.plan.draft_layer_ids) == [61]
    assert not {"mtp-no-layers", "mtp-k-not-multiple", "mtp-refused"} & set(by)
    # two MTP layers (n_predict 2): 3 speculative tokens are not a multiple (config/speculative.py:1609 in 0.33)
    two = fixture_config("deepseek-ai__DeepSeek-V3")
    two["num_nextn_predict_layers"] = 2
    r2, by2 = check(make_checkpoint("dsv3-2", two), method="mtp", pp=2, engine_version=v)
    f = expect(by2, "mtp-k-not-multiple", "error", "drafter.num_speculative_tokens")
    assert "n_predict=2" in f.message and list(r2.plan.draft_layer_ids) == [61, 62]
    _, ok = check(
        make_checkpoint("dsv3-2b", two), method="mtp", pp=2, engine_version=v, dopts={"num_speculative_tokens": 4}
    )
    assert "mtp-k-not-multiple" not in ok


@pytest.mark.parametrize("v", TABLES)
def test_deepseek_v41_refuses_mtp_and_names_dspark(v):
    """DeepSeek-V4.1 ships DSpark stages under mtp.*: vLLM refuses `mtp` and names dspark
    (config/speculative.py:1479 in 0.33; v1/worker/gpu/spec_decode/mtp/config.py in 0.34)."""
    cfg = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41", "num_hidden_layers": 61}
    mf = drafterfacts.mtp_facts(table(v), "deepseek_v41", "DeepseekV4ForCausalLM", cfg, cfg, "cuda")
    assert mf is not None and mf.refusal is not None and mf.refusal["method"] == "dspark"
    assert "Use speculative method 'dspark'" in mf.refusal["message"]


@pytest.mark.parametrize("v", VERIFIED)
def test_a_class_that_always_takes_the_target_embedding(make_checkpoint, v):
    """EagleCohereForCausalLM sets has_own_embed_tokens = False in its constructor (cohere_eagle.py:147
    in 0.33) and is no SupportsEagle class, so vLLM's weight hook never sets it: under PP it takes the
    target's embedding even when its checkpoint has embed_tokens, and DeepseekV2Model has none on the
    last stage ('needs the target input embedding, but it is unavailable on this PP stage'). A head of
    the same shape served as EagleLlamaForCausalLM keeps its own (the checkpoint decides)."""
    target = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    head = {
        "architectures": ["CohereForCausalLM"],
        "model_type": "cohere",
        "hidden_size": 7168,
        "num_hidden_layers": 1,
        "num_attention_heads": 56,
        "num_key_value_heads": 8,
        "vocab_size": 129280,
    }
    shards = {
        "model.safetensors": {
            "fc.weight": ("BF16", [7168, 2 * 7168]),
            "embed_tokens.weight": ("BF16", [129280, 7168]),
            "lm_head.weight": ("BF16", [129280, 7168]),
        }
    }
    r, by = check(target, make_checkpoint("cohere-head", head, shards=shards), method="eagle", pp=2, engine_version=v)
    assert r.drafter_served == ("EagleCohereForCausalLM",)
    f = expect(by, "embed-last-stage", "error", "adapter")
    assert "always takes the target's embedding" in f.message and "cohere_eagle.py:" in f.message
    llama_head = {**head, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    _, ok = check(
        target, make_checkpoint("llama-head", llama_head, shards=shards), method="eagle", pp=2, engine_version=v
    )
    assert "embed-last-stage" not in ok


# ---------------------------------------------------------------------------------------------
# SpeculativeConfig.hf_config_override runs on every draft config vLLM loads (not only MTP targets)

#: SYNTHETIC: the Kimi-K2.5 EAGLE3 head above (AQ-MedAI, model_type llama) with the model_type of
#: its DeepSeek-V3-lineage target, as a head whose trainer copied the target's config carries it.
EAGLE3_HEAD_DSV3_TYPE = {**fixture_config("AQ-MedAI__Kimi-K25-eagle3"), "model_type": "deepseek_v3"}


@pytest.mark.parametrize("v", ["0.30.0", *TABLES])
def test_config_override_rewrites_an_eagle3_head_with_a_deepseek_v3_model_type(v):
    """vLLM passes its config override as the draft ModelConfig's hf_overrides (config/speculative.py:1428
    in 0.33, v1/worker/gpu/spec_decode/speculator_config.py:209 in 0.34): model_type deepseek_v3 becomes
    deepseek_mtp (:749 in 0.33, :847 in 0.34) and the architectures DeepSeekMTPModel (:755, :853), whatever
    the head's own architectures say; EAGLEConfig then renames it Eagle3DeepSeekMTPModel, which no release
    registers. The same head with model_type llama is left alone."""
    t = table(v) if v in TABLES else archtable.committed(v)
    ov = drafterfacts.config_override(t, EAGLE3_HEAD_DSV3_TYPE)
    assert ov is not None and ov.architectures == ("DeepSeekMTPModel",) and ov.model_type == "deepseek_mtp"
    assert len(ov.applied) == 2 and all(a.startswith("vllm/config/speculative.py:") for a in ov.applied)
    assert ov.draft_applies_at is not None
    want = {
        "0.30.0": ("vllm/config/speculative.py:666", "vllm/config/speculative.py:672"),
        "0.33.0": ("vllm/config/speculative.py:749", "vllm/config/speculative.py:755"),
        "0.34.0": ("vllm/config/speculative.py:847", "vllm/config/speculative.py:853"),
    }
    assert ov.applied == want[v]
    assert drafterfacts.served_names(t, "eagle3", list(ov.architectures)) == ["Eagle3DeepSeekMTPModel"]
    assert not t.registers("Eagle3DeepSeekMTPModel")
    same = drafterfacts.config_override(t, fixture_config("AQ-MedAI__Kimi-K25-eagle3"))
    assert same is not None and not same.changed and same.architectures == ("LlamaForCausalLMEagle3",)
    # a speculators-format config is loaded as its own class: no step names its model_type
    assert drafterfacts.config_override(t, fixture_config("nm-testing__EAGLE3-LLaMA3.1-Instruct-8B-converted")) is None


@pytest.mark.parametrize("v", VERIFIED)
def test_eagle3_head_with_a_deepseek_v3_model_type_is_refused_by_check(make_checkpoint, v):
    target = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    head = make_checkpoint("head-dsv3", EAGLE3_HEAD_DSV3_TYPE, shards=eagle3_shards(hidden=7168))
    r, by = check(target, head, method="eagle3", engine_version=v)
    assert r.drafter_served == ("Eagle3DeepSeekMTPModel",)
    f = expect(by, "eagle3-arch-unknown", "error", "drafter.model")
    assert "every draft config" in f.message and "'deepseek_v3' to 'deepseek_mtp'" in f.message
    assert "['DeepSeekMTPModel']" in f.message and "Eagle3DeepSeekMTPModel" in f.message
    assert "model_type" in f.hint and "llama" in f.hint
    # the head as published (model_type llama) is served as named
    ok_head = make_checkpoint("head-llama", "AQ-MedAI__Kimi-K25-eagle3", shards=eagle3_shards(hidden=7168))
    r2, by2 = check(target, ok_head, method="eagle3", engine_version=v)
    assert r2.drafter_served == ("LlamaForCausalLMEagle3",) and "eagle3-arch-unknown" not in by2


@pytest.mark.parametrize("v", VERIFIED)
def test_eagle1_head_with_a_deepseek_v3_model_type_is_served_as_eagle_deepseek_mtp(make_checkpoint, v):
    """The same override is how vLLM serves a DeepSeek EAGLE-1 head: deepseek_v3 -> DeepSeekMTPModel,
    renamed EagleDeepSeekMTPModel by EAGLEConfig (transformers_utils/configs/eagle.py), a registered class."""
    target = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    cfg = {**EAGLE3_HEAD_DSV3_TYPE, "architectures": ["DeepseekV3ForCausalLM"]}
    cfg.pop("eagle_config")
    r, by = check(target, make_checkpoint("eagle1-dsv3", cfg), method="eagle", engine_version=v)
    assert r.drafter_served == ("EagleDeepSeekMTPModel",)
    assert r.drafter_override is not None and r.drafter_override.architectures == ("DeepSeekMTPModel",)
    assert "eagle-arch-unknown" not in by


# ---------------------------------------------------------------------------------------------
# The class vLLM builds a DSpark drafter as: the release's own rule (drafter_rules.dspark_class)


def test_dspark_class_rule_per_release():
    """0.30-0.33 keep a fixed list of DSpark classes (`elif self.method == "dspark" and ("Qwen3DSparkModel" not
    in ... )`, config/speculative.py:1412 in 0.30, :1543 in 0.33: 0.33 adds MuseSparkDSparkModel) and rename a
    Qwen3 DSparkDraftModel first (:1403, :1534); 0.34 keeps any class that declares its speculator
    (v1/worker/gpu/spec_decode/dspark/config.py:59, `draft.speculator_config_class is None`). Otherwise the
    in-target class: DSparkV41DraftModel for a deepseek_v41 target, else DSparkDraftModel (:1428, :1561, :64)."""
    steps = {v: archtable.committed(v).doc["drafter_rules"]["dspark_class"]["steps"] for v in ("0.30.0", "0.33.0")}
    steps["0.34.0"] = table("0.34.0").doc["drafter_rules"]["dspark_class"]["steps"]
    assert steps["0.30.0"][0]["at"] == "vllm/config/speculative.py:1403"
    assert steps["0.30.0"][0]["architectures"] == "Qwen3DSparkModel"
    assert steps["0.30.0"][1]["keeps"] == [
        "Gemma4DSparkModel",
        "K3DSparkModel",
        "Qwen3DSparkModel",
        "Qwen3OmniDSparkModel",
    ]
    assert steps["0.30.0"][1]["at"] == "vllm/config/speculative.py:1412"
    assert "MuseSparkDSparkModel" in steps["0.33.0"][1]["keeps"] and steps["0.33.0"][1]["at"].endswith(":1543")
    assert steps["0.34.0"] == [
        {
            "keeps": "declaring",
            "at": "vllm/v1/worker/gpu/spec_decode/dspark/config.py:59",
            "fallback": {
                "by_target_model_type": {"deepseek_v41": "DSparkV41DraftModel"},
                "default": "DSparkDraftModel",
                "at": "vllm/v1/worker/gpu/spec_decode/dspark/config.py:64",
            },
        }
    ]


@pytest.mark.parametrize(
    "v, archs, model_type, target_type, platform, want, fallback",
    [
        # deepseek-ai/dspark_qwen3_8b_block7: a Qwen3 DSparkDraftModel (0.33: the dspark branch; 0.34: the override)
        ("0.33.0", ["DSparkDraftModel"], "qwen3", "qwen3", "cuda", "Qwen3DSparkModel", False),
        # MuseSpark's class: not kept by 0.32's list, kept by 0.33's, declares dspark in 0.34
        ("0.32.0", ["MuseSparkDSparkModel"], "llama", "llama", "cuda", "DSparkDraftModel", True),
        ("0.33.0", ["MuseSparkDSparkModel"], "llama", "llama", "cuda", "MuseSparkDSparkModel", False),
        ("0.34.0", ["MuseSparkDSparkModel"], "llama", "llama", "cuda", "MuseSparkDSparkModel", False),
        # 0.34 keeps a class that declares its speculator though no list names it: MiniMax-M3's DSpark drafter
        ("0.34.0", ["DSparkMiniMaxDraftModel"], "minimax_m3", "minimax_m3", "cuda", "DSparkMiniMaxDraftModel", False),
        ("0.34.0", ["MistralLarge4DSparkModel"], "mistral", "mistral", "cuda", "MistralLarge4DSparkModel", False),
        # DeepSeek-V4.1's in-target drafter (the target's own config, rewritten by the override first)
        ("0.33.0", ["DeepseekV4ForCausalLM"], "deepseek_v41", "deepseek_v41", "cuda", "DSparkV41DraftModel", True),
        ("0.34.0", ["DeepSeekV4MTPModel"], "deepseek_mtp", "deepseek_v4", "cuda", "DSparkDraftModel", True),
    ],
)
def test_dspark_class_choice(v, archs, model_type, target_type, platform, want, fallback):
    t = archtable.committed(v)
    got = drafterfacts.class_choice(t, "dspark_class", archs, model_type, target_type, platform)
    assert got is not None and got.architectures == (want,) and got.fallback is fallback, got
    if fallback:
        assert got.applied and ("dspark/config.py:59" in got.why or "speculative.py" in got.why)


@pytest.mark.parametrize("v", VERIFIED)
def test_deepseek_dspark_qwen3_is_served_as_qwen3_dspark_by_the_table(make_checkpoint, v):
    """The whole path: the override (0.34, config/speculative.py:789) or the dspark branch (0.33, :1534)
    serves deepseek-ai/dspark_qwen3_8b_block7 as Qwen3DSparkModel, the class its contract is for."""
    target = make_checkpoint("qwen3", QWEN3_8B)
    drafter = make_checkpoint("dspark", "deepseek-ai__dspark_qwen3_8b_block7")
    r, _ = check(target, drafter, method="dspark", engine_version=v, dopts={"num_speculative_tokens": 7})
    assert r.drafter_served == ("Qwen3DSparkModel",)
    if v == "0.34.0":
        assert r.drafter_override is not None and r.drafter_override.applied == ("vllm/config/speculative.py:789",)
    else:
        assert r.drafter_choice is not None and r.drafter_choice.applied == ("vllm/config/speculative.py:1534",)


@pytest.mark.parametrize("v", VERIFIED)
def test_a_dspark_class_vllm_does_not_keep_is_served_in_target_and_warned(make_checkpoint, v):
    """A standalone DSpark checkpoint naming a class no release registers (SYNTHETIC `FooDSparkModel`):
    every release serves it as DeepSeek-V4's in-target DSparkDraftModel: the deepseek_v4_dspark pack warns."""
    target = make_checkpoint("qwen3", QWEN3_8B)
    cfg = {**fixture_config("deepseek-ai__dspark_qwen3_8b_block7"), "architectures": ["FooDSparkModel"]}
    r, by = check(target, make_checkpoint("foo", cfg), method="dspark", engine_version=v, adapter="auto")
    assert r.drafter_served == ("DSparkDraftModel",) and r.drafter_choice is not None and r.drafter_choice.fallback
    f = expect(by, "dspark-served-as-deepseek-v4", "warning")
    assert "DSparkDraftModel" in f.message and "FooDSparkModel" in f.message


def test_a_dspark_class_only_0_34_keeps_is_not_warned_there(make_checkpoint):
    """DSparkMiniMaxDraftModel declares its speculator (models/minimax_m3: speculator_config_class): 0.34 keeps it
    (dspark/config.py:59), where a hand-written list of kept classes would serve it as DSparkDraftModel."""
    target = make_checkpoint("qwen3", QWEN3_8B)
    cfg = {**fixture_config("deepseek-ai__dspark_qwen3_8b_block7"), "architectures": ["DSparkMiniMaxDraftModel"]}
    cfg["model_type"] = "minimax_m3_dspark"
    r, by = check(target, make_checkpoint("mm3", cfg), method="dspark", engine_version="0.34.0", adapter="auto")
    assert r.drafter_served == ("DSparkMiniMaxDraftModel",), r.drafter_served
    assert "dspark-served-as-deepseek-v4" not in by


# ---------------------------------------------------------------------------------------------
# 0.34: the last stage's target embedding follows the method's config and the draft class

#: SYNTHETIC DeepSeek-V4-shaped target (the keys vLLM's mtp path reads): 61 layers, one MTP layer.
DSV4 = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "hidden_size": 7168,
    "vocab_size": 129280,
    "num_attention_heads": 64,
}


def test_target_hidden_states_per_method_is_read_from_0_34():
    """0.34's spec_decode_needs_target_embed (model_executor/models/utils.py:934) reads the method's
    SpeculatorConfig.uses_target_hidden_states: True for eagle, eagle3 and mtp (EagleSpeculatorConfig,
    v1/worker/gpu/spec_decode/eagle/config.py:38, MTPSpeculatorConfig inherits it), dflash and dspark
    (dflash/config.py:19); False for ngram and draft_model (speculator_config.py:44). 0.33 has no such map."""
    hs = table("0.34.0").doc["drafter_rules"]["target_hidden_states"]
    for m in ("eagle", "eagle3", "mtp"):
        assert hs[m]["value"] is True and hs[m]["at"] == "vllm/v1/worker/gpu/spec_decode/eagle/config.py:38"
    assert hs["mtp"]["config"] == "MTPSpeculatorConfig"
    assert hs["dflash"]["at"] == hs["dspark"]["at"] == "vllm/v1/worker/gpu/spec_decode/dflash/config.py:19"
    assert hs["ngram"]["value"] is False and hs["draft_model"]["value"] is False
    assert table("0.33.0").doc["drafter_rules"]["target_hidden_states"] is None


@pytest.mark.parametrize(
    "cls, platform, want",
    [
        ("DeepSeekV4MTPModel", "cuda", True),  # has_own_embed_tokens = False, a class attribute (nvidia/mtp.py:302)
        ("DeepSeekV4MTPModel", "rocm", False),  # the AMD class has none
        ("DeepSeekMTPModel", "cuda", False),
        ("Glm4MoeLiteMTPModel", "cuda", False),
        ("Eagle3LlamaForCausalLM", "cuda", True),  # through SupportsEagleBase (interfaces.py)
    ],
)
def test_target_embed_rule_of_0_34(cls, platform, want):
    t = table("0.34.0")
    method = "eagle3" if cls.startswith("Eagle3") else "mtp"
    got = drafterfacts.target_embed(t, method, cls, t.drafter(cls, platform))
    assert got is not None and got[0] is want, got
    assert "utils.py:934" in got[1]
    if cls == "DeepSeekV4MTPModel" and want:
        assert "vllm/models/deepseek_v4/nvidia/mtp.py:302" in got[1]
    # 0.33's rule is a list of methods (mtp where the target opts in): not this one
    assert drafterfacts.target_embed(table("0.33.0"), method, cls, table("0.33.0").drafter(cls, platform)) is None


@pytest.mark.parametrize(
    "v, platform, want", [("0.33.0", "cuda", "none"), ("0.34.0", "cuda", "drafter-needs"), ("0.34.0", "rocm", "none")]
)
def test_deepseek_v4_mtp_last_stage_embedding_follows_the_release(make_checkpoint, v, platform, want):
    """DeepSeek-V4 + mtp at PP=2: 0.34 builds the target embedding on the last stage for DeepSeekV4MTPModel on
    cuda (its class attribute has_own_embed_tokens; the decoder builds it there, deepseek_v4/nvidia/model.py),
    so the plan counts it there; 0.33 (the method list without mtp, no pack opting DeepSeek-V4 in) and 0.34 on
    rocm (the AMD class has no such attribute) do not."""
    r, by = check(make_checkpoint("dsv4", DSV4), method="mtp", pp=2, engine_version=v, platform=platform)
    assert r.plan.stages[-1].embedding == want
    assert "embed-last-stage" not in by
    notes = [n for n in r.plan.notes if "target embedding on the last stage" in n]
    assert bool(notes) is (v == "0.34.0"), r.plan.notes
    if want == "drafter-needs":
        assert "has_own_embed_tokens (vllm/models/deepseek_v4/nvidia/mtp.py:302)" in notes[0]


@pytest.mark.parametrize("v", VERIFIED)
def test_deepseek_v3_mtp_needs_no_last_stage_embedding(make_checkpoint, v):
    """DeepSeekMTPModel has no has_own_embed_tokens: unchanged from 0.33, nothing built on the last stage."""
    r, _ = check(make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3"), method="mtp", pp=2, engine_version=v)
    assert r.plan.stages[-1].embedding == "none"


def test_mtp_class_that_takes_the_target_embedding_needs_the_target_to_build_it(make_checkpoint, monkeypatch):
    """The finding side of the 0.34 rule: where the rule says the last stage builds the target embedding
    for the MTP class and the class always takes the target's (DeepSeekV4MTPModel: has_own_embed_tokens =
    False), a target decoder that does not build it there gets embed-last-stage. SYNTHETIC: the 0.34 table
    with DeepSeek-V4's CUDA decoder marked as not building it (no release's decoder does that today)."""
    import copy

    real = archtable.committed("0.34.0")
    doc = copy.deepcopy(real.doc)
    for facts in doc["targets"]["DeepseekV4ForCausalLM"]["platforms"].values():
        facts["embed_last_stage"] = False
    fake = archtable.ArchTable(real.version, real.commit, real.origin, real.source, doc)
    monkeypatch.setattr(archtable, "committed", lambda v: fake if v and v.startswith("0.34") else real)
    r, by = check(make_checkpoint("dsv4", DSV4), method="mtp", pp=2, engine_version="0.34.0", platform="cuda")
    assert r.arch_table is fake and r.plan.stages[-1].embedding == "drafter-needs"
    f = expect(by, "embed-last-stage", "error", "adapter")
    assert "DeepSeekV4MTPModel" in f.message and "vllm/models/deepseek_v4/nvidia/mtp.py:302" in f.message
    # the real table: DeepSeek-V4's CUDA decoder builds it, no finding
    monkeypatch.setattr(archtable, "committed", lambda v: real)
    _, by = check(make_checkpoint("dsv4b", DSV4), method="mtp", pp=2, engine_version="0.34.0", platform="cuda")
    assert "embed-last-stage" not in by


def test_an_override_step_ppspec_does_not_evaluate_is_said_not_skipped(make_checkpoint):
    """vLLM 0.34's override has steps whose tests the scanner keeps `unread` (config/speculative.py:1097
    `'exaone4_5' in hf_config.model_type`; :1012 NemotronH's hasattr/> 0 test). A draft config that one
    names is not rewritten by ppspec and not passed over in silence: drafter-override-unread says where
    vLLM may rewrite it. SYNTHETIC: the Kimi-K2.5 EAGLE3 head with model_type exaone4_5."""
    t = table("0.34.0")
    head = {**fixture_config("AQ-MedAI__Kimi-K25-eagle3"), "model_type": "exaone4_5"}
    ov = drafterfacts.config_override(t, head)
    assert ov is not None and not ov.changed and ov.architectures == ("LlamaForCausalLMEagle3",)
    assert [at for at, _ in ov.unread] == ["vllm/config/speculative.py:1097"]
    # a model_type no unread step names: nothing to say
    plain = drafterfacts.config_override(t, fixture_config("AQ-MedAI__Kimi-K25-eagle3"))
    assert plain is not None and plain.unread == ()
    target = make_checkpoint("dsv3", "deepseek-ai__DeepSeek-V3")
    r, by = check(target, make_checkpoint("head-exaone", head, shards=eagle3_shards(hidden=7168)), method="eagle3",
                  engine_version="0.34.0")  # fmt: skip
    f = expect(by, "drafter-override-unread", "warning", "drafter.model")
    assert "speculative.py:1097" in f.message and "'exaone4_5'" in f.message
