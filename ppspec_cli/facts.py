"""Facts about vLLM releases that ppspec mirrors (read off the vLLM 0.30-0.33 sources).

Kept as data so a reader can audit them in one place; tests/test_vllm_mirror.py checks the ones the
installed vLLM can answer (opt-in flags, partition, tap resolution) against vLLM itself.
"""

from __future__ import annotations

from dataclasses import dataclass

#: First vLLM release with PR #50514 (EAGLE3-family drafters under pipeline parallelism, V2 runner).
PP_SPEC_MIN_VERSION = (0, 30, 0)

#: vLLM's speculative method values (model-specific MTP aliases are rewritten to `mtp`).
VLLM_METHODS = frozenset(
    {"ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3", "extract_hidden_states", "dflash", "ngram_gpu", "dspark", "mtp"}
)

#: Methods whose target must relay taps over PP (vLLM gates these in
#: eagle3_utils.verify_supports_aux_hidden_states_over_pp). `mtp` and `eagle` are not gated.
AUX_METHODS = frozenset({"eagle3", "dflash", "dspark", "extract_hidden_states"})

#: Methods for which the last stage builds the target's embedding under PP (spec_decode_needs_target_embed).
TARGET_EMBED_METHODS = frozenset({"eagle", "eagle3", "dflash", "dspark"})


@dataclass(frozen=True)
class TargetFamily:
    """A target architecture: its inner decoder class and since when (if ever) it opts in to
    relaying taps over PP on NVIDIA (`supports_aux_hidden_states_over_pp = True`)."""

    inner_decoder: str
    opted_in_since: tuple[int, int, int] | None
    note: str = ""


TARGET_FAMILIES: dict[str, TargetFamily] = {
    "LlamaForCausalLM": TargetFamily("LlamaModel", (0, 30, 0)),
    "MistralForCausalLM": TargetFamily("LlamaModel", (0, 30, 0)),
    "Qwen2ForCausalLM": TargetFamily("Qwen2Model", (0, 30, 0)),
    "Qwen3ForCausalLM": TargetFamily("Qwen3Model", (0, 30, 0), "Qwen3Model inherits Qwen2Model's opt-in"),
    "MiMoForCausalLM": TargetFamily("MiMoModel", None, "MiMo overrides Qwen2Model's opt-in to False"),
    "DeepseekV4ForCausalLM": TargetFamily("DeepseekV4Model", (0, 30, 0), "NVIDIA implementation only"),
    "KimiLinearForCausalLM": TargetFamily("KimiLinearModel", (0, 30, 0), "NVIDIA implementation only; ROCm does not opt in"),
    "KimiK3ForConditionalGeneration": TargetFamily("KimiLinearModel", (0, 30, 0), "multimodal: text model under text_config; NVIDIA only"),
    "SarvamMLAForCausalLM": TargetFamily("SarvamMLAModel", (0, 32, 0)),
    "MiniMaxM3SparseForCausalLM": TargetFamily("MiniMaxM3Model", (0, 32, 0), "NVIDIA implementation only"),
    "MiniMaxM3SparseForConditionalGeneration": TargetFamily("MiniMaxM3Model", (0, 32, 0), "NVIDIA implementation only"),
    # Not opted in: candidates for a ppspec pack.
    "Qwen3MoeForCausalLM": TargetFamily("Qwen3MoeModel", None),
    "Qwen3NextForCausalLM": TargetFamily("Qwen3NextModel", None),
    "MiniMaxM2ForCausalLM": TargetFamily("MiniMaxM2Model", None),
    "DeepseekV2ForCausalLM": TargetFamily("DeepseekV2Model", None),
    "DeepseekV3ForCausalLM": TargetFamily("DeepseekV2Model", None, "DeepSeek-V3 and Kimi-K2 use the DeepseekV2Model family"),
    "KimiK25ForConditionalGeneration": TargetFamily("DeepseekV2Model", None, "Kimi-K2.5: DeepseekV2Model text model"),
    "GptOssForCausalLM": TargetFamily("GptOssModel", None),
}

