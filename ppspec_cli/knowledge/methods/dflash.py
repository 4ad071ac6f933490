"""DFlash: a parallel block drafter reading target taps (vLLM `method: dflash`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from packaging.version import Version

from ppspec_cli.findings import Finding
from ppspec_cli.knowledge.methods.base import (
    DrafterClass,
    DrafterView,
    TapKey,
    arch_unknown_code,
    declared_architectures,
    is_int,
)
from ppspec_cli.knowledge.methods.block import WIDTH_CODES, BlockMethod, nested

#: The class vLLM's speculators conversion serves each DFlash speculators kind as (speculators/algos.py).
SPECULATORS_CLASS = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}


@dataclass(frozen=True)
class DFlash(BlockMethod):
    def block_size(self, cfg: Mapping[str, Any]) -> Any:
        """`dflash_config.block_size`, else the top-level `block_size`."""
        b = nested(cfg, "dflash_config", "block_size")
        return cfg.get("block_size") if b is None else b

    def recognises(self, cfg: Mapping[str, Any], archs: list[str]) -> bool:
        return any("DFlash" in a for a in archs) or isinstance(cfg.get("dflash_config"), dict)

    def convert_speculators(self, kind: str, config: Mapping[str, Any], out: dict[str, Any]) -> None:
        """`aux_hidden_state_layer_ids` becomes the top-level list and `dflash_config.target_layer_ids`
        = ids - 1; `dflash_config` also gets `mask_token_id`, `sample_from_anchor` (default false)
        and `causal`."""
        aux = config.get("aux_hidden_state_layer_ids")
        lowered = None
        if aux is not None:
            out["eagle_aux_hidden_state_layer_ids"] = aux
            if isinstance(aux, list) and all(is_int(i) for i in aux):
                lowered = [i - 1 for i in aux]
        dc: dict[str, Any] = {} if lowered is None else {"target_layer_ids": lowered}
        if "mask_token_id" in config:
            dc["mask_token_id"] = config["mask_token_id"]
        dc["sample_from_anchor"] = config.get("sample_from_anchor", False)
        dc["causal"] = not config.get("sliding_window_non_causal", True)
        out["dflash_config"] = dc

    def speculators_architectures(
        self, kind: str, model_type: Any, declared: Any, classes: tuple[DrafterClass, ...]
    ) -> Any:
        return [SPECULATORS_CLASS[kind]]

    def served_architectures(
        self, cfg: Mapping[str, Any], version: Version, target_model_type: str | None, classes: tuple[DrafterClass, ...]
    ) -> list[str]:
        """EAGLEConfig renames a DFlash drafter `DFlash{arch}` unless the name already starts or ends
        with DFlash or is a class vLLM keeps by name (`keeps_name`); speculators drafters keep theirs."""
        archs = declared_architectures(cfg)
        if "speculators_model_type" in cfg:
            return archs
        kept = {c.name for c in classes if c.method == self.name and c.keeps_name and c.known_in(version)}
        return [a if a.startswith("DFlash") or a.endswith("DFlash") or a in kept else f"DFlash{a}" for a in archs]

    def contract(self, view: DrafterView, classes: tuple[DrafterClass, ...]) -> list[Finding]:
        """Whether vLLM's registry has the class it builds is the release table's
        (planning/drafter_load.py, `dflash-arch-unknown`); the method's own contract is the width."""
        return self.width_breaches(view.config, view.version, view.num_speculative_tokens)


DFLASH = DFlash(
    name="dflash",
    title="DFlash",
    v2_speculator="dflash",
    reads_taps=True,
    relay_gated=True,
    parallel_draft=True,  # the bonus token + one mask query per draft token, in one pass
    needs_target_embed=True,
    block_holds_bonus=True,
    tap_keys=(
        TapKey("dflash_config.target_layer_ids", 1, "zero-based layer outputs"),
        TapKey("eagle_aux_hidden_state_layer_ids", 0, "capture points (speculators conversion)"),
    ),
    speculators_kinds=("dflash", "dflash2"),
    contract_codes=WIDTH_CODES,
    arch_unknown=arch_unknown_code("dflash"),
)
