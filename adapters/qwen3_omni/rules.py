"""qwen3_omni's contract rule: config/speculative.py::_validate_qwen3_omni_dspark (the same in
vLLM 0.30-0.33), which vLLM applies to every DSpark drafter of a Qwen3-Omni target.

Gets a DrafterView; loaded by file path; must not import vLLM or torch."""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from ppspec_cli.findings import Finding
from ppspec_cli.knowledge.methods import DrafterView, declared_architectures, is_int
from ppspec_cli.knowledge.methods.base import contract_code
from ppspec_cli.knowledge.methods.block import MASK_TOKEN_KEYS, nested, positive

DSPARK_OMNI_CONTRACT = contract_code(
    "dspark-omni-contract",
    "error",
    "a DSpark drafter of a Qwen3-Omni target: `Qwen3OmniDSparkModel`, `block_size` = `num_speculative_tokens` (field "
    "`drafter.num_speculative_tokens`), the thinker's hidden size, heads and head_dim, sorted zero-based "
    "`target_layer_ids` within its depth, `use_aux_hidden_state: true`, a positive `markov_rank`, `markov_head_type: "
    "vanilla`, `sample_from_anchor: true`, the noise token in the input vocabulary, no `mrope_section` "
    "(`config/speculative.py::_validate_qwen3_omni_dspark`)",
)

#: The codes these rules report (registered as the pack's when this file loads).
CODES = (DSPARK_OMNI_CONTRACT,)


#: Targets vLLM holds to the Qwen3-Omni DSpark contract (config/speculative.py::_is_qwen3_omni_target).
OMNI_TARGET_MODEL_TYPE = "qwen3_omni_moe"
OMNI_TARGET_ARCHS = frozenset({"Qwen3OmniMoeForConditionalGeneration", "Qwen3OmniMoeThinkerForConditionalGeneration"})
OMNI_DRAFTER_ARCH = "Qwen3OmniDSparkModel"


def _dspark_value(cfg: Mapping[str, Any], name: str) -> Any:
    """`dflash_config`, then `eagle_config`, then the top level: the first non-null wins."""
    for v in (nested(cfg, "dflash_config", name), nested(cfg, "eagle_config", name), cfg.get(name)):
        if v is not None:
            return v
    return None


def is_omni_target(target_config: Mapping[str, Any]) -> bool:
    archs = target_config.get("architectures")
    return target_config.get("model_type") == OMNI_TARGET_MODEL_TYPE or bool(
        isinstance(archs, list) and OMNI_TARGET_ARCHS & {a for a in archs if isinstance(a, str)}
    )


def omni_breaches(
    target_config: Mapping[str, Any],
    target_text: Mapping[str, Any],
    cfg: Mapping[str, Any],
    served: list[str],
    num_speculative_tokens: int,
) -> list[tuple[str, str]]:
    """For a DSpark drafter of a Qwen3-Omni target: (profile field, what breaks it, in vLLM's words
    where it refuses) in the order vLLM checks them; vLLM stops at the first. `target_text` is the
    thinker's text config (`thinker_config.text_config`), else the target's text config."""
    if not is_omni_target(target_config):
        return []
    return [
        *_checkpoint_and_block(cfg, served, num_speculative_tokens),
        *_thinker_shapes(target_text, cfg),
        *_taps(target_text, cfg),
        *_head(cfg),
        *_vocabulary(target_text, cfg),
    ]


MODEL = "drafter.model"


