"""Adapter packs: what ppspec knows about a model family under pipeline parallelism, and what it
changes in the installed vLLM when vLLM itself does not handle the family.

A pack is a folder with a strict `pack.yaml` manifest and, when the installed vLLM needs changing,
a `patches.py` module that the in-engine plugin loads *by file path* (the `adapters/` folder is
never an importable top-level module). Built-in packs ship inside the wheel as
`ppspec_cli/_adapters`; in a source checkout they are read from `<repo>/adapters`. Third-party packs
register an entry point in the group `ppspec.adapters` whose object is (or returns) the path of a
pack folder.

Nothing here imports vLLM or torch: listing and resolving packs must stay cheap.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata as md
from pathlib import Path
from typing import Any, Literal, cast, get_args

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ppspec_cli.errors import PpspecError
from ppspec_cli.findings import Code, register
from ppspec_cli.io import safeio, yamlload
from ppspec_cli.knowledge import methods
from ppspec_cli.knowledge.facts import DEFAULT_MTP_LAYER_KEYS, MAX_MTP_LAYERS
from ppspec_cli.knowledge.methods import Method

#: Platforms vLLM builds for, as ppspec names them (the profile's `platform`, the installed build).
Platform = Literal["cuda", "rocm", "xpu", "cpu"]
PLATFORMS: tuple[Platform, ...] = get_args(Platform)

#: What a pack can say about its family under PP, per platform and vLLM version. Fixed so rules
#: and docs can rely on the names.
Capability = Literal[
    "aux_relay_over_pp", "target_embed_on_last_stage", "target_embed_for_mtp", "global_draft_layer_ids"
]
CAPABILITIES: dict[Capability, str] = {
    "aux_relay_over_pp": "the target's inner decoder relays EAGLE3-family taps between PP stages "
    "(supports_aux_hidden_states_over_pp); vLLM refuses eagle3/dflash/dspark under PP without it",
    "target_embed_on_last_stage": "the last PP stage holds a real target embed_tokens when an "
    "eagle/eagle3/dflash/dspark drafter needs it",
    "target_embed_for_mtp": "with method mtp under PP the last stage builds a real target embed_tokens (it holds the "
    "embedding's memory)",
    "global_draft_layer_ids": "draft layers are numbered globally from the target depth (num_hidden_layers + i)",
}

#: A capability's status on one platform and vLLM version.
Status = Literal["native", "patched", "unsupported", "unknown"]

PACK_FILE = "pack.yaml"
ENTRY_POINT_GROUP = "ppspec.adapters"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_CLASS_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ARCH = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_CODE = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"


# ---------------------------------------------------------------------------------------------
# Versions


def version_range(spec: str) -> SpecifierSet:
    """A PEP 440 range such as `>=0.30,<0.34`; ValueError when malformed or empty."""
    if not spec.strip():
        raise ValueError("empty version range")
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier as e:
        raise ValueError(
            f"invalid version range {spec!r} ({e}); write clauses with an operator, e.g. >=0.30,<0.34"
        ) from None


def in_range(spec: str, version: str) -> bool:
    """Whether a vLLM version is in a range. Local labels (+cpu) and pre-releases of an otherwise
    matching release count; a string that is not a version is in no range."""
    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return version_range(spec).contains(v.public, prereleases=True)


# ---------------------------------------------------------------------------------------------
# Manifest schema


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Matches(_Strict):
    """Which profiles a pack applies to. Empty lists mean "any"."""

    targets: tuple[str, ...] = Field(default=(), description="Target architectures (config.json `architectures`).")
    drafters: tuple[str, ...] = Field(
        default=(),
        description="Drafter architectures, as in the drafter's config.json or as vLLM rewrites them "
        "(`Eagle<arch>` for eagle, `Eagle3<arch>` for eagle3).",
    )
    methods: tuple[Method, ...] = Field(default=(), description="Speculative methods the pack is for (empty: any).")


class SupportRule(_Strict):
    """One line of a capability's support table. The first line whose platforms and vLLM range
    match the engine answers; no matching line means "unknown"."""

    status: Literal["native", "patched", "unsupported"] = Field(
        description="`native`: the installed vLLM does it itself; `patched`: this pack's patches make it do it; "
        "`unsupported`: it does not, and the pack cannot change that (say why in `reason`)."
    )
    platforms: tuple[Platform, ...] = Field(default=PLATFORMS, description="Platforms the line is for (default: all).")
    vllm: str | None = Field(
        default=None,
        description="vLLM versions the line is for, e.g. `>=0.32` (default: the pack's whole `vllm` range).",
    )
    reason: str = Field(
        default="",
        max_length=500,
        description="Why, in terms of vLLM's code (which class, which attribute). Required for `unsupported`.",
    )

    @field_validator("vllm")
    @classmethod
    def _range(cls, v: str | None) -> str | None:
        if v is not None:
            version_range(v)
        return v

    @model_validator(mode="after")
    def _reason_for_unsupported(self) -> SupportRule:
        if self.status == "unsupported" and not self.reason.strip():
            raise ValueError("an `unsupported` line needs a `reason`")
        return self


class MtpLayers(_Strict):
    """How vLLM's `mtp` method counts a family's MTP layers (config/speculative.py)."""

    keys: tuple[str, ...] = Field(
        default=DEFAULT_MTP_LAYER_KEYS, description="Text-config keys vLLM reads the count from, first present wins."
    )
    default: int | None = Field(
        default=None,
        ge=1,
        le=MAX_MTP_LAYERS,
        description="The count vLLM uses when none of the keys is set (its config class's default).",
    )
    fixed: int | None = Field(
        default=None, ge=1, le=MAX_MTP_LAYERS, description="A count vLLM uses whatever the config says."
    )


class LinearLayers(_Strict):
    """Where a hybrid family's config lists the layers that keep linear-attention / SSM state instead of a KV cache."""

    key: str = Field(
        description="Dotted text-config key holding the list of layer numbers, e.g. `linear_attn_config.kda_layers`.",
        pattern=r"^[A-Za-z_][\w.]*$",
    )
    base: Literal[0, 1] = Field(
        default=0,
        description="Whether the list counts layers from 0 or from 1 (as the family's config class reads it).",
    )


