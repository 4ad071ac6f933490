"""ppspec's test and validation kit: seeded models only the tests and benchmarks use.

Not part of the wheel (pyproject's wheel target packages ppspec_cli only): it lives in the repo
next to ppspec_cli and sits on top of ppspec_cli.demo. Importing it registers its models with the
demo catalogue (``ppspec_cli.demo.factory.register_model``), so ``demo:<name>`` resolves to them
like to the built-in ones; the factory imports this package by its name when asked for a name it
does not know, so ``ppspec serve`` of a GPU-validation profile works from a checkout.

- ``relay``: the always-one control drafter, the relay target as Qwen3-MoE, the broken tap sets;
- ``block``: planted DFlash and DSpark drafters for the relay target (issue 13);
- ``gpuval``: the relay drafter with output-of-layer tap ids, an EAGLE-1 drafter, the relay target
  as DeepSeek-V3 (MLA), and the 8B-class planted shape built on the device;
- ``catalogue``: their catalogue entries.
"""

from ppspec_kit import catalogue as _catalogue  # noqa: F401  (registers the kit's models)
from ppspec_kit.block import RELAY_DFLASH, RELAY_DSPARK
from ppspec_kit.gpuval import (
    BIG,
    BIG_DRAFTER,
    BIG_RIGHT_SHARE,
    BIG_TARGET,
    RELAY_DSV3_TARGET,
    RELAY_EAGLE1,
    RELAY_PLUS1,
    BigShape,
    big_costs,
    big_right_tokens,
    big_successors,
)
from ppspec_kit.relay import (
    RELAY_MOE_EXPERTS,
    RELAY_MOE_TARGET,
    RELAY_MOE_TOP_K,
    RELAY_ONE,
    RELAY_TAPS_EARLY,
    RELAY_TAPS_LATE,
)

__all__ = [
    "BIG",
    "BIG_DRAFTER",
    "BIG_RIGHT_SHARE",
    "BIG_TARGET",
    "RELAY_DFLASH",
    "RELAY_DSPARK",
    "RELAY_DSV3_TARGET",
    "RELAY_EAGLE1",
    "RELAY_MOE_EXPERTS",
    "RELAY_MOE_TARGET",
    "RELAY_MOE_TOP_K",
    "RELAY_ONE",
    "RELAY_PLUS1",
    "RELAY_TAPS_EARLY",
    "RELAY_TAPS_LATE",
    "BigShape",
    "big_costs",
    "big_right_tokens",
    "big_successors",
]