#: EAGLE-1 drafters that still number draft layers from the PP-local layer count (vLLM 0.33).
PP_LOCAL_NUMBERING_DRAFTERS = frozenset(
    {
        "EagleCohereForCausalLM",
        "EagleLlamaForCausalLM",
        "EagleDeepSeekMTPModel",
        "EagleMistralForCausalLM",
        "EagleMistralLarge3ForCausalLM",
        "EagleLlama4ForCausalLM",
        "EagleMiniCPMForCausalLM",
        "Qwen3XpressForCausalLM",
    }
)

#: Engine options vLLM refuses together with PP (or mishandles), keyed by the `engine:` flag name.
PP_REFUSED_ENGINE_FLAGS = {
    "enable-return-routed-experts": "vLLM refuses returning routed experts with pipeline parallelism",
}


#: Targets whose MTP layer count vLLM fixes itself, whatever the config says (vLLM 0.32
#: config/speculative.py: MiMo-V2 serves its first MTP layer only; dots3_note defaults to 1).
MTP_FIXED_LAYERS_BY_ARCH = {"MiMoV2ForCausalLM": 1, "MiMoV2OmniForCausalLM": 1, "MiMoV2FlashForCausalLM": 1}
MTP_DEFAULT_LAYERS_BY_MODEL_TYPE = {"dots3_note": 1}


#: No real target has more MTP layers than this; a larger value is a corrupt or hostile config.
MAX_MTP_LAYERS = 64


def mtp_layer_count(text_config: dict, architectures: list[str], model_type: str | None) -> int | None:
    """How many MTP layers vLLM's `mtp` method will find in a target (None: the config has none).

    vLLM reads `num_nextn_predict_layers` (from the text config of multimodal targets), and
    `mtp_num_hidden_layers` for the Qwen MTP family."""
    arch = architectures[0] if architectures else None
    if arch in MTP_FIXED_LAYERS_BY_ARCH:
        return MTP_FIXED_LAYERS_BY_ARCH[arch]
    for key in ("mtp_num_hidden_layers", "num_nextn_predict_layers"):
        v = text_config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v if v <= MAX_MTP_LAYERS else None  # beyond any real model: unknown, never planned with
    return MTP_DEFAULT_LAYERS_BY_MODEL_TYPE.get(model_type or "")


def parse_version(v: str) -> tuple[int, int, int] | None:
    """'0.32.0+cpu' -> (0, 32, 0). None if it does not start with X.Y."""
    import re

    m = re.match(r"^(\d+)\.(\d+)(?:\.(\d+))?", v or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def method_of_drafter_config(cfg: dict) -> str | None:
    """The speculative method a drafter checkpoint was built for, when its config says so."""
    raw = cfg.get("architectures")
    archs = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
    # Speculators format: vLLM serves `speculators_model_type` (peagle as eagle3, dflash2 as dflash).
    aliases = {"peagle": "eagle3", "dflash2": "dflash"}
    if isinstance(cfg.get("speculators_model_type"), str):
        return aliases.get(cfg["speculators_model_type"], cfg["speculators_model_type"])
    spec = cfg.get("speculators_config")
    if isinstance(spec, dict) and isinstance(spec.get("algorithm"), str):
        return aliases.get(spec["algorithm"], spec["algorithm"])
    if any("DSpark" in a for a in archs) or "dspark_target_layer_ids" in cfg:
        return "dspark"
    if any("DFlash" in a for a in archs) or isinstance(cfg.get("dflash_config"), dict):
        return "dflash"
    if any("Eagle3" in a or "Peagle" in a or a == "PEagleDraftModel" for a in archs):
        return "eagle3"
    if any(a.startswith("Eagle") for a in archs):
        return "eagle"
    if isinstance(cfg.get("eagle_config"), dict) and cfg["eagle_config"].get("use_aux_hidden_state", True) and (
        "eagle_aux_hidden_state_layer_ids" in cfg["eagle_config"]
    ):
        return "eagle3"
    return None
