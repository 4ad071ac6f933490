"""Field cases a past issue fixed, kept as tests so a refactor cannot silently undo them.

Each case is a checkpoint config in the shape of a public model's (the keys vLLM reads, values
from its published config.json), the profile a user wrote, and the vLLM source line that decides it.
"""

from __future__ import annotations

import pytest

from tests.test_rules import check

#: zai-org/GLM-4.5-Air config.json (the keys vLLM's MTP path reads; values as published).
GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 46,
    "num_nextn_predict_layers": 1,
    "vocab_size": 151552,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 128,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 1,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
#: zai-org/GLM-5 config.json (GlmMoeDsaForCausalLM; the keys vLLM's MTP path reads).
GLM5 = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "num_nextn_predict_layers": 1,
    "vocab_size": 154880,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "kv_lora_rank": 512,
    "q_lora_rank": 2048,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_glm45_air_mtp_plans_vllms_one_draft_layer(make_checkpoint, version):
    """GLM-4.5-Air + MTP at PP=2: vLLM rewrites the target to Glm4MoeMTPModel (config/speculative.py) whose
    predictor builds layers range(num_hidden_layers, num_hidden_layers + num_nextn_predict_layers)
    (glm4_moe_mtp.py:135-149): one layer, `model.layers.46`."""
    target = make_checkpoint("glm45-air", GLM45_AIR)
    r, by = check(target, method="mtp", pp=2, engine_version=version)
    assert list(r.plan.draft_layer_ids) == [46]
    assert "mtp-no-layers" not in by


@pytest.mark.parametrize("version", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_glm5_mtp_with_one_nextn_layer_is_not_refused(make_checkpoint, version):
    """GLM-5 (glm_moe_dsa) + MTP: vLLM rewrites the type to deepseek_mtp and builds
    DeepseekV32MTPModel, whose predictor counts `num_nextn_predict_layers` (1 here) from
    `num_hidden_layers`: draft layer 78, no refusal."""
    target = make_checkpoint("glm5", GLM5)
    r, by = check(target, method="mtp", pp=2, engine_version=version)
    assert "mtp-no-layers" not in by, by.get("mtp-no-layers")
    assert list(r.plan.draft_layer_ids) == [78]


# ---------------------------------------------------------------------------------------------
# Issue 40: MTP draft ids as vLLM's MTP class numbers them (not always from the target's depth)

#: zai-org/GLM-4.7-Flash (Glm4MoeLiteForCausalLM, DeepSeek-V3 lineage; 47 layers, one NextN layer).
GLM47_FLASH = {
    "architectures": ["Glm4MoeLiteForCausalLM"],
    "model_type": "glm4_moe_lite",
    "hidden_size": 2048,
    "num_hidden_layers": 47,
    "num_nextn_predict_layers": 1,
    "vocab_size": 154880,
    "num_attention_heads": 20,
    "num_key_value_heads": 20,
    "kv_lora_rank": 512,
    "q_lora_rank": 768,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "torch_dtype": "bfloat16",
}
#: Qwen/Qwen3.6-35B-A3B's shape (Qwen3_5MoeForConditionalGeneration, its text model under
#: text_config: 40 layers, hidden 2048, one MTP layer), the keys vLLM's MTP path reads.
QWEN36_MOE = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "vocab_size": 248320,
        "num_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 512,
        "full_attention_interval": 4,
        "mtp_num_hidden_layers": 1,
    },
    "torch_dtype": "bfloat16",
}
#: Qwen/Qwen3-Next-80B-A3B-Instruct's shape (48 layers, hidden 2048; its config names no MTP layer
#: count: vLLM's Qwen3NextMTP defaults to 1, qwen3_next_mtp.py:63).
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 151936,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "full_attention_interval": 4,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_glm47_flash_mtp_layer_is_numbered_from_zero(make_checkpoint, version):
    """vLLM's mtp rewrite of Glm4MoeLiteForCausalLM sets num_hidden_layers: 0 (config/speculative.py:863
    in 0.33) and Glm4MoeLiteMTP numbers its layers from config.num_hidden_layers (glm4_moe_lite_mtp.py:164-176):
    one draft layer, id 0 (ppspec planned 47 before issue 40)."""
    r, by = check(make_checkpoint("glm47", GLM47_FLASH), method="mtp", pp=2, engine_version=version)
    assert list(r.plan.draft_layer_ids) == [0]
    assert "mtp-no-layers" not in by


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_qwen35_moe_mtp_layer_ids_and_no_embed_error(make_checkpoint, version):
    """Qwen3.5-MoE: the rewrite picks Qwen3_5MoeMTP (config/speculative.py:998) whose predictor builds
    `layers.{idx}` for idx in range(mtp_num_hidden_layers) (qwen3_5_mtp.py:118-124): id 0."""
    r, by = check(make_checkpoint("qwen36", QWEN36_MOE), method="mtp", pp=2, engine_version=version)
    assert list(r.plan.draft_layer_ids) == [0]
    assert "mtp-no-layers" not in by


