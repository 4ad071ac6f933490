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

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, get_args

from packaging.version import Version

from ppspec_cli.findings import Severity

#: The speculative methods ppspec plans, named as vLLM names them. The one list of method names:
#: the profile schema, the pack manifests and the registry below all use it.
Method = Literal["eagle3", "dflash", "dspark", "mtp", "eagle"]
METHODS: tuple[Method, ...] = get_args(Method)

#: Methods vLLM accepts that ppspec does not plan but that vLLM also gates on the target relaying
#: taps under PP (eagle3_utils.verify_supports_aux_hidden_states_over_pp).
OTHER_RELAY_GATED = ("extract_hidden_states",)

Numbering = Literal["global", "pp-local"]


@dataclass(frozen=True)
class TapKey:
    """A drafter-config key that names taps, and how its ids become vLLM taps (capture points:
    tap L = the residual stream entering layer L)."""

    key: str  # dotted, e.g. "dflash_config.target_layer_ids"
    offset: int  # add to the ids as written: 0 = already capture points, 1 = zero-based layer outputs
    note: str = ""


@dataclass(frozen=True)
class SpeculatorsPick:
    """A speculators kind whose conversion in vLLM serves a drafter as a class."""

    kind: str  # speculators_model_type, e.g. "eagle3", "peagle", "dspark"
    model_type: str | None = None  # chosen for this transformer_layer_config model_type (None: any)
    default: bool = False  # the class vLLM picks when the checkpoint names none it keeps


@dataclass(frozen=True)
class DrafterClass:
    """A drafter class in vLLM's model registry, as a pack describes it (`drafter_classes`)."""

    name: str
    method: Method
    since: Version = Version("0.30.0")  # first vLLM release that has it
    pack: str = ""
    keeps_name: bool = False  # DFlash: vLLM's EAGLEConfig does not prefix it with `DFlash`
    served_from: tuple[tuple[str, str | None], ...] = ()  # (checkpoint architecture, config model_type) vLLM serves as this class
    speculators: tuple[SpeculatorsPick, ...] = ()
    draft_topk: bool = False  # the class takes `dspark_draft_topk`

    def known_in(self, version: Version) -> bool:
        return self.since <= version


@dataclass(frozen=True)
class Breach:
    """One way a drafter config breaks vLLM's drafter contract. Its severity is its code's, in the
    table of whoever owns the code (a method's CODES or a drafter pack's manifest `contract.codes`)."""

    code: str
    message: str
    fix: str
    field: str = "drafter.model"  # the profile field the fix goes to


@dataclass(frozen=True)
class DrafterView:
    """The narrow view a drafter contract reads (a method's own and a drafter pack's rules): the
    drafter config as vLLM sees it, its architectures as declared and as vLLM serves them, the
    target config facts, the tensor names known, the vLLM version and the model runner. Nothing
    of the profile or of ppspec's internal resolution."""

    method: Method
    config: Mapping[str, Any]  # the drafter config as vLLM sees it (speculators conversion applied)
    declared: tuple[str, ...]  # architectures the config declares
    served: tuple[str, ...]  # architectures vLLM builds it as (after its renames)
    version: Version
    runner: str  # "v1" | "v2"
    num_speculative_tokens: int
    tensor_names: frozenset[str] | None  # the drafter's tensor names; None: not read
    target_architectures: tuple[str, ...] = ()
    target_model_type: str | None = None
    target_config: Mapping[str, Any] = field(default_factory=dict)  # the target's raw config.json
    target_text: Mapping[str, Any] = field(default_factory=dict)  # its text part (text_config, else the config)
    target_vocab: int | None = None


def is_int(v: Any) -> bool:
    """A JSON integer (not a bool): checkpoint configs are hostile input."""
    return isinstance(v, int) and not isinstance(v, bool)


def declared_architectures(cfg: Mapping[str, Any]) -> list[str]:
    """The architecture names a config declares (only strings count)."""
    archs = cfg.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


