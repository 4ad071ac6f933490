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
