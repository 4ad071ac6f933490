"""deepseek_v4_dspark's contract rule: a standalone DSpark checkpoint that vLLM serves as
DeepSeek-V4's in-target drafter. Gets a DrafterView; loaded by file path; must not import vLLM."""

from __future__ import annotations

from typing import Any, Iterator

from ppspec_cli.findings import Finding
from ppspec_cli.knowledge.methods import DrafterView
from ppspec_cli.knowledge.methods.base import contract_code

DSPARK_SERVED_AS_DEEPSEEK_V4 = contract_code(
    "dspark-served-as-deepseek-v4",
    "warning",
    "a DSpark architecture the release does not keep is served as DeepSeek-V4's in-target `DSparkDraftModel` "
    "(the table's `dspark_class` rule: 0.30-0.33 keep a list in `config/speculative.py`, 0.33 adding "
    "MuseSparkDSparkModel; 0.34 keeps a class that declares its speculator, `dspark/config.py`)",
)

#: The codes these rules report (registered as the pack's when this file loads).
CODES = (DSPARK_SERVED_AS_DEEPSEEK_V4,)


def served_as_in_target_drafter(v: DrafterView) -> Iterator[Finding]:
    served, declared = list(v.served), list(v.declared)
    if served != declared and served[0].startswith("DSpark") and any("DSpark" in a for a in declared):
        yield DSPARK_SERVED_AS_DEEPSEEK_V4.at(
            "drafter.model",
            f"vLLM {v.version} does not keep the drafter's architecture {declared}: it serves it as {served[0]} "
            "(DeepSeek-V4's drafter, weights from the target checkpoint, the target's quantization)",
            fix="use a drafter whose config names Qwen3DSparkModel (or another DSpark class this vLLM keeps), or a "
            "vLLM release that knows its class",
        )


def get_rules() -> list[tuple[str, Any]]:
    return [("served-as-in-target-drafter", served_as_in_target_drafter)]