@dataclass(frozen=True)
class SpecMethod:
    """One speculative method, as vLLM implements it (0.30-0.33). Subclasses override the
    behaviour that differs; the attributes are the method's facts."""

    name: Method
    title: str  # as written in messages: "EAGLE3", "DFlash", ...
    external_drafter: bool = True  # the drafter is its own checkpoint (mtp: the target's MTP layers)
    reads_taps: bool = False  # the drafter reads the target's auxiliary hidden states ("taps")
    relay_gated: bool = False  # under PP vLLM requires the target to opt in to relaying taps
    parallel_draft: bool = False  # the whole draft block in one drafter pass (else one per token)
    numbering: Numbering = "global"  # how its draft layers are numbered under PP (a pack may change it)
    needs_target_embed: bool = False  # the last stage builds the target's embedding under PP (spec_decode_needs_target_embed)
    target_embed_capability: str | None = None  # a pack capability that adds the embedding (mtp: target_embed_for_mtp)
    v1_runner: bool = True  # Model Runner V1 runs it (else vLLM refuses it there)
    hidden_size_keys: tuple[str, ...] = ("target_hidden_size",)  # drafter-config keys naming the target hidden size it expects
    tap_keys: tuple[TapKey, ...] = ()  # the keys its drafters name taps with (the runners read them: planning/plan.py)
    speculators_kinds: tuple[str, ...] = ()  # speculators_model_type values vLLM serves as this method
    codes: Mapping[str, tuple[Severity, str]] = field(default_factory=dict)  # the contract codes the method reports

    # -- facts that depend on the config or the version ---------------------------------------

    def drafter_passes(self, num_speculative_tokens: int) -> int:
        """Drafter forward passes per target step (each reads the drafter's weights once)."""
        return 1 if self.parallel_draft else num_speculative_tokens

    def uses_taps(self, cfg: Mapping[str, Any] | None, version: Version | None) -> bool:
        """Whether the drafter reads target taps with this config on this vLLM version (and so is
        gated on the opt-in). `version` None means the newest supported release."""
        return self.reads_taps

    def vllm_names(self, arch: str) -> list[str]:
        """A drafter architecture as written and as vLLM's EAGLE config rewrites it."""
        return [arch]

    # -- recognising and converting drafter checkpoints ---------------------------------------

    def recognises(self, cfg: Mapping[str, Any], archs: list[str]) -> bool:
        """The config's architectures (or its method-specific keys) say it is this method's drafter."""
        return False

    def recognises_by_nested_keys(self, cfg: Mapping[str, Any]) -> bool:
        """Asked after every method's `recognises` said no: a weaker sign in nested keys."""
        return False

    def convert_speculators(self, kind: str, config: Mapping[str, Any], out: dict[str, Any]) -> None:
        """vLLM's speculators conversion of this method's drafter keys into `out`."""

    def speculators_architectures(self, kind: str, model_type: Any, declared: Any, classes: tuple[DrafterClass, ...]) -> Any:
        """The architectures vLLM serves a speculators drafter of `kind` as (the declared ones when
        vLLM's conversion has no class for it: the engine reports that, not ppspec)."""
        return declared

    # -- the drafter contract ------------------------------------------------------------------

    def served_architectures(self, cfg: Mapping[str, Any], version: Version, target_model_type: str | None, classes: tuple[DrafterClass, ...]) -> list[str]:
        """The architectures vLLM builds the drafter as (config/speculative.py)."""
        return declared_architectures(cfg)

    def contract(self, view: DrafterView, classes: tuple[DrafterClass, ...]) -> list[Breach]:
        """What vLLM requires of every drafter of this method (drafter packs add their classes' own)."""
        return []


# The registry. Imported last: the method modules subclass SpecMethod.
from ppspec_cli.knowledge.methods.dflash import DFLASH  # noqa: E402
from ppspec_cli.knowledge.methods.dspark import DSPARK  # noqa: E402
from ppspec_cli.knowledge.methods.eagle import EAGLE  # noqa: E402
from ppspec_cli.knowledge.methods.eagle3 import EAGLE3  # noqa: E402
from ppspec_cli.knowledge.methods.mtp import MTP  # noqa: E402

REGISTRY: dict[str, SpecMethod] = {m.name: m for m in (EAGLE3, DFLASH, DSPARK, MTP, EAGLE)}
assert tuple(REGISTRY) == METHODS, "every method of the Literal has one object, in its order"

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
    for kind in (cfg.get("speculators_model_type"), (cfg.get("speculators_config") or {}).get("algorithm") if isinstance(cfg.get("speculators_config"), dict) else None):
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
    if m is not None:
        m.convert_speculators(kind, config, out)
    elif config.get("eagle_aux_hidden_state_layer_ids") is not None:
        out["eagle_aux_hidden_state_layer_ids"] = config["eagle_aux_hidden_state_layer_ids"]
    archs = m.speculators_architectures(kind, out.get("model_type", "llama"), config.get("architectures"), classes) if m is not None else config.get("architectures")
    if archs is not None:
        out["architectures"] = archs
    out["speculators_model_type"] = kind
    return out
