"""EAGLE-1: one drafter pass per speculative token on the target's last hidden state, no taps
(vLLM `method: eagle`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ppspec_cli.knowledge.methods.base import SpecMethod, arch_unknown_code


@dataclass(frozen=True)
class Eagle(SpecMethod):
    def vllm_names(self, arch: str) -> list[str]:
        """EAGLEConfig names an EAGLE-1 drafter `Eagle{arch}` unless it already starts with Eagle."""
        return [arch] if arch.startswith("Eagle") else [arch, f"Eagle{arch}"]

    def recognises(self, cfg: Mapping[str, Any], archs: list[str]) -> bool:
        return any(a.startswith("Eagle") for a in archs)


#: Every EAGLE-1 drafter class in vLLM 0.30-0.33 numbers its layers from the last stage's PP-local
#: layer count (a drafter pack may make them global: eagle_global_layer_ids).
EAGLE = Eagle(
    name="eagle",
    title="EAGLE-1",
    v2_speculator="eagle",
    needs_target_embed=True,
    numbering="pp-local",
    hidden_size_keys=("target_hidden_size", "hidden_size"),
    arch_unknown=arch_unknown_code("eagle"),
)
