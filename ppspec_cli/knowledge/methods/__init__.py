"""The speculative methods ppspec plans: one object per method, and the one `Literal` that names
them (as vLLM's config/speculative.py names them).

Each object says what its drafter reads from a drafter config (the tap keys and their
convention), whether vLLM gates it on the target relaying taps under pipeline parallelism, how
its draft layers are numbered, how many drafter passes one target step costs, how vLLM converts
its speculators-format checkpoints, and the part of vLLM's drafter contract that holds for every
drafter of the method (per vLLM version). Core code asks the method
(`methods.get(name).reads_taps`); it never compares method names.

What is true of one family's drafter classes (their names, since which release vLLM has them,
their own config contract) lives in adapter packs: `drafter_classes` in a pack manifest and a
drafter pack's `contract` rules (adapters/<pack>/rules.py). The functions here take those facts
as arguments (`classes`), so this package imports nothing of ppspec but the findings types.
"""

from __future__ import annotations

from typing import Any, Mapping

from ppspec_cli.findings import register
from ppspec_cli.knowledge.methods.base import (
    METHODS,
    OTHER_RELAY_GATED,
    DrafterClass,
    DrafterView,
    Method,
    Numbering,
    SpecMethod,
    SpeculatorsPick,
    TapKey,
    declared_architectures,
    is_int,
)
from ppspec_cli.knowledge.methods.dflash import DFLASH
from ppspec_cli.knowledge.methods.dspark import DSPARK
from ppspec_cli.knowledge.methods.eagle import EAGLE
from ppspec_cli.knowledge.methods.eagle3 import EAGLE3
from ppspec_cli.knowledge.methods.mtp import MTP

__all__ = [
    "METHODS",
    "OTHER_RELAY_GATED",
    "RELAY_GATED",
    "REGISTRY",
    "DrafterClass",
    "DrafterView",
    "Method",
    "Numbering",
    "SpecMethod",
    "SpeculatorsPick",
    "TapKey",
    "DFLASH",
    "DSPARK",
    "EAGLE",
    "EAGLE3",
    "MTP",
    "declared_architectures",
    "drafter_passes",
    "get",
    "is_int",
    "method_of_drafter_config",
    "of",
    "relay_gated",
    "speculators_view",
]

REGISTRY: dict[str, SpecMethod] = {m.name: m for m in (EAGLE3, DFLASH, DSPARK, MTP, EAGLE)}
assert tuple(REGISTRY) == METHODS, "every method of the Literal has one object, in its order"
assert all(m.v1_runner or m.v1_refusal for m in REGISTRY.values()), "a method V1 refuses names its code"
assert all(m.external_drafter or m.no_layers for m in REGISTRY.values()), "an in-target drafter names its code"
assert all(m.arch_unknown for m in REGISTRY.values() if m.external_drafter), (
    "an external drafter's class may be missing"
)
assert all(m.family_refusal and m.k_not_multiple for m in REGISTRY.values() if not m.external_drafter), (
    "vLLM's MTP rewrite may refuse a family or a k: an in-target drafter names both codes"
)
#: The methods' codes join the registry when the package loads (two methods may share one: DFlash
#: and DSpark report the block width codes).
register("methods", *(c for m in REGISTRY.values() for c in m.codes))

#: The order method_of_drafter_config asks the methods (DSpark before DFlash: a DSpark class is a
#: DFlash subclass in vLLM; EAGLE3 before EAGLE-1: `Eagle3...` also starts with `Eagle`).
_RECOGNITION_ORDER = (DSPARK, DFLASH, EAGLE3, EAGLE)

#: Every method name vLLM gates on the target relaying taps under PP (planned or not).
RELAY_GATED: frozenset[str] = frozenset({*(m.name for m in REGISTRY.values() if m.relay_gated), *OTHER_RELAY_GATED})


def get(name: str) -> SpecMethod:
    """The method object of a name from the schema (KeyError for any other name)."""
    return REGISTRY[name]


def of(name: str | None) -> SpecMethod | None:
    """The method object, or None for no drafter / a name ppspec does not plan."""
    return REGISTRY.get(name) if isinstance(name, str) else None


def relay_gated(name: str | None) -> bool:
    return isinstance(name, str) and name in RELAY_GATED


def drafter_passes(name: str, num_speculative_tokens: int) -> int:
    """Drafter forward passes per target step for a method."""
    return get(name).drafter_passes(num_speculative_tokens)


def _speculators_method(kind: Any) -> SpecMethod | None:
    if not isinstance(kind, str):
        return None
    return next((m for m in REGISTRY.values() if kind in m.speculators_kinds), None)


def method_of_drafter_config(cfg: Mapping[str, Any]) -> str | None:
    """The speculative method a drafter checkpoint was built for, when its config says so.

    Speculators format first: vLLM serves `speculators_model_type` (else the config's algorithm)
    as its method (peagle as eagle3, dflash2 as dflash); an unknown kind is returned as written."""
    for kind in (
        cfg.get("speculators_model_type"),
        (cfg.get("speculators_config") or {}).get("algorithm")
        if isinstance(cfg.get("speculators_config"), dict)
        else None,
    ):
        if isinstance(kind, str):
            m = _speculators_method(kind)
            return m.name if m is not None else kind
    archs = declared_architectures(cfg)
    for m in _RECOGNITION_ORDER:
        if m.recognises(cfg, archs):
            return m.name
    for m in _RECOGNITION_ORDER:
        if m.recognises_by_nested_keys(cfg):
            return m.name
    return None


#: Keys vLLM's speculators conversion copies to the top level for every kind, when set.
_COMMON_SPECULATORS_KEYS = ("draft_vocab_size", "target_hidden_size", "norm_before_residual")


def speculators_view(config: dict[str, Any], classes: tuple[DrafterClass, ...] = ()) -> dict[str, Any]:
    """How vLLM sees a speculators-format drafter (its speculators config conversion, the same in
    0.30-0.33): the `transformer_layer_config` keys, the common keys, the method's own keys mapped
    to the top level (each method's `convert_speculators`), and the architectures vLLM serves it
    as (`speculators_architectures`, from the packs' drafter classes). Any other config is
    returned as it is."""
    if "speculators_config" not in config:
        return config
    layer = config.get("transformer_layer_config")
    out = dict(layer) if isinstance(layer, dict) else {}
    kind = config.get("speculators_model_type")
    for k in _COMMON_SPECULATORS_KEYS:
        if config.get(k) is not None:
            out[k] = config[k]
    m = _speculators_method(kind)
    if m is not None and isinstance(kind, str):
        m.convert_speculators(kind, config, out)
    elif config.get("eagle_aux_hidden_state_layer_ids") is not None:
        out["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]
    archs = (
        m.speculators_architectures(kind, out.get("model_type", "llama"), config.get("architectures"), classes)
        if m is not None and isinstance(kind, str)
        else config.get("architectures")
    )
    if archs is not None:
        out["architectures"] = archs
    out["speculators_model_type"] = kind
    return out
