"""MTP: the target's own multi-token-prediction layers draft (vLLM `method: mtp`; model-specific
aliases are rewritten to it). No drafter checkpoint, no taps; one pass per speculative token."""

from __future__ import annotations

from ppspec_cli.findings import Code
from ppspec_cli.knowledge.methods.base import SpecMethod

#: How many MTP layers a target has is a family fact (its pack's `mtp_layers`); under PP a family
#: may build the target embedding on the last stage for it (capability target_embed_for_mtp).
MTP = SpecMethod(
    name="mtp",
    title="MTP",
    v2_speculator="mtp",
    external_drafter=False,
    target_embed_capability="target_embed_for_mtp",
    no_layers=Code(
        "mtp-no-layers",
        ("error",),
        "`method: mtp` but the target's config declares no MTP layers.",
        "Use a target with MTP heads, or an external drafter.",
        section="Drafter and target",
    ),
    family_refusal=Code(
        "mtp-refused",
        ("error",),
        "vLLM refuses `mtp` for the target's model_type and names the method to use instead (a family whose "
        "checkpoints ship another kind of drafter under `mtp.*`).",
        "Set `drafter.method` to the method vLLM names.",
        section="Drafter and target",
    ),
    k_not_multiple=Code(
        "mtp-k-not-multiple",
        ("error",),
        "`num_speculative_tokens` is above the n_predict vLLM's MTP rewrite sets for the target and not a multiple of "
        "it; vLLM refuses at start.",
        "Use `num_speculative_tokens` at most n_predict, or a multiple of it.",
        section="Drafter and target",
    ),
)