class Facts(_Strict):
    """What the pack knows about the family; read by rules and probes, never executed."""

    inner_decoder: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="Per target architecture: `module:Class` of the inner decoder vLLM's PP gate reads, "
        "per platform (cuda/rocm/xpu/cpu) or `default`.",
    )
    inner_decoder_path: dict[str, str] = Field(
        default_factory=dict,
        description="Per target architecture: attribute path from the served model object to the inner "
        "decoder (`model` when absent; `language_model.model` for multimodal wrappers).",
    )
    text_config_key: str | None = Field(
        default=None, description="Key of the text model config in a multimodal config.json."
    )
    embedding_tensors: tuple[str, ...] = Field(
        default=(), description="Checkpoint tensor names that hold the input embedding, most likely first."
    )
    tower_prefixes: tuple[str, ...] = Field(
        default=(),
        description="Checkpoint tensor name prefixes of multimodal towers (vision/audio encoders): their layers are "
        "not decoder layers.",
    )
    name_mapping: dict[str, str] = Field(
        default_factory=dict,
        description="Checkpoint name prefix -> vLLM parameter name prefix (the model's hf_to_vllm_mapper, "
        "as far as the embedding and layers are concerned).",
    )
    tap_convention: Literal["capture_point"] = Field(
        default="capture_point",
        description="How the implementation numbers taps: capture_point = tap L is the residual stream after layer "
        "L-1.",
    )
    mtp_layers: MtpLayers = Field(default_factory=MtpLayers, description="How vLLM counts the family's MTP layers.")
    installed_vllm: str | None = Field(
        default=None, description="What the pack author found in the vLLM the pack was written against."
    )
    linear_layers: LinearLayers | None = Field(
        default=None,
        description="Hybrid families: where the config lists the linear-attention / SSM layers (the rest are full "
        "attention).",
    )
    weight_layout: Literal["dense-gated", "sparse-gated", "mla-sparse-gated"] | None = Field(
        default=None,
        description="How a decoder layer's weights follow from config.json, for the memory per GPU when no "
        "safetensors headers are at hand (planning/weights.py): `dense-gated` = attention with grouped KV heads "
        "(`num_attention_heads`, `num_key_value_heads`, `head_dim`) and a gated MLP (`intermediate_size`: gate, up, "
        "down); "
        "`sparse-gated` = the same attention, and in the sparse layers a router plus `num_experts` (or "
        "`num_local_experts`, "
        "`n_routed_experts`) gated experts of `moe_intermediate_size` and the shared experts (`n_shared_experts` or "
        "`shared_expert_intermediate_size`); a layer is dense when `mlp_only_layers`, `first_k_dense_replace`, "
        "`decoder_sparse_step` or `moe_layer_freq` says so; `mla-sparse-gated` = multi-head latent attention "
        "(`q_lora_rank`, "
        "`kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim`, `v_head_dim`) and the same MLP rule, with "
        "`num_nextn_predict_layers` MTP layers. Quantized per `quantization_config`. Unset: not estimated.",
    )
    notes: tuple[str, ...] = Field(default=(), description="Anything else a reader needs.")

    @field_validator("inner_decoder")
    @classmethod
    def _class_refs(cls, v: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for arch, per_platform in v.items():
            for platform, ref in per_platform.items():
                if platform not in (*PLATFORMS, "default"):
                    raise ValueError(
                        f"inner_decoder.{arch}: unknown platform {platform!r}; use {list(PLATFORMS)} or default"
                    )
                if not _CLASS_REF.match(ref):
                    raise ValueError(f"inner_decoder.{arch}.{platform}: expected `module:Class`, got {ref!r}")
        return v


class SpeculatorsPickSpec(_Strict):
    """A speculators kind whose conversion in vLLM (speculators/algos.py) serves a drafter as the class."""

    kind: str = Field(
        max_length=32, description="The checkpoint's `speculators_model_type`, e.g. `eagle3`, `peagle`, `dspark`."
    )
    model_type: str | None = Field(
        default=None,
        max_length=64,
        description="Chosen for this `transformer_layer_config.model_type` (eagle3 / peagle).",
    )
    default: bool = Field(
        default=False, description="The class the conversion picks when the checkpoint names none it keeps (dspark)."
    )


class DrafterClassSpec(_Strict):
    """One drafter class of vLLM's model registry, as the family's pack knows it. The methods read
    these facts (knowledge/methods): DFlash's registry check and rename, DSpark's architecture
    rewrite and top-k support, the speculators conversion's choice of class."""

    name: str = Field(pattern=_ARCH, description="The class name as vLLM's registry has it (after vLLM's renames).")
    method: Method = Field(description="The speculative method vLLM serves it with.")
    since: str = Field(default="0.30.0", description="First vLLM release that has the class.")
    until: str | None = Field(
        default=None, description="Last vLLM release that has the class (the next one removed it); unset: still there."
    )
    keeps_name: bool = Field(
        default=False, description="DFlash: vLLM's EAGLEConfig keeps the name instead of prefixing it with `DFlash`."
    )
    speculators: tuple[SpeculatorsPickSpec, ...] = Field(
        default=(), description="Speculators kinds whose conversion serves a drafter as this class."
    )
    draft_topk: bool = Field(
        default=False, description="DSpark: the class takes `dspark_draft_topk` (vLLM refuses it on any other)."
    )
    # Retired keys: a pack written for an earlier ppspec still loads. What they said is now read from
    # vLLM's source per release (the table's drafter_rules.dspark_class and fc_taps), so they are ignored.
    served_from: tuple[Any, ...] = Field(
        default=(),
        description="Retired (ignored): which checkpoint classes vLLM serves as this class is read from vLLM's source "
        "per release.",
    )
    fc_taps_from: tuple[Any, ...] = Field(
        default=(),
        description="Retired (ignored): the keys an EAGLE3 class sizes its fc from are read from vLLM's source per "
        "release.",
    )

    @field_validator("since", "until")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            Version(v)
        except InvalidVersion:
            raise ValueError(f"not a version: {v!r}") from None
        return v

    def fact(self, pack: str) -> methods.DrafterClass:
        return methods.DrafterClass(
            name=self.name,
            method=self.method,
            since=Version(self.since),
            until=Version(self.until) if self.until else None,
            pack=pack,
            keeps_name=self.keeps_name,
            speculators=tuple(methods.SpeculatorsPick(p.kind, p.model_type, p.default) for p in self.speculators),
            draft_topk=self.draft_topk,
        )


class Contract(_Strict):
    """A drafter pack's contract: what vLLM requires of the configs and tensors of some drafter
    classes (or of any drafter of the pack's methods for some targets) when it builds them. Its
    `rules` file's `get_rules()` gives (name, fn) pairs; fn(DrafterView) yields findings made from
    the code objects its `CODES` lists (registered as the pack's when the file loads). A drafter
    pack is consulted by `check`, never applied to the engine."""

    drafters: dict[Method, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Per method, the drafter classes (as vLLM serves them) whose contract the rules check.",
    )
    targets: tuple[str, ...] = Field(
        default=(), description="Or: target architectures for whose drafters the rules apply."
    )
    target_model_types: tuple[str, ...] = Field(
        default=(), description="Or: target config model_types for whose drafters the rules apply."
    )
    vocabulary: tuple[str, ...] = Field(
        default=(),
        description="Served drafter classes whose vocabularies and vocabulary tensors the contract judges (the "
        "generic `shapes` rule leaves them alone).",
    )


class Manifest(_Strict):
    """`pack.yaml`: one model family (or drafter family), everything ppspec knows about it under PP."""

    name: str = Field(description="Pack name: lower case letters, digits and underscores; the folder's name.")
    description: str = Field(
        min_length=1, max_length=500, description="One paragraph: the family and what the pack does."
    )
    matches: Matches = Field(description="Which targets / drafters / methods the pack is for.")
    vllm: str = Field(
        description="vLLM version range the pack was proven on, e.g. `>=0.30,<0.35`: the releases on whose source "
        "tools/prove_packs.py ran everything of the pack that touches vLLM (`--set-ranges` writes it; "
        "tests/test_packproof.py holds it to the proofs)."
    )
    capabilities: dict[Capability, tuple[SupportRule, ...]] = Field(
        default_factory=dict,
        description="Per capability, its support table: per platform and vLLM range, native, patched by this pack, "
        "or unsupported (with the reason).",
    )
    facts: Facts = Field(
        default_factory=Facts, description="The family's facts (inner decoder, embedding names, MTP keys, ...)."
    )
    patches: str | None = Field(
        default=None, description="Python file in the pack folder with `get_patches()`, if the pack changes vLLM."
    )
    rules: str | None = Field(
        default=None,
        description="Python file in the pack folder with `get_rules()`: the pack's own named check rules, if any "
        "(must not import vLLM).",
    )
    probes: str | None = Field(
        default=None,
        description="Python file in the pack folder with `get_probes()`: the pack's own behaviour probes of the "
        "installed vLLM, run by `check --probes`.",
    )
    drafter_classes: tuple[DrafterClassSpec, ...] = Field(
        default=(), description="The family's drafter classes in vLLM's model registry (any pack may list them)."
    )
    contract: Contract | None = Field(
        default=None,
        description="A drafter pack: the contract its `rules` check (their functions get a DrafterView, not the "
        "resolved profile). "
        "Such a pack matches by `matches.methods` and `contract`, changes nothing in vLLM and is never part of "
        "`adapter:`.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("must match [a-z][a-z0-9_]* (at most 48 characters)")
        return v

    @field_validator("vllm")
    @classmethod
    def _range(cls, v: str) -> str:
        version_range(v)
        return v

    @field_validator("patches", "rules", "probes")
    @classmethod
    def _pack_file(cls, v: str | None) -> str | None:
        if v is not None and (not v.endswith(".py") or "/" in v or "\\" in v or v.startswith(".")):
            raise ValueError("must be a .py file name inside the pack folder")
        return v

    @model_validator(mode="after")
    def _drafter_pack(self) -> Manifest:
        if self.contract is None:
            return self
        if self.rules is None:
            raise ValueError("contract: a drafter pack needs its `rules` file")
        if not self.matches.methods or self.matches.targets or self.matches.drafters:
            raise ValueError(
                "contract: a drafter pack matches by `matches.methods` (required) and its contract, not by "
                "matches.targets/drafters"
            )
        if self.patches or self.probes or self.capabilities:
            raise ValueError("contract: a drafter pack only checks: no patches, probes or capabilities")
        return self

    @model_validator(mode="after")
    def _patched_needs_patches(self) -> Manifest:
        for cap, lines in self.capabilities.items():
            if any(x.status == "patched" for x in lines) and self.patches is None:
                raise ValueError(f"capabilities.{cap}: a `patched` line needs the pack's `patches` file")
        return self


@dataclass(frozen=True)
class Support:
    """A capability's status for one platform and vLLM version, with the reason and the pack that said so."""

    capability: str
    status: Status
    reason: str
    pack: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("native", "patched")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------
# Pack


@dataclass(frozen=True)
class Pack:
    """A loaded pack, or a composite of packs (`a+b`: a target pack plus a drafter pack)."""

    name: str
    description: str
    matches: Matches
    vllm_range: str
    capabilities: dict[str, tuple[SupportRule, ...]]
    facts: Facts
    path: Path | None  # the pack folder (None for a composite)
    patches_path: Path | None  # the patches module file, None for a native pack or a composite
    rules_path: Path | None = None  # the pack's own check rules, if any
    probes_path: Path | None = None  # the pack's own engine probes, if any
    source: str = "built-in"  # "built-in" or "entry point <name>"
    components: tuple[Pack, ...] = field(default=())
    drafter_classes: tuple[methods.DrafterClass, ...] = ()
    contract: Contract | None = None  # a drafter pack's contract (then `rules_path` holds its rules)

    @property
    def is_drafter_pack(self) -> bool:
        """A pack that only checks drafter contracts (never applied, never auto-matched)."""
        return self.contract is not None

    @property
    def parts(self) -> tuple[Pack, ...]:
        """The simple packs this pack is made of (itself, unless it is a composite)."""
        return self.components or (self,)

    @property
    def native(self) -> bool:
        """No part of the pack changes vLLM."""
        return all(p.patches_path is None for p in self.parts)

    @property
    def patch_files(self) -> tuple[tuple[str, Path], ...]:
        """(pack name, patches file) for every part that has patches, in application order."""
        return tuple((p.name, p.patches_path) for p in self.parts if p.patches_path is not None)

    @property
    def provides(self) -> tuple[str, ...]:
        """Capabilities native or patched on at least one platform and version (for listings)."""
        return tuple(
            dict.fromkeys(
                c
                for p in self.parts
                for c, lines in p.capabilities.items()
                if any(x.status != "unsupported" for x in lines) or (not lines and _table_provides(p, c))
            )
        )

    def supports_vllm(self, version: str) -> bool:
        """Whether every part of the pack was proven on this vLLM version (its `vllm` range)."""
        return all(in_range(p.vllm_range, version) for p in self.parts)

    def supports(self, capability: str, platform: str, version: str) -> Support:
        """The capability's status on this platform and vLLM version, from the first part that has
        a support table for it (the target pack before a drafter pack). `unknown` when no part
        speaks of it, the version is outside the part's range, or no line matches."""
        for part in self.parts:
            lines = part.capabilities.get(capability)
            if not lines:
                got = _from_table(part, capability, platform, version)
                if got is not None:
                    return got
                continue
            if not in_range(part.vllm_range, version):
                return Support(
                    capability,
                    "unknown",
                    f"pack {part.name} was proven on vLLM {part.vllm_range}, not {version}",
                    part.name,
                )
            for line in lines:
                if platform in line.platforms and (line.vllm is None or in_range(line.vllm, version)):
                    return Support(
                        capability,
                        line.status,
                        line.reason or _default_reason(line.status, part.name, platform, version),
                        part.name,
                    )
            got = _from_table(
                part, capability, platform, version
            )  # the lines cover only what vLLM's source does not decide
            return got or Support(
                capability,
                "unknown",
                f"pack {part.name} says nothing about {capability} on {platform} with vLLM {version}",
                part.name,
            )
        return Support(capability, "unknown", f"pack {self.name} says nothing about {capability}", None)

    # -- matching -------------------------------------------------------------------------------

    @property
    def is_target_pack(self) -> bool:
        return bool(self.matches.targets)

    def matches_target(self, target_archs: list[str] | tuple[str, ...]) -> bool:
        return bool(set(self.matches.targets) & set(target_archs or ()))

    def matches_drafter(self, drafter_archs: list[str] | tuple[str, ...], method: str | None) -> bool:
        if self.matches.methods and method not in self.matches.methods:
            return False
        if not self.matches.drafters:
            return True
        return bool(set(self.matches.drafters) & set(vllm_drafter_names(drafter_archs, method)))

    def matches_method(self, method: str | None) -> bool:
        return not self.matches.methods or method in self.matches.methods

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "matches": {
                "targets": list(self.matches.targets),
                "drafters": list(self.matches.drafters),
                "methods": list(self.matches.methods),
            },
            "vllm": self.vllm_range,
            "provides": list(self.provides),
            "capabilities": {
                c: [x.model_dump(mode="json") for x in lines] for p in self.parts for c, lines in p.capabilities.items()
            },
            "capabilities_from_vllm": {
                c: table_lines(p, c) for p in self.parts for c, lines in p.capabilities.items() if not lines
            },
            "native": self.native,
            "patches": [str(p) for _, p in self.patch_files],
            "facts": self.facts.model_dump(mode="json"),
            "components": [p.name for p in self.parts] if self.components else [],
            "drafter_classes": [
                {"name": d.name, "method": d.method, "since": str(d.since)}
                for p in self.parts
                for d in p.drafter_classes
            ],
            "contract": self.contract.model_dump(mode="json") if self.contract is not None else None,
        }


def vllm_drafter_names(archs: list[str] | tuple[str, ...], method: str | None) -> list[str]:
    """The drafter architecture names as written and as vLLM's EAGLE config rewrites them for the
    method (its `vllm_names`: e.g. `Eagle<arch>` for eagle, `Eagle3<arch>` for eagle3)."""
    m = methods.of(method)
    return [n for a in archs or () for n in (m.vllm_names(a) if m is not None else [a])]


def _default_reason(status: str, pack: str, platform: str, version: str) -> str:
    if status == "native":
        return f"vLLM {version} does it itself on {platform}"
    return f"the {pack} pack patches vLLM {version} on {platform}"


def _composite(parts: list[Pack]) -> Pack:
    if len(parts) == 1:
        return parts[0]
    return Pack(
        name="+".join(p.name for p in parts),
        description=" + ".join(p.description for p in parts),
        matches=Matches(
            targets=tuple(t for p in parts for t in p.matches.targets),
            drafters=tuple(d for p in parts for d in p.matches.drafters),
            methods=(),
        ),
        vllm_range=",".join(p.vllm_range for p in parts),
        capabilities={},
        facts=parts[0].facts,
        path=None,
        patches_path=None,
        source="composite",
        components=tuple(parts),
    )


# ---------------------------------------------------------------------------------------------
# Loading


def packs_dir() -> Path:
    """Built-in packs: `ppspec_cli/_adapters` in a wheel, else `<repo root>/adapters`."""
    here = Path(__file__).resolve().parent.parent  # the ppspec_cli package
    shipped = here / "_adapters"
    if shipped.is_dir():
        return shipped
    return here.parent / "adapters"


#: What one adapter pack manifest may expand to (io/yamlload): the largest built-in manifest is a
#: few hundred values; 100,000 leaves room for any real one and none for an alias bomb.
MAX_MANIFEST_NODES = 100_000


def load_pack_dir(path: Path, *, source: str = "built-in") -> Pack:
    """Read and validate one pack folder. PpspecError (naming the file and the key) on any problem."""
    path = Path(path)
    manifest_path = path / PACK_FILE
    if not manifest_path.is_file():
        raise PpspecError(
            f"adapter pack folder has no {PACK_FILE}", where=str(path), fix=f"add {PACK_FILE} (see docs/adapters.md)"
        )
    try:
        raw = yamlload.load(
            safeio.read_text(manifest_path, limit=1 << 20, what="adapter pack manifest"),
            what="adapter pack manifest",
            source=str(manifest_path),
            max_nodes=MAX_MANIFEST_NODES,
            max_bytes=2 << 20,
        )
    except yamlload.YAMLError as e:
        raise PpspecError(
            f"cannot read adapter pack manifest: {e}", where=str(manifest_path), fix="fix the YAML"
        ) from None
    if not isinstance(raw, dict):
        raise PpspecError(
            "adapter pack manifest must be a mapping", where=str(manifest_path), fix="see docs/adapters.md"
        )
    try:
        m = Manifest.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise PpspecError(
            f"invalid adapter pack manifest: {loc}: {first['msg']}{more}",
            where=str(manifest_path),
            fix="see docs/adapters.md for the pack format",
        ) from None
    if m.name != path.name and source == "built-in":
        raise PpspecError(
            f"adapter pack name {m.name!r} does not match its folder {path.name!r}",
            where=str(manifest_path),
            fix="rename the folder or the pack",
        )
    patches_path = None
    if m.patches is not None:
        patches_path = path / m.patches
        if not patches_path.is_file():
            raise PpspecError(
                f"adapter pack {m.name} names patches file {m.patches} but it is missing",
                where=str(path),
                fix="add the file or drop `patches`",
            )
    rules_path, probes_path = (None if f is None else path / f for f in (m.rules, m.probes))
    for key, f in (("rules", rules_path), ("probes", probes_path)):
        if f is not None and not f.is_file():
            raise PpspecError(
                f"adapter pack {m.name} names {key} file {f.name} but it is missing",
                where=str(path),
                fix=f"add the file or drop `{key}`",
            )
    return Pack(
        name=m.name,
        description=m.description,
        matches=m.matches,
        vllm_range=m.vllm,
        capabilities={str(k): v for k, v in m.capabilities.items()},
        facts=m.facts,
        path=path,
        patches_path=patches_path,
        rules_path=rules_path,
        probes_path=probes_path,
        source=source,
        drafter_classes=tuple(c.fact(m.name) for c in m.drafter_classes),
        contract=m.contract,
    )


def _entry_point_dirs() -> list[tuple[str, Path]]:
    out = []
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            value = obj() if callable(obj) else obj
            out.append((ep.name, Path(value)))
        except Exception as e:  # noqa: BLE001 - a broken third-party pack must name itself
            raise PpspecError(
                f"adapter pack entry point {ep.name!r} ({ep.value}) failed to load: {type(e).__name__}: {e}",
                where=f"entry point group {ENTRY_POINT_GROUP}",
                fix="fix or uninstall the package that provides it",
            ) from None
    return out


@lru_cache(maxsize=1)
def _load_all() -> tuple[Pack, ...]:
    packs: dict[str, Pack] = {}
    base = packs_dir()
    if base.is_dir():
        for d in sorted(base.iterdir()):
            if d.is_dir() and (d / PACK_FILE).is_file():
                p = load_pack_dir(d)
                packs[p.name] = p
    for ep_name, d in _entry_point_dirs():
        p = load_pack_dir(d, source=f"entry point {ep_name}")
        if p.name in packs:
            raise PpspecError(
                f"adapter pack {p.name!r} from entry point {ep_name!r} clashes with the {packs[p.name].source} pack "
                "of the same name",
                where=str(d),
                fix="rename the third-party pack",
            )
        packs[p.name] = p
    return tuple(packs.values())


@lru_cache(maxsize=1)
def _drafter_classes() -> tuple[methods.DrafterClass, ...]:
    return tuple(c for p in _load_all() for c in p.drafter_classes)


def drafter_classes() -> tuple[methods.DrafterClass, ...]:
    """Every drafter class the packs describe (the methods' registry facts), in pack order."""
    return _drafter_classes()


def drafter_packs(method: str | None) -> list[Pack]:
    """The drafter packs for a method (their contracts; each says which drafters it judges)."""
    return [p for p in _load_all() if p.is_drafter_pack and p.matches_method(method) and method is not None]


def load_packs() -> list[Pack]:
    """Every pack: built-in ones and those registered under the `ppspec.adapters` entry point."""
    return list(_load_all())


def clear_cache() -> None:
    """Forget loaded packs (tests install fake entry points)."""
    _load_all.cache_clear()
    _drafter_classes.cache_clear()


def get_pack(name: str) -> Pack:
    """A pack by name; `a+b` gives the composite of packs a and b."""
    packs = {p.name: p for p in load_packs()}
    parts = []
    for n in name.split("+"):
        n = n.strip()
        if n not in packs:
            raise PpspecError(
                f"unknown adapter pack {n!r}",
                where="adapter",
                fix=f"use auto, none, or one of: {', '.join(sorted(packs))}",
            )
        parts.append(packs[n])
    return _composite(parts)


def resolve_pack(adapter: str, target_archs: list[str], drafter_archs: list[str], method: str | None) -> Pack | None:
    """The pack a profile uses.

    `none` -> None. `auto` -> the pack matching the target architecture, combined with a drafter
    pack matching the drafter (e.g. `deepseek_v3+eagle_global_layer_ids`); None when nothing matches.
    An explicit name (or `a+b`) must match: a target pack the target architecture, a drafter pack
    the drafter.
    """
    adapter = (adapter or "auto").strip()
    if adapter == "none":
        return None
    target_archs = list(target_archs or [])
    drafter_archs = list(drafter_archs or [])
    if adapter == "auto":
        packs = load_packs()
        targets = [p for p in packs if p.is_target_pack and p.matches_target(target_archs) and p.matches_method(method)]
        if len(targets) > 1:
            raise PpspecError(
                f"several adapter packs match target {target_archs}: {', '.join(p.name for p in targets)}",
                where="adapter",
                fix="name one explicitly in the profile's `adapter:`",
            )
        drafters = [
            p
            for p in packs
            if not p.is_target_pack
            and not p.is_drafter_pack
            and drafter_archs
            and p.matches.drafters
            and p.matches_drafter(drafter_archs, method)
        ]
        parts = targets + drafters
        return _composite(parts) if parts else None
    pack = get_pack(adapter)
    for part in pack.parts:
        if part.is_drafter_pack:
            raise PpspecError(
                f"adapter pack {part.name!r} is a drafter pack: `check` consults its contract by itself, and it has "
                "nothing to apply to the engine",
                where="adapter",
                fix=f"drop {part.name} from `adapter:` (use auto, or the target's pack)",
            )
        if part.is_target_pack:
            if not part.matches_target(target_archs):
                raise PpspecError(
                    f"adapter pack {part.name!r} is for {', '.join(part.matches.targets)}, not target "
                    f"{', '.join(target_archs) or '(unknown)'}",
                    where="adapter",
                    fix="use adapter: auto, or a pack listed by `ppspec adapters list` for this architecture",
                )
        elif part.matches.drafters and not part.matches_drafter(drafter_archs, method):
            raise PpspecError(
                f"adapter pack {part.name!r} is for drafters {', '.join(part.matches.drafters)}"
                + (f" with method {'/'.join(part.matches.methods)}" if part.matches.methods else "")
                + f", not {', '.join(drafter_archs) or '(no drafter)'} with method {method}",
                where="adapter",
                fix="use adapter: auto, or drop this pack",
            )
    return pack


def load_pack_module(pack_name: str, kind: str, file: Path) -> Any:
    """Import one of a pack's Python files (`patches`, `rules`) by path under a private module
    name (never as a top-level `adapters` package); the same module object on later calls. Raises
    whatever importing it raises: callers turn that into their own refusal or finding."""
    import importlib.util
    import sys

    mod_name = f"ppspec_cli._packs.{pack_name}.{kind}"
    mod = sys.modules.get(mod_name)
    if mod is not None and getattr(mod, "__file__", None) == str(file):
        return mod
    spec = importlib.util.spec_from_file_location(mod_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod  # torch.compile looks traced functions' modules up here
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    return mod


def pack_rules(part: Pack) -> tuple[list[tuple[str, Any]], tuple[Code, ...]]:
    """A pack's rules file: its named rules (`get_rules()`: (name, fn) pairs) and the codes they
    report (its `CODES`: Code objects), registered as the pack's when the file loads. A rule pack's
    codes are named `<pack>-...`; a drafter pack's keep vLLM-facing names (`drafter-...`,
    `dflash-...`). Raises what loading raises, or ValueError / DuplicateCode for a code it may
    not own: callers turn that into `pack-rule-failed`."""
    assert part.rules_path is not None
    mod = load_pack_module(part.name, "rules", part.rules_path)
    codes = tuple(getattr(mod, "CODES", ()))
    for c in codes:
        if not isinstance(c, Code) or not re.match(_CODE, c.code.replace("_", "")):
            raise ValueError(f"CODES holds {c!r}, not a finding code (ppspec_cli.findings.Code)")
        if not part.is_drafter_pack and not c.code.startswith(f"{part.name}-"):
            raise ValueError(f"code {c.code!r} is not named `{part.name}-...`")
    register(f"pack {part.name}", *codes)
    return list(mod.get_rules()), codes


def inner_decoder_path(pack: Pack, target_arch: str) -> str:
    """Attribute path from the served model to the inner decoder vLLM's PP gate reads."""
    for part in pack.parts:
        if target_arch in part.facts.inner_decoder_path:
            return part.facts.inner_decoder_path[target_arch]
    return "model"


def inner_decoder_ref(pack: Pack, target_arch: str, platform: str, version: str | None = None) -> str | None:
    """`module:Class` of the inner decoder for an architecture on a platform: the pack's fact where
    it states one (a fact vLLM's source does not give), else vLLM's own source read per release
    (knowledge/arch, the release `version` or the newest verified one) for an architecture the pack
    matches."""
    for part in pack.parts:
        per_platform = part.facts.inner_decoder.get(target_arch)
        if per_platform:
            return per_platform.get(platform) or per_platform.get("default")
    if not any(target_arch in part.matches.targets for part in pack.parts):
        return None
    from ppspec_cli.knowledge import archtable

    table = archtable.committed(version) if version else archtable.newest()
    facts = table.target(target_arch, platform) if table is not None else None
    return facts.get("decoder") if facts else None


#: The capabilities vLLM's source decides per architecture (knowledge/archtable.table_support): a
#: pack states them only where it patches them (or for a release with no table).
TABLE_CAPABILITIES = ("aux_relay_over_pp", "target_embed_on_last_stage")


def table_lines(part: Pack, capability: str) -> list[dict[str, Any]]:
    """What vLLM's source decides for a capability the pack leaves to it (an empty line list), per
    verified release in the pack's range: [{"vllm", "platforms", "status", "reason"}], platforms
    with the same status grouped."""
    from ppspec_cli.knowledge import archtable

    out: list[dict[str, Any]] = []
    for v in archtable.committed_versions():
        if not in_range(part.vllm_range, v):
            continue
        groups: dict[str, list[str]] = {}
        reasons: dict[str, str] = {}
        for pl in PLATFORMS:
            got = _from_table(part, capability, pl, v)
            st = got.status if got is not None else "unknown"
            groups.setdefault(st, []).append(pl)
            reasons.setdefault(
                st,
                got.reason
                if got is not None
                else "vLLM's source does not decide it for every architecture the pack matches",
            )
        out += [{"vllm": v, "platforms": pls, "status": st, "reason": reasons[st]} for st, pls in groups.items()]
    return out


def _table_provides(part: Pack, capability: str) -> bool:
    """vLLM's source gives the capability to the pack's architectures on some platform and release."""
    from ppspec_cli.knowledge import archtable

    return any(
        (got := _from_table(part, capability, pl, v)) is not None and got.ok
        for v in archtable.committed_versions()
        for pl in PLATFORMS
    )


def _from_table(part: Pack, capability: str, platform: str, version: str) -> Support | None:
    """A capability the pack states nothing of, for the architectures it matches, from the table of
    vLLM's source for that release: when every matched architecture the release registers gets the
    same verdict (the packs keep only what vLLM lacks: issue 31)."""
    if capability not in TABLE_CAPABILITIES or not part.matches.targets or not in_range(part.vllm_range, version):
        return None
    from ppspec_cli.knowledge import archtable

    table = archtable.committed(version)
    if table is None:
        return None
    got = {
        a: archtable.table_support(table, a, capability, platform) for a in part.matches.targets if table.registers(a)
    }
    verdicts = {g[0] for g in got.values() if g is not None}
    if len(verdicts) != 1 or None in got.values():
        return None
    arch, found = next(iter(got.items()))
    assert found is not None
    status, reason = found
    return Support(
        capability,
        cast(Status, status),
        f"{reason} ({arch}; the {part.name} pack matches it)" if len(got) == 1 else reason,
        part.name,
    )
