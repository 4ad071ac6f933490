"""minimax_m2: opt MiniMaxM2Model in to relaying EAGLE3-family taps over pipeline parallelism.

vLLM 0.32's MiniMaxM2Model.forward never sends taps downstream (a non-last stage returns only
hidden_states/residual), numbers a stage's taps from its *local* layer index (so every stage after
the first captures the wrong layers), and builds embed_tokens on the first stage only. Its layer
loop is the standard one, so this pack installs ppspec's relaying forward for standard decoders
(ppspec_cli.running.engine.relay.relayed_forward, vLLM's convention with global layer indices), opts the
class in where that forward runs, and builds a real embed_tokens on the last stage when the drafter
needs the target's.

Loaded by file path by the ppspec plugin; never imported as part of a package.
"""

from __future__ import annotations

from ppspec_cli.running.engine import relay
from ppspec_cli.running.engine.patching import Patch

MODULE = "vllm.model_executor.models.minimax_m2"
CLASS = "MiniMaxM2Model"


def get_patches() -> list[Patch]:
    return relay.standard_relay_patches(MODULE, CLASS)