@pytest.mark.parametrize("version", ["0.30.0", "0.33.0"])
def test_qwen3_next_mtp_defaults_to_one_layer_numbered_zero(make_checkpoint, version):
    """Issue 31: Qwen3-Next's config names no MTP count and vLLM defaults to 1 (qwen3_next_mtp.py:63):
    not mtp-no-layers. Issue 40: its layer is `layers.0` (range(num_mtp_layers), qwen3_next_mtp.py:89-96)."""
    r, by = check(make_checkpoint("qwen3next", QWEN3_NEXT), method="mtp", pp=2, engine_version=version)
    assert "mtp-no-layers" not in by
    assert list(r.plan.draft_layer_ids) == [0]


@pytest.mark.parametrize("version", ["0.30.0", "0.33.0"])
def test_qwen3_next_eagle3_at_pp2_is_refused(make_checkpoint, version):
    """Issue 31: Qwen3NextModel never opts in to relaying taps over PP (qwen3_next.py): vLLM refuses
    EAGLE3 at PP=2. Issue 40: its decoder builds embed_tokens on every stage (qwen3_next.py:659, outside
    any `if`), so a drafter sharing the embedding gets no `embed-last-stage` error on top."""
    target = make_checkpoint("qwen3next", QWEN3_NEXT)
    head = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 2048,
        "num_hidden_layers": 1,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "vocab_size": 151936,
        "draft_vocab_size": 32000,
    }
    shards = {
        "model.safetensors": {
            "fc.weight": ("BF16", [2048, 3 * 2048]),
            "lm_head.weight": ("BF16", [32000, 2048]),
            "d2t": ("I64", [32000]),
        }
    }
    _, by = check(target, make_checkpoint("head", head, shards=shards), method="eagle3", pp=2, engine_version=version)
    assert "target-not-opted-in" in by
    assert "embed-last-stage" not in by and "embed-last-stage-unknown" not in by


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_qwen3_moe_drafter_sharing_the_embedding_gets_no_embed_error(make_checkpoint, version):
    """Issue 40: Qwen3MoeModel builds embed_tokens on every stage (qwen3_moe.py:468): with `adapter: none`
    the unapplied qwen3_moe pack's patch must not turn vLLM's native embedding into `embed-last-stage`."""
    target = make_checkpoint("qwen3moe", "Qwen__Qwen3-30B-A3B")
    head = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 2048,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 151936,
    }
    shards = {
        "model.safetensors": {"fc.weight": ("BF16", [2048, 3 * 2048]), "lm_head.weight": ("BF16", [151936, 2048])}
    }
    r, by = check(target, make_checkpoint("head", head, shards=shards), method="eagle3", pp=2, engine_version=version)
    assert "embed-last-stage" not in by, by.get("embed-last-stage")
    assert r.support("target_embed_on_last_stage").status == "native"
