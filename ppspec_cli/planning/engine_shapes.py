"""vLLM's engine-start shape rules, as `check` findings (vLLM 0.30-0.33, read from vllm/config/model.py,
vllm/model_executor/layers/linear.py and vllm/transformers_utils/model_arch_config_convertor.py):

- attention heads: ModelConfig.verify_with_parallel_config refuses a total number of attention heads
  that the tensor-parallel size does not divide (`heads-tp-indivisible`); zero heads build no layer
  (`heads-zero`);
- KV heads: QKVParallelLinear splits them with vLLM's `divide` (an assertion): with TP at least the
  KV head count, TP must be a multiple of it (each KV head replicated TP/KV times); below it, TP must
  divide it (`kv-heads-tp-indivisible`, `kv-heads-zero`);
- max-model-len: the smallest of the config's length keys (max_position_embeddings, n_positions,
  max_seq_len, seq_length, model_max_length, max_target_positions, max_sequence_length,
  max_seq_length, seq_len; model_max_length wins when set), times the RoPE scaling factor of the
  rope types vLLM scales; a larger `engine: max-model-len` is refused at start unless
  the profile's `env:` sets VLLM_ALLOW_LONG_MAX_MODEL_LEN (`max-model-len-too-large`); anything but a positive length
  or -1 (auto-fit) is refused (`max-model-len-invalid`).

Unknown facts (no head count in the config, a RoPE layout this rule does not model, a length written
with a suffix) give no finding: ppspec never guesses a model fact.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

from ppspec_cli.findings import Finding
from ppspec_cli.findings.codes import (
    HEADS_TP_INDIVISIBLE,
    HEADS_ZERO,
    KV_HEADS_TP_INDIVISIBLE,
    KV_HEADS_ZERO,
    MAX_MODEL_LEN_INVALID,
    MAX_MODEL_LEN_TOO_LARGE,
)
from ppspec_cli.planning.engine_options import EngineOptions

LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
#: RoPE types whose `factor` vLLM does not apply again (the length keys are already scaled).
_UNSCALED_ROPE = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def derived_max_len(text: Mapping[str, Any], model_type: str | None) -> float | None:
    """vLLM's derived max_model_len of a (text) config, or None when this rule cannot tell."""
    derived = float("inf")
    for k in LENGTH_KEYS:
        v = text.get(k)
        if v is None:
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return None
        derived = min(derived, v)
    mml = text.get("model_max_length")
    if isinstance(mml, (int, float)) and not isinstance(mml, bool) and mml:
        derived = mml
    if derived == float("inf"):
        return None
    rope = text.get("rope_parameters", text.get("rope_scaling"))
    if rope and "gemma3" not in str(model_type or ""):
        params = (
            list(rope.values())
            if isinstance(rope, dict) and all(isinstance(v, dict) for v in rope.values()) and "rope_type" not in rope
            else [rope]
        )
        factor: Any = 1.0
        for rp in params:
            if not isinstance(rp, dict):
                return None
            rt = rp.get("rope_type", rp.get("type"))
            if not isinstance(rt, str):
                return None
            if rt not in _UNSCALED_ROPE:
                factor = rp.get("factor", factor)
        if factor is None:
            factor = 1.0
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            return None
        derived *= factor
    return derived


def _max_model_len(options: EngineOptions) -> tuple[str, Any] | None:
    for e in options.entries:
        if e.option.flag == "max-model-len" and not e.option.subkeys:
            return e.option.key, e.value
    return None


def _truthy_env(v: Any) -> bool:
    return isinstance(v, str) and v.strip().lower() in ("1", "true", "yes")


def shape_findings(
    text: Mapping[str, Any] | None,
    model_type: str | None,
    tp: int,
    options: EngineOptions,
    env: Mapping[str, str],
) -> Iterator[Finding]:
    """The findings above for a target's text config, the TP size, the engine options (read once)
    and the profile's `env:` (the caller's shell is the `here` question's, never this one's)."""
    text = text or {}
    heads = _int(text.get("num_attention_heads"))
    kv = _int(text.get("num_key_value_heads"))
    if kv is None and heads is not None and "num_key_value_heads" not in text:
        kv = heads  # vLLM: no KV head count means one per attention head
    if heads is not None:
        if heads <= 0:
            yield HEADS_ZERO.at(
                "target.model",
                f"the target's config has num_attention_heads={heads}: vLLM builds no attention layer from it",
            )
        elif tp > 0 and heads % tp:
            yield HEADS_TP_INDIVISIBLE.at(
                "topology.tensor_parallel",
                f"tensor_parallel {tp} does not divide the target's {heads} attention heads: vLLM refuses it at "
                "start (verify_with_parallel_config)",
                fix=f"use a tensor_parallel that divides {heads}",
            )
    if kv is not None:
        if kv <= 0:
            yield KV_HEADS_ZERO.at(
                "target.model", f"the target's config has num_key_value_heads={kv}: vLLM cannot split it"
            )
        elif tp > 0 and (tp % kv if tp >= kv else kv % tp):
            yield KV_HEADS_TP_INDIVISIBLE.at(
                "topology.tensor_parallel",
                f"tensor_parallel {tp} and the target's {kv} KV heads: vLLM needs "
                + (
                    f"TP a multiple of the KV heads (each replicated TP/{kv} times)"
                    if tp >= kv
                    else f"TP to divide the {kv} KV heads"
                )
                + " and stops at start (QKVParallelLinear)",
                fix="use a tensor_parallel that divides the KV head count, or a multiple of it",
            )
    got = _max_model_len(options)
    if got is None:
        return
    key, raw = got
    v = _int(raw)
    if v is None and isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        v = int(raw)
    if v is None:
        if (
            isinstance(raw, (bool, float))
            or raw is None
            or (isinstance(raw, str) and not re.fullmatch(r"\s*-?\d+(\.\d+)?\s*[kKmMgG]?\s*|\s*auto\s*", raw))
        ):
            yield MAX_MODEL_LEN_INVALID.at(
                f"engine.{key[:80]}", f"engine.{key[:80]}={str(raw)[:40]!r} is not a length: vLLM refuses it"
            )
        return
    if v == -1:
        return
    if v <= 0:
        yield MAX_MODEL_LEN_INVALID.at(
            f"engine.{key[:80]}", f"engine.{key[:80]}={v}: a context length must be positive (or -1 to fit the memory)"
        )
        return
    derived = derived_max_len(text, model_type)
    allowed = _truthy_env(env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"))
    if derived is not None and v > derived and not allowed:
        yield MAX_MODEL_LEN_TOO_LARGE.at(
            f"engine.{key[:80]}",
            f"engine.{key[:80]}={v} is larger than the {derived:g} tokens the target's config allows: vLLM refuses "
            "it at start",
            fix=f"use at most {derived:g} (or, if you know the model extrapolates, set "
            'VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1" '
            "in the profile's `env:`, where every node gets it)",
        )
