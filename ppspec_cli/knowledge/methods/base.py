"""The types every method module shares: the method base class, the narrow DrafterView a drafter
contract reads (a contract yields findings: ppspec_cli.findings.Finding), TapKey and the drafter-class facts packs
supply. See the package
docstring (ppspec_cli/knowledge/methods/__init__.py) for the design."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, TypeGuard, get_args

from packaging.version import Version

from ppspec_cli.findings import Code, Finding, Severity

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
    until: Version | None = None  # last vLLM release that has it (None: still there)
    pack: str = ""
    keeps_name: bool = False  # DFlash: vLLM's EAGLEConfig does not prefix it with `DFlash`
    speculators: tuple[SpeculatorsPick, ...] = ()
    draft_topk: bool = False  # the class takes `dspark_draft_topk`

    def known_in(self, version: Version) -> bool:
        return self.since <= version and (self.until is None or version.release <= self.until.release)


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


def is_int(v: Any) -> TypeGuard[int]:
    """A JSON integer (not a bool): checkpoint configs are hostile input."""
    return isinstance(v, int) and not isinstance(v, bool)


def declared_architectures(cfg: Mapping[str, Any]) -> list[str]:
    """The architecture names a config declares (only strings count)."""
    archs = cfg.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


#: The reference section of the drafter-contract codes (the methods' and the drafter packs').
CONTRACT_SECTION = "Drafter contract (DFlash, DSpark: what vLLM requires of the drafter's config and tensors)"


def arch_unknown_code(method: str) -> Code:
    """`<method>-arch-unknown`: vLLM builds the drafter as a class its model registry lacks (the
    release's table: EAGLEConfig's rename for the method, or the speculators loader's class)."""
    return Code(
        f"{method}-arch-unknown",
        ("error",),
        "vLLM builds the drafter as the architecture its EAGLEConfig rename for the method gives (or its speculators "
        "loader picks), and its model registry has no such class (vLLM #24967: an EAGLE-1 head naming "
        "Qwen2ForCausalLM becomes EagleQwen2ForCausalLM).",
        "Use a drafter whose config names an architecture this vLLM serves, or the method the drafter was trained for.",
        section="Drafter and target",
    )


def contract_code(code: str, severity: Severity, meaning: str) -> Code:
    """A drafter-contract code: `meaning` in one line (the reference's cause); the fix is what the
    finding's message names (vLLM's rule)."""
    return Code(
        code,
        (severity,),
        (meaning if meaning.startswith("vLLM") else meaning[0].upper() + meaning[1:]) + ".",
        "Fix the drafter's config or checkpoint as the message says (it names vLLM's rule).",
        section=CONTRACT_SECTION,
    )


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
    needs_target_embed: bool = (
        False  # the last stage builds the target's embedding under PP (spec_decode_needs_target_embed)
    )
    target_embed_capability: str | None = None  # a pack capability that adds the embedding (mtp: target_embed_for_mtp)
    v1_runner: bool = True  # Model Runner V1 runs it (else vLLM refuses it there)
    v2_speculator: str | None = (
        None  # Model Runner V2's package that loads its drafter (vllm/v1/worker/gpu/spec_decode/<this>)
    )
    # vLLM 0.33 keeps a `drafter.schedule` on the V1 runner for it (config/vllm.py: ngram, eagle, eagle3, mtp,
    # draft_model, dflash)
    schedule_on_v1: bool = True
    hidden_size_keys: tuple[str, ...] = (
        "target_hidden_size",
    )  # drafter-config keys naming the target hidden size it expects
    tap_keys: tuple[TapKey, ...] = ()  # the keys its drafters name taps with (the runners read them: planning/plan.py)
    speculators_kinds: tuple[str, ...] = ()  # speculators_model_type values vLLM serves as this method
    contract_codes: tuple[Code, ...] = ()  # the drafter-contract codes `contract` reports
    no_layers: Code | None = None  # reported when the target has none of the layers the method drafts with (mtp)
    v1_refusal: Code | None = None  # reported where the V1 runner would serve it and vLLM refuses (`v1_runner` False)
    arch_unknown: Code | None = (
        None  # the class vLLM builds the drafter as is not in its registry (the release's table)
    )
    family_refusal: Code | None = None  # vLLM refuses the method for the target's family and names another (mtp)
    class_rule: str | None = None  # the table's drafter rule that picks the class vLLM builds (dspark: dspark_class)
    k_not_multiple: Code | None = None  # k above the layers' n_predict and not a multiple of it (mtp)

    @property
    def codes(self) -> tuple[Code, ...]:
        """Every code the method owns (methods/__init__ registers them when the package loads)."""
        own = (self.no_layers, self.v1_refusal, self.arch_unknown, self.family_refusal, self.k_not_multiple)
        return tuple(c for c in (*self.contract_codes, *own) if c is not None)

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

    def speculators_architectures(
        self, kind: str, model_type: Any, declared: Any, classes: tuple[DrafterClass, ...]
    ) -> Any:
        """The architectures vLLM serves a speculators drafter of `kind` as (the declared ones when
        vLLM's conversion has no class for it: the engine reports that, not ppspec)."""
        return declared

    # -- the drafter contract ------------------------------------------------------------------

    def served_architectures(
        self, cfg: Mapping[str, Any], version: Version, target_model_type: str | None, classes: tuple[DrafterClass, ...]
    ) -> list[str]:
        """The architectures vLLM builds the drafter as (config/speculative.py)."""
        return declared_architectures(cfg)

    def contract(self, view: DrafterView, classes: tuple[DrafterClass, ...]) -> list[Finding]:
        """What vLLM requires of every drafter of this method (drafter packs add their classes' own)."""
        return []
