"""EAGLE3 (and P-EAGLE, which vLLM serves as eagle3): one drafter pass per speculative token,
reading target taps (vLLM `method: eagle3`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from packaging.version import Version

from ppspec_cli.knowledge.methods.base import (
    DrafterClass,
    SpecMethod,
    TapKey,
    arch_unknown_code,
)

#: Since 0.33.0 an EAGLE3 drafter whose `eagle_config.use_aux_hidden_state` is false uses no aux
#: hidden states: no taps, nothing relayed, and the target's opt-in check is not run. 0.30-0.32
#: tap every eagle3 drafter.
AUX_OPT_OUT_SINCE = Version("0.33.0")


@dataclass(frozen=True)
class Eagle3(SpecMethod):
    def uses_taps(self, cfg: Mapping[str, Any] | None, version: Version | None) -> bool:
        """0.33 reads `eagle_config.use_aux_hidden_state: false` as "no taps"; earlier releases tap
        every EAGLE3 drafter."""
        if version is None or version >= AUX_OPT_OUT_SINCE:
            ec = (cfg or {}).get("eagle_config")
            if isinstance(ec, dict) and ec.get("use_aux_hidden_state") is False:
                return False
        return True

    def vllm_names(self, arch: str) -> list[str]:
        """EAGLEConfig names an EAGLE3 drafter `Eagle3{arch}` unless it already says Eagle3."""
        return [arch] if arch.startswith("Eagle3") or arch.endswith("Eagle3") else [arch, f"Eagle3{arch}"]

    def recognises(self, cfg: Mapping[str, Any], archs: list[str]) -> bool:
        return any("Eagle3" in a or "Peagle" in a or a == "PEagleDraftModel" for a in archs)

    def recognises_by_nested_keys(self, cfg: Mapping[str, Any]) -> bool:
        """An `eagle_config` that uses aux hidden states and names their layers."""
        ec = cfg.get("eagle_config")
        return (
            isinstance(ec, dict)
            and bool(ec.get("use_aux_hidden_state", True))
            and "eagle_aux_hidden_state_layer_ids" in ec
        )

    def convert_speculators(self, kind: str, config: Mapping[str, Any], out: dict[str, Any]) -> None:
        """`eagle_aux_hidden_state_layer_ids` (when non-empty) stays a top-level, capture-point
        list; P-EAGLE's `mask_token_id` becomes `pard_token`."""
        if config.get("eagle_aux_hidden_state_layer_ids"):
            out["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]
        if kind == "peagle" and "mask_token_id" in config:
            out["pard_token"] = config["mask_token_id"]

    def speculators_architectures(
        self, kind: str, model_type: Any, declared: Any, classes: tuple[DrafterClass, ...]
    ) -> Any:
        """The class a pack names for this kind and the layer config's model_type."""
        for c in classes:
            if any(p.kind == kind and p.model_type is not None and p.model_type == model_type for p in c.speculators):
                return [c.name]
        return declared


EAGLE3 = Eagle3(
    name="eagle3",
    title="EAGLE3",
    v2_speculator="eagle",
    reads_taps=True,
    relay_gated=True,
    needs_target_embed=True,
    hidden_size_keys=("target_hidden_size", "hidden_size"),
    tap_keys=(
        TapKey("eagle_aux_hidden_state_layer_ids", 0, "capture points"),
        TapKey(
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            1,
            "SGLang/SpecForge layer outputs: the V1 runner reads them as is, V2 not at all",
        ),
    ),
    speculators_kinds=("eagle3", "peagle"),
    arch_unknown=arch_unknown_code("eagle3"),
)
