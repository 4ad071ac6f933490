"""DSpark: a parallel block drafter (anchor + noise queries in one pass, then a light sequential
Markov head) reading target taps (vLLM `method: dspark`). Model Runner V2 only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from packaging.version import Version

from ppspec_cli.findings import Code, Finding
from ppspec_cli.knowledge.methods.base import (
    DrafterClass,
    DrafterView,
    TapKey,
    arch_unknown_code,
    contract_code,
    is_int,
)
from ppspec_cli.knowledge.methods.block import WIDTH_CODES, BlockMethod

#: The DSpark keys vLLM's speculators conversion copies to the drafter config when set.
SPECULATORS_KEYS = (
    "draft_vocab_size",
    "target_hidden_size",
    "mask_token_id",
    "markov_rank",
    "markov_head_type",
    "block_size",
    "enable_confidence_head",
    "confidence_head_with_markov",
    "use_aux_hidden_state",
)


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


DRAFT_TOPK = contract_code(
    "dspark-draft-topk",
    "error",
    "`dspark_draft_topk` outside 1..draft vocabulary, or on a drafter whose served class does not take it "
    "(`config/speculative.py`; the classes that do: the packs' `drafter_classes` with `draft_topk`)",
)


@dataclass(frozen=True)
class DSpark(BlockMethod):
    def block_size(self, cfg: Mapping[str, Any]) -> Any:
        """`block_size`, else `dspark_block_size` (the keys vLLM's DSpark default reads)."""
        return cfg.get("dspark_block_size") if cfg.get("block_size") is None else cfg.get("block_size")

    def recognises(self, cfg: Mapping[str, Any], archs: list[str]) -> bool:
        return any("DSpark" in a for a in archs) or "dspark_target_layer_ids" in cfg

    def convert_speculators(self, kind: str, config: Mapping[str, Any], out: dict[str, Any]) -> None:
        """`aux_hidden_state_layer_ids` becomes the top-level list and `target_layer_ids` = ids - 1;
        the DSpark keys are copied, `sample_from_anchor` defaults to false and
        `dspark_bonus_anchor` is its negation."""
        aux = config.get("aux_hidden_state_layer_ids")
        if aux is not None:
            out["eagle_aux_hidden_state_layer_ids"] = aux
            if isinstance(aux, list) and all(is_int(i) for i in aux):
                out["target_layer_ids"] = [i - 1 for i in aux]
        out.update({k: config[k] for k in SPECULATORS_KEYS if config.get(k) is not None})
        anchor = config.get("sample_from_anchor", False)
        out["sample_from_anchor"], out["dspark_bonus_anchor"] = anchor, not anchor

    def speculators_architectures(
        self, kind: str, model_type: Any, declared: Any, classes: tuple[DrafterClass, ...]
    ) -> Any:
        """The declared classes the conversion keeps, else its default class."""
        picks = [(c.name, p) for c in classes for p in c.speculators if p.kind == kind]
        kept = {name for name, _ in picks}
        names = [a for a in declared if isinstance(a, str) and a in kept] if isinstance(declared, list) else []
        default = next((name for name, p in picks if p.default), None)
        return names or ([default] if default else declared)

    def contract(self, view: DrafterView, classes: tuple[DrafterClass, ...]) -> list[Finding]:
        return self.topk_breaches(view, classes) + self.width_breaches(
            view.config, view.version, view.num_speculative_tokens
        )

    def topk_breaches(self, view: DrafterView, classes: tuple[DrafterClass, ...]) -> list[Finding]:
        """config/speculative.py (0.30-0.33): `dspark_draft_topk` must lie in 1..draft vocabulary
        (`draft_vocab_size`, else `vocab_size`) and the served class must take it (`draft_topk`)."""
        cfg = view.config
        topk = cfg.get("dspark_draft_topk")
        if topk is None:
            return []
        dvs = cfg.get("draft_vocab_size") or cfg.get("vocab_size")
        if not (isinstance(topk, (int, float)) and is_int(dvs) and 1 <= topk <= dvs):
            return [
                DRAFT_TOPK.at(
                    "drafter.model",
                    f"the drafter's dspark_draft_topk is {str(topk)[:40]!r}: vLLM refuses at start "
                    f"('dspark_draft_topk must be between 1 and the draft vocabulary size ({dvs})')",
                    fix="set dspark_draft_topk between 1 and the draft vocabulary size, or remove it",
                )
            ]
        takers = [c.name for c in classes if c.method == self.name and c.draft_topk]
        if takers and not set(takers) & set(view.served):
            return [
                DRAFT_TOPK.at(
                    "drafter.model",
                    f"the drafter sets dspark_draft_topk but vLLM serves it as {list(view.served)}: vLLM refuses at "
                    f"start ('dspark_draft_topk is only supported by {_join(takers)}')",
                    fix="remove dspark_draft_topk from the drafter config",
                )
            ]
        return []


DSPARK = DSpark(
    name="dspark",
    title="DSpark",
    v2_speculator="dspark",
    reads_taps=True,
    relay_gated=True,
    parallel_draft=True,  # anchor + noise queries in one pass; the Markov head adds no weight read
    needs_target_embed=True,
    v1_runner=False,
    schedule_on_v1=False,
    n_predict_free_since=Version("0.32.0"),  # its parallel width is independent of MTP stages
    tap_keys=(
        TapKey("dspark_target_layer_ids", 1, "zero-based layer outputs (as is for a deepseek_v41 config)"),
        TapKey("target_layer_ids", 1, "zero-based layer outputs (speculators conversion)"),
    ),
    speculators_kinds=("dspark",),
    class_rule="dspark_class",
    contract_codes=(DRAFT_TOPK, *WIDTH_CODES),
    arch_unknown=arch_unknown_code(
        "dspark"
    ),  # a speculators-format DSpark drafter the loader serves as a missing class
    v1_refusal=Code(
        "dspark-needs-v2",
        ("error",),
        "DSpark exists only in vLLM's Model Runner V2, and this platform runs V1 (the release's V1 unsupported "
        "features name it); vLLM refuses at start.",
        "Run on GPUs with vLLM >= 0.30.",
        section="Drafter and target",
    ),
)
