"""qwen3_moe: opt Qwen3MoeModel in to relaying EAGLE3-family taps over pipeline parallelism.

vLLM 0.32's Qwen3MoeModel.forward collects taps but never sends them downstream (a non-last stage
returns only hidden_states/residual) and captures the stage's start tap on every stage, so a tap on
a boundary would be taken twice. Its layer loop is the standard one, so this pack installs
ppspec's relaying forward for standard decoders (ppspec_cli.running.engine.relay.relayed_forward, vLLM's
convention exactly), opts the class in where that forward runs, and makes sure the last stage has
a real embed_tokens when the drafter needs it (0.32 builds it on every stage already; the wrapper
only acts if a later version stops doing so).

Loaded by file path by the ppspec plugin; never imported as part of a package.
"""

from __future__ import annotations

from ppspec_cli.running.engine import relay
from ppspec_cli.running.engine.patching import Patch

MODULE = "vllm.model_executor.models.qwen3_moe"
CLASS = "Qwen3MoeModel"


def get_patches() -> list[Patch]:
    return relay.standard_relay_patches(MODULE, CLASS)