def _checkpoint_and_block(
    cfg: Mapping[str, Any], served: list[str], num_speculative_tokens: int
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    declared = declared_architectures(cfg)
    if OMNI_DRAFTER_ARCH not in served and OMNI_DRAFTER_ARCH not in declared:
        out.append(
            (
                MODEL,
                "Qwen3-Omni DSpark requires a standalone draft checkpoint with "
                f"architectures=['{OMNI_DRAFTER_ARCH}'] (the drafter names {declared}); generic Qwen3DSparkModel "
                "checkpoints must be converted first",
            )
        )
    block = _dspark_value(cfg, "block_size")
    if block is None:
        block = _dspark_value(cfg, "dspark_block_size")
    if not positive(block):
        out.append(
            (
                MODEL,
                "Qwen3-Omni DSpark requires a positive integer block_size in the draft config (it is "
                f"{str(block)[:40]!r})",
            )
        )
    elif num_speculative_tokens != block:
        out.append(
            (
                "drafter.num_speculative_tokens",
                f"Qwen3-Omni DSpark requires num_speculative_tokens to match the trained block_size ({block}); got "
                f"{num_speculative_tokens}",
            )
        )
    return out


def _thinker_shapes(target_text: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Keys the config classes default (hidden sizes, heads, head_dim) are compared only where both
    configs state them: a missing one is not known here."""
    out: list[tuple[str, str]] = []
    hidden = target_text.get("hidden_size")
    if hidden is not None and cfg.get("target_hidden_size") != hidden:
        out.append(
            (
                MODEL,
                f"Qwen3-Omni DSpark draft target_hidden_size must match the target text hidden size ({hidden}); got "
                f"{cfg.get('target_hidden_size')}",
            )
        )
    if hidden is not None and "hidden_size" in cfg and cfg["hidden_size"] != hidden:
        out.append(
            (
                MODEL,
                f"Qwen3-Omni DSpark draft hidden_size must match the target thinker hidden size ({hidden}); got "
                f"{cfg['hidden_size']}",
            )
        )
    for name in ("num_attention_heads", "num_key_value_heads", "head_dim"):
        t = target_text.get(name)
        if name in target_text and not positive(t):
            out.append(
                (
                    "target.model",
                    f"Qwen3-Omni DSpark requires a positive integer {name} in the target thinker text_config; got "
                    f"{str(t)[:40]}",
                )
            )
        elif t is not None and name in cfg and cfg[name] != t:
            out.append(
                (
                    MODEL,
                    f"Qwen3-Omni DSpark draft {name} must match the target thinker value ({t}); got "
                    f"{str(cfg[name])[:40]}",
                )
            )
    return out


def _taps(target_text: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    ids = nested(cfg, "dflash_config", "target_layer_ids")
    for key in ("dspark_target_layer_ids", "target_layer_ids"):
        ids = cfg.get(key) if ids is None else ids
    n = target_text.get("num_hidden_layers")
    if not isinstance(ids, list) or not ids:
        return [(MODEL, "Qwen3-Omni DSpark requires a non-empty target_layer_ids list in the draft config")]
    if not all(is_int(i) for i in ids):
        return [(MODEL, "Qwen3-Omni DSpark target_layer_ids must contain only integers")]
    if ids != sorted(set(ids)):
        return [(MODEL, f"Qwen3-Omni DSpark target_layer_ids must be unique and strictly increasing (got {ids[:16]})")]
    if is_int(n) and (ids[0] < 0 or ids[-1] >= n):
        return [
            (
                MODEL,
                f"Qwen3-Omni DSpark target_layer_ids must be zero-based text-layer indices in [0, {n - 1}]; got "
                f"{ids[:16]}",
            )
        ]
    return []


def _head(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if _dspark_value(cfg, "use_aux_hidden_state") is not True:
        out.append(
            (
                MODEL,
                "Qwen3-Omni DSpark requires use_aux_hidden_state=true because Omni conditioning is supplied through "
                "thinker hidden states",
            )
        )
    if not positive(cfg.get("markov_rank")):
        out.append((MODEL, "Qwen3-Omni DSpark requires a positive integer markov_rank in the draft config"))
    if cfg.get("markov_head_type") != "vanilla":
        out.append(
            (
                MODEL,
                "Qwen3-Omni DSpark currently requires markov_head_type='vanilla'; got "
                f"{str(cfg.get('markov_head_type'))[:40]!r}",
            )
        )
    if cfg.get("sample_from_anchor", True) is not True or cfg.get("dspark_bonus_anchor", False) is not False:
        out.append((MODEL, "Qwen3-Omni DSpark requires sample_from_anchor=true and dspark_bonus_anchor=false"))
    return out


def _vocabulary(target_text: Mapping[str, Any], cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    vocab, target_vocab = cfg.get("vocab_size"), target_text.get("vocab_size")
    if vocab is None:
        return []
    if not positive(vocab):
        return [(MODEL, f"Qwen3-Omni DSpark input vocab_size must be a positive integer; got {str(vocab)[:40]}")]
    out: list[tuple[str, str]] = []
    dvs = cfg.get("draft_vocab_size") if cfg.get("draft_vocab_size") is not None else vocab
    if not positive(dvs) or (is_int(target_vocab) and dvs > target_vocab):
        out.append(
            (
                MODEL,
                "Qwen3-Omni DSpark draft_vocab_size must be a positive integer no larger than target vocab_size "
                f"({target_vocab}); got {str(dvs)[:40]}",
            )
        )
    token = nested(cfg, "dflash_config", "mask_token_id")
    for key in MASK_TOKEN_KEYS[1:]:
        token = cfg.get(key) if token is None else token
    if not (is_int(token) and 0 <= token < vocab):
        out.append(
            (
                MODEL,
                "Qwen3-Omni DSpark requires a valid mask/noise token id within the draft input vocabulary [0, "
                f"{vocab - 1}] (got {str(token)[:40]})",
            )
        )
    ropes = [r for r in (cfg.get("rope_parameters"), cfg.get("rope_scaling")) if isinstance(r, dict)]
    if cfg.get("mrope_section") is not None or any("mrope_section" in r for r in ropes):
        out.append(
            (MODEL, "Qwen3-Omni DSpark draft checkpoints must use logical 1-D RoPE and must not define mrope_section")
        )
    return out


def omni_contract(v: DrafterView) -> Iterator[Finding]:
    thinker = nested(v.target_config, "thinker_config", "text_config")
    text = thinker if isinstance(thinker, dict) else v.target_text
    for field, why in omni_breaches(v.target_config, text, v.config, list(v.served), v.num_speculative_tokens):
        yield DSPARK_OMNI_CONTRACT.at(
            field,
            f"{why}: vLLM refuses at start",
            fix="convert the drafter for Qwen3-Omni (its trained block size, the thinker's shapes and taps), or set "
            "the field as the message says",
        )


def get_rules() -> list[tuple[str, Any]]:
    return [("omni-dspark-contract", omni_contract)]
