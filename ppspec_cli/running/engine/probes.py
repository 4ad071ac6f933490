"""Tripwires: behaviour probes of the installed vLLM, run by `ppspec check` before a launch.

Each probe asks vLLM itself (construct its config object, call its function on a small input, read a
class attribute) and compares with what ppspec's pure functions (ppspec_cli.planning.plan) predict. A probe
returns a result object; results are data, rendered once by the caller. A probe that cannot run is
`not_run`, never `passed`.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Literal

from ppspec_cli.findings import SEVERITIES, Code, Finding, register
from ppspec_cli.io.env import env_set
from ppspec_cli.io.env import get as env_get
from ppspec_cli.knowledge import methods
from ppspec_cli.knowledge.engine import installed_vllm
from ppspec_cli.planning import plan as P

Status = Literal["passed", "failed", "not_run"]


@dataclass(frozen=True)
class ProbeResult:
    name: str
    status: Status
    detail: str
    severity: Literal["error", "warning", "info"] = "error"  # how much a failure matters for this profile
    fix: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def finding(self) -> Finding | None:
        """The probe as it enters the preflight (one finding type): a failed probe is a
        `probe-<name>` finding at its severity, one not run an info; a passed probe none."""
        code = probe_code(self.name)
        if self.status == "failed":
            return code.at(
                "platform", f"engine probe {self.name} failed: {self.detail}", severity=self.severity, fix=self.fix
            )
        if self.status == "not_run":
            return code.at("platform", f"engine probe {self.name} not run: {self.detail}", severity="info")
        return None


#: The reference section of the probes' codes.
PROBES_SECTION = "Behaviour probes of the installed vLLM"


_PROBE_CODES: dict[str, Code] = {}


def probe_code(name: str, owner: str = "probes") -> Code:
    """The code of the probe `name` (`probe-<name>`; a pack's own probe is `<pack>-<name>`, its code
    registered as the pack's when its probes load), registered the first time it is asked for: the
    core probes' when this module loads."""
    if name in _PROBE_CODES:
        return _PROBE_CODES[name]
    code = Code(
        f"probe-{name}",
        SEVERITIES,
        f"The behaviour probe `{name}` of the installed vLLM failed or did not run (`check --probes`; every engine "
        "process `serve` starts runs it too).",
        "The message says what the probe saw and the fix.",
        section=PROBES_SECTION,
    )
    register(owner, code)
    _PROBE_CODES[name] = code
    return code


# ---------------------------------------------------------------------------------------------
# The installed vLLM, from metadata only


# ---------------------------------------------------------------------------------------------
# Helpers


def _not_run(name: str, why: str) -> ProbeResult:
    return ProbeResult(name, "not_run", why, "info")


def _guard(name: str, fn: Callable[[], ProbeResult]) -> ProbeResult:
    """Run a probe; an import failure is not_run, any other crash is failed (with the reason)."""
    try:
        got = fn()
    except ImportError as e:
        return _not_run(name, f"vLLM piece not importable here: {e}")
    except Exception as e:  # noqa: BLE001 - a probe that crashes is itself a finding
        return ProbeResult(
            name,
            "failed",
            f"probe crashed: {type(e).__name__}: {e}",
            "warning",
            "report this with `ppspec check --json`",
        )
    if not isinstance(got, ProbeResult):  # a pack's probe returning something else: a failure, never read by guesswork
        return ProbeResult(
            name,
            "failed",
            f"probe returned {type(got).__name__}, not a ProbeResult",
            "warning",
            "report this to the pack's author",
        )
    return got


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """vLLM logs every uneven default split at INFO; a sweep of them is noise."""
    import logging

    log = logging.getLogger(name)
    old = log.level
    log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        log.setLevel(old)


class _Cfg:
    """A drafter config dict seen the way vLLM sees an HF config: top-level keys as attributes,
    nested objects (eagle_config, dflash_config) left as dicts."""

    def __init__(self, d: dict[str, Any]):
        for k, v in d.items():
            if isinstance(k, str) and k.isidentifier():
                setattr(self, k, v)


def _spec_config(drafter_config: dict[str, Any]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=_Cfg(drafter_config)))


#: Drafter configs covering every branch of vLLM's tap resolution (compared even without a drafter).
TAP_CASES: tuple[dict[str, Any], ...] = (
    {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
    {"dflash_config": {"target_layer_ids": [0, 5, 9]}},
    {"dspark_target_layer_ids": [3, 7]},
    {"dspark_target_layer_ids": [3, 7], "model_type": "deepseek_v41"},
    {"target_layer_ids": [2, 4]},
    {"eagle_config": {"layer_ids": [6]}},
    {"dflash_config": {"layer_ids": [8]}},
    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}},
    {"dflash_config": {"target_layer_ids": [0, 5]}, "eagle_config": {"use_aux_hidden_state": True}},
    {},
)


# ---------------------------------------------------------------------------------------------
# Probes


def probe_draft_pp_pinned() -> ProbeResult:
    """vLLM gives the drafter its own ParallelConfig with pipeline_parallel_size=1 (since 0.30)."""
    name = "draft-pp-pinned"

    def run() -> ProbeResult:
        from vllm.config import ParallelConfig, SpeculativeConfig

        maker = getattr(SpeculativeConfig, "create_draft_parallel_config", None)
        if maker is None:
            return ProbeResult(
                name, "failed", "SpeculativeConfig.create_draft_parallel_config is missing", "error", "use vLLM >= 0.30"
            )
        target = ParallelConfig(pipeline_parallel_size=2)
        draft = maker(target, 1)
        if draft.pipeline_parallel_size != 1:
            return ProbeResult(
                name,
                "failed",
                f"a PP=2 target gives the drafter pipeline_parallel_size={draft.pipeline_parallel_size}; the drafter "
                "must run whole on the last stage",
                "error",
                "use vLLM >= 0.30",
            )
        return ProbeResult(name, "passed", "a PP=2 target gives the drafter pipeline_parallel_size=1", "info")

    return _guard(name, run)


def probe_tap_set_normalized(taps: tuple[int, ...] | None = None) -> ProbeResult:
    """EagleModelMixin stores the tap set sorted and de-duplicated, as plan.normalize_taps does."""
    name = "tap-set-normalized"

    def run() -> ProbeResult:
        from vllm.model_executor.models.interfaces import EagleModelMixin

        from ppspec_cli.running.engine import relay

        sample = tuple(taps) if taps else (5, 1, 5, 3, 0)
        bare = type("_BareDecoder", (EagleModelMixin,), {"start_layer": 0})()
        with relay.quiet():  # the plugin's tap watch, if installed, stays silent
            bare._set_aux_hidden_state_layers(sample)
        got = tuple(bare.aux_hidden_state_layers)
        want = P.normalize_taps(sample)
        if got != want:
            return ProbeResult(
                name,
                "failed",
                f"vLLM stores taps {sample} as {got}; ppspec assumes {want}",
                "error",
                "report this: ppspec's tap model is out of date",
            )
        return ProbeResult(name, "passed", f"vLLM stores taps {sample} as {got}", "info")

    return _guard(name, run)


def probe_tap_resolution(drafter_config: dict[str, Any] | None) -> ProbeResult:
    """vLLM's V2 reading of a drafter config (get_eagle3_aux_layers_from_config) equals
    plan.v2_taps_from_config, on the profile's drafter and on one config per rule."""
    name = "tap-resolution-v2"

    def run() -> ProbeResult:
        from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config

        cases = list(TAP_CASES) + ([drafter_config] if drafter_config else [])
        for cfg in cases:
            vllm_taps = get_eagle3_aux_layers_from_config(_spec_config(cfg))
            ours = P.v2_taps_from_config(cfg).taps
            if (tuple(vllm_taps) if vllm_taps else None) != (tuple(ours) if ours else None):
                which = "the profile's drafter config" if cfg is drafter_config else f"config {cfg}"
                return ProbeResult(
                    name,
                    "failed",
                    f"for {which} vLLM's V2 runner taps {vllm_taps}, ppspec predicts {ours}",
                    "error",
                    "pin the taps in the profile (drafter.taps) and report this",
                )
        extra = " and the profile's drafter" if drafter_config else ""
        return ProbeResult(name, "passed", f"vLLM and ppspec agree on {len(TAP_CASES)} rule cases{extra}", "info")

    return _guard(name, run)


def probe_tap_resolution_v1(drafter_config: dict[str, Any] | None) -> ProbeResult:
    """The V1 runner's reading (GPUModelRunner._get_eagle3_aux_layers_from_config; CPU and GPU
    fallbacks) equals plan.v1_taps_from_config."""
    name = "tap-resolution-v1"

    def run() -> ProbeResult:
        from types import SimpleNamespace

        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        reader = getattr(GPUModelRunner, "_get_eagle3_aux_layers_from_config", None)
        if reader is None:
            return _not_run(name, "this vLLM's V1 runner has no _get_eagle3_aux_layers_from_config")
        cases = list(TAP_CASES) + ([drafter_config] if drafter_config else [])
        for cfg in cases:
            fake_runner = SimpleNamespace(speculative_config=_spec_config(cfg))
            vllm_taps = reader(fake_runner)
            ours = P.v1_taps_from_config(cfg).taps
            if (tuple(vllm_taps) if vllm_taps else None) != (tuple(ours) if ours else None):
                which = "the profile's drafter config" if cfg is drafter_config else f"config {cfg}"
                return ProbeResult(
                    name,
                    "failed",
                    f"for {which} vLLM's V1 runner taps {vllm_taps}, ppspec predicts {ours}",
                    "error",
                    "pin the taps in the profile and report this",
                )
        return ProbeResult(name, "passed", f"vLLM's V1 runner and ppspec agree on {len(TAP_CASES)} rule cases", "info")

    return _guard(name, run)


def probe_partition(num_layers: int | None, pp: int, partition: list[int] | None) -> ProbeResult:
    """vLLM's get_pp_indices (with VLLM_PP_LAYER_PARTITION set as ppspec will set it) gives the
    plan's stage bounds; the default split agrees with plan.default_partition over a sweep."""
    name = "partition"

    def run() -> ProbeResult:
        import vllm.envs as envs
        from vllm.distributed.utils import get_pp_indices

        def vllm_bounds(n: int, k: int) -> list[tuple[int, int]]:
            return [tuple(get_pp_indices(n, r, k)) for r in range(k)]  # type: ignore[misc]

        with env_set("VLLM_PP_LAYER_PARTITION", None), _quiet_logger("vllm.distributed.utils"):
            if envs.VLLM_PP_LAYER_PARTITION is not None:
                return _not_run(name, "vLLM's environment cache pins VLLM_PP_LAYER_PARTITION in this process")
            for n in range(1, 97):
                for k in range(1, min(n, 8) + 1):
                    theirs, ours = vllm_bounds(n, k), P.stage_bounds(P.default_partition(n, k))
                    if theirs != ours:
                        return ProbeResult(
                            name,
                            "failed",
                            f"default split of {n} layers over {k} stages: vLLM {theirs}, ppspec {ours}",
                            "error",
                            "set topology.layer_partition explicitly and report this",
                        )
            if num_layers is None:
                return ProbeResult(
                    name,
                    "passed",
                    "vLLM's default split agrees with ppspec (1-96 layers, 1-8 stages); target depth unknown",
                    "info",
                )
            if partition is None:
                got, detail = vllm_bounds(num_layers, pp), "default split"
        if partition is not None:
            value = ",".join(str(x) for x in partition)
            detail = f"VLLM_PP_LAYER_PARTITION={value}"
            with env_set("VLLM_PP_LAYER_PARTITION", value):
                if envs.VLLM_PP_LAYER_PARTITION != value:
                    return _not_run(
                        name, "vLLM's environment cache does not see VLLM_PP_LAYER_PARTITION changes in this process"
                    )
                try:
                    got = vllm_bounds(num_layers, pp)
                except ValueError as e:
                    return ProbeResult(
                        name,
                        "failed",
                        f"vLLM rejects {detail}: {e}",
                        "error",
                        "make the partition sum to the target's layer count with one entry per stage",
                    )
        want = P.stage_bounds(list(partition) if partition else P.default_partition(num_layers, pp))
        if got != want:
            return ProbeResult(
                name,
                "failed",
                f"{detail}: vLLM splits {num_layers} layers as {got}, ppspec planned {want}",
                "error",
                "set topology.layer_partition explicitly",
            )
        return ProbeResult(
            name,
            "passed",
            f"{detail}: vLLM splits {num_layers} layers over {pp} stages as planned {[list(b) for b in got]}",
            "info",
        )

    return _guard(name, run)


def probe_v2_runner(method: str | None, pp: int) -> ProbeResult:
    """The platform runs Model Runner V2 (the only runner that relays taps over PP). A vLLM without
    Model Runner V1 (0.34: its module is gone) has no fallback: a V1 request is an error and a
    build without Triton either refuses to start (x86 CPUs) or runs a CPU runner that refuses
    speculative decoding."""
    name = "model-runner-v2"
    matters = pp > 1 and methods.relay_gated(method)
    sev: Literal["error", "warning", "info"] = "error" if matters else "info"

    def run() -> ProbeResult:
        import importlib.util

        forced = env_get("VLLM_USE_V2_MODEL_RUNNER")
        inst = installed_vllm()
        platform = inst.platform if inst else None
        from vllm.triton_utils import HAS_TRITON

        if importlib.util.find_spec("vllm.v1.worker.gpu_model_runner") is None:
            return _v2_only(name, method, forced, HAS_TRITON, platform)
        why = None
        if forced is not None and forced.strip().lower() in ("0", "false", "no", "off"):
            why = "VLLM_USE_V2_MODEL_RUNNER=0 selects the V1 runner"
        elif not HAS_TRITON:
            why = (
                f"Model Runner V2 needs Triton, which this {platform or 'vLLM'} build cannot use: vLLM falls back "
                "to the V1 runner, which never relays taps between stages"
            )
        if why:
            note = "" if matters else " (does not matter for this profile)"
            return ProbeResult(
                name,
                "failed",
                why + note,
                sev,
                "run EAGLE3/DFlash/DSpark with PP>1 on a GPU build of vLLM >= 0.30, or use pipeline_parallel: 1 here"
                if matters
                else "",
            )
        return ProbeResult(
            name,
            "passed",
            "Triton is usable: vLLM selects Model Runner V2 unless a feature it lacks is enabled",
            "info",
        )

    return _guard(name, run)


def _v2_only(name: str, method: str | None, forced: str | None, has_triton: bool, platform: str | None) -> ProbeResult:
    """The installed vLLM has no Model Runner V1 (0.34): what stands between it and Model Runner V2."""
    if forced is not None and forced.strip() != "1":
        return ProbeResult(
            name,
            "failed",
            f"VLLM_USE_V2_MODEL_RUNNER={forced.strip()[:20]} is an error in this vLLM: Model Runner V1 was removed, "
            "and vLLM refuses to start",
            "error",
            "unset VLLM_USE_V2_MODEL_RUNNER (or set it to 1)",
        )
    if not has_triton:
        return ProbeResult(
            name,
            "failed",
            f"this {platform or 'vLLM'} build has no Triton and this vLLM has no Model Runner V1: on x86 CPUs vLLM "
            "refuses to start "
            "without triton-cpu; on other CPUs it runs its standalone CPU runner, which refuses speculative decoding",
            "error" if method else "info",
            "install triton-cpu next to this vLLM, or serve on a build with Triton" if method else "",
        )
    return ProbeResult(
        name, "passed", "this vLLM has only Model Runner V2 (V1 was removed), and Triton is usable", "info"
    )


def probe_vllm_version() -> ProbeResult:
    """Which vLLM runs here (its version module) and whether ppspec verified that release. Never a
    failure: an unverified version is what the other probes then read by value."""
    name = "vllm-version"

    def run() -> ProbeResult:
        from ppspec_cli.knowledge.engine import running_vllm_version
        from ppspec_cli.knowledge.versions import verdict, verified_text

        v = running_vllm_version()
        if v is None:
            return _not_run(name, "the installed vLLM reports no version")
        vv = verdict(v)
        if vv.verified:
            return ProbeResult(name, "passed", f"vLLM {v} is a verified release ({verified_text()})", "info")
        return ProbeResult(
            name,
            "passed",
            f"vLLM {v} is unverified ({vv.why}); the probes below read this engine by value instead of trusting "
            "ppspec's tables",
            "info",
        )

    return _guard(name, run)


@contextlib.contextmanager
def _pack_patches_applied(pack: Any) -> Iterator[list[Any]]:
    """Apply and verify a pack's patches in this process, revert them on exit."""
    from ppspec_cli.running.engine.patching import revert_all
    from ppspec_cli.running.engine.plugin import load_patches

    patches: list[Any] = []
    for part_name, file in pack.patch_files:
        patches.extend(load_patches(part_name, file))
    try:
        for p in patches:
            p.apply()
        for p in patches:
            p.verify()
        yield patches
    finally:
        revert_all(patches)


def probe_pack_patches(pack: Any) -> ProbeResult:
    """The pack's patches apply to the installed vLLM and pass their value checks (then are reverted)."""
    name = "pack-patches"
    if pack is None:
        return _not_run(name, "no adapter pack")
    if pack.native:
        return _not_run(name, f"pack {pack.name} is native (no patches)")

    def run() -> ProbeResult:
        from ppspec_cli.running.engine.patching import PatchAnchorDrift
        from ppspec_cli.running.engine.plugin import PluginRefusal

        try:
            with _pack_patches_applied(pack) as patches:
                names = [p.qualname for p in patches if p.skipped is None]
                native = [f"{p.qualname} ({p.native_reason})" for p in patches if p.native_reason]
        except PluginRefusal as e:
            return ProbeResult(name, "failed", str(e), "error", e.fix)
        except PatchAnchorDrift as e:
            return ProbeResult(
                name,
                "failed",
                str(e),
                "error",
                "this vLLM's code moved where the patch applies: the plugin refuses the engine start; use a release "
                "the pack was verified on, or update the pack",
            )
        except Exception as e:  # noqa: BLE001 - PatchError and friends
            return ProbeResult(
                name, "failed", f"{type(e).__name__}: {e}", "error", "use a vLLM the pack supports, or report this"
            )
        extra = f"; skipped, the installed vLLM already does it: {'; '.join(native)}" if native else ""
        return ProbeResult(
            name,
            "passed",
            f"{len(names)} patches applied and verified by value, then reverted: {', '.join(names) or 'none'}{extra}",
            "info",
        )

    return _guard(name, run)


def probe_inner_decoder(
    target_arch: str | None, method: str | None, pp: int, pack: Any, family: Any = None
) -> ProbeResult:
    """The target's inner decoder opts in to relaying taps over PP, natively or through the applied
    pack. The class is named by the applied pack, else by the pack that describes the family
    (`adapter: none`: its patches are not applied, so only a native opt-in passes)."""
    name = "inner-decoder-opt-in"
    if target_arch is None:
        return _not_run(name, "target architecture unknown")
    gated = pp > 1 and methods.relay_gated(method)

    def run() -> ProbeResult:
        found = _decoder(target_arch, pack, family)
        if isinstance(found, ProbeResult):
            return found
        ref, cls = found
        native = getattr(cls, "supports_aux_hidden_states_over_pp", False) is True
        if native:
            return ProbeResult(name, "passed", f"{ref} opts in natively", "info")
        if pack is not None and "aux_relay_over_pp" in pack.provides and not pack.native:
            with _pack_patches_applied(pack):
                patched = getattr(cls, "supports_aux_hidden_states_over_pp", False) is True
            if patched:
                return ProbeResult(
                    name,
                    "passed",
                    f"{ref} does not opt in; pack {pack.name} opts it in (checked by applying the pack here)",
                    "info",
                )
            return ProbeResult(
                name,
                "failed",
                f"{ref} still does not opt in with pack {pack.name} applied",
                "error" if gated else "info",
                "report this",
            )
        if not gated:
            return _not_run(
                name, f"{ref} does not opt in, which only matters for {'/'.join(sorted(methods.RELAY_GATED))} with PP>1"
            )
        return ProbeResult(
            name,
            "failed",
            f"{ref} does not opt in to relaying taps over PP on this vLLM/platform: vLLM refuses {method} with PP>1",
            "error",
            "use pipeline_parallel: 1, another platform's build, or a pack that provides aux_relay_over_pp",
        )

    return _guard(name, run)


def _decoder(
    target_arch: str, pack: Any, family: Any, name: str = "inner-decoder-opt-in"
) -> tuple[str, type] | ProbeResult:
    """The target's inner decoder class: named by the applied pack, else by the describing one,
    else found through vLLM's own model registry (knowledge.engine.inner_decoder_of)."""
    from ppspec_cli.knowledge import engine
    from ppspec_cli.knowledge.packs import inner_decoder_ref

    inst = installed_vllm()
    platform = inst.platform if inst else "cuda"
    desc = pack if pack is not None else family
    ref = inner_decoder_ref(desc, target_arch, platform) if desc is not None else None
    if ref is not None:
        try:
            return ref, engine.import_ref(ref)
        except Exception as e:  # noqa: BLE001 - GPU-only implementations may not import on this host
            return _not_run(name, f"{ref} cannot be imported here: {type(e).__name__}: {e}")
    try:
        cls = engine.inner_decoder_of(target_arch)
    except Exception as e:  # noqa: BLE001
        return _not_run(name, f"vLLM's registry cannot load {target_arch} here: {type(e).__name__}: {e}")
    if cls is None:
        return _not_run(name, f"neither a pack nor vLLM's registry says which inner decoder {target_arch} builds")
    return engine.class_ref(cls), cls


def probe_target_embed(
    target_arch: str | None, method: str | None, pp: int, drafter_has_embed: bool | None, pack: Any, family: Any = None
) -> ProbeResult:
    """The target's inner decoder builds a real embed_tokens on the last PP stage, read by value
    (knowledge.engine.builds_embed_on_last_stage), when the drafter shares the target's."""
    name = "target-embed-last-stage"
    if target_arch is None:
        return _not_run(name, "target architecture unknown")
    m = methods.of(method)
    if not (pp > 1 and m is not None and m.needs_target_embed and drafter_has_embed is False):
        return _not_run(name, "only matters for a drafter without its own embed_tokens under PP")

    def run() -> ProbeResult:
        from ppspec_cli.knowledge.engine import builds_embed_on_last_stage

        found = _decoder(target_arch, pack, family, name)
        if isinstance(found, ProbeResult):
            return found
        ref, cls = found
        got = builds_embed_on_last_stage(cls)
        if got is None:
            return _not_run(name, f"{ref}'s constructor does not tell whether it builds embed_tokens on the last stage")
        if got:
            return ProbeResult(
                name,
                "passed",
                f"{ref} builds embed_tokens on the last stage when the drafter needs the target's",
                "info",
            )
        if pack is not None and not pack.native and "target_embed_on_last_stage" in pack.provides:
            with _pack_patches_applied(pack):
                patched = builds_embed_on_last_stage(cls)
            if patched:
                return ProbeResult(
                    name,
                    "passed",
                    f"{ref} does not; pack {pack.name} builds it (checked by applying the pack here)",
                    "info",
                )
        return ProbeResult(
            name,
            "failed",
            f"{ref} builds embed_tokens on the first stage only: the drafter, which shares the target's, stops at "
            "load ('needs the target input embedding, but it is unavailable on this PP stage')",
            "error",
            "use a drafter with its own embed_tokens, an adapter pack that provides target_embed_on_last_stage, or "
            "pipeline_parallel: 1",
        )

    return _guard(name, run)


def probe_pack_own(family: Any) -> list[ProbeResult]:
    """The describing packs' own probes (their `probes` file's get_probes(): (name, fn) pairs, fn()
    returning a ProbeResult), named `<pack>-<name>`. One that cannot load or crashes is a failed
    probe with the reason, never a traceback."""
    from ppspec_cli.knowledge.packs import load_pack_module

    out: list[ProbeResult] = []
    for part in family.parts if family is not None else ():
        if part.probes_path is None:
            continue
        try:
            items = list(load_pack_module(part.name, "probes", part.probes_path).get_probes())
        except Exception as e:  # noqa: BLE001 - a broken pack must not break check
            out.append(
                ProbeResult(
                    f"{part.name}-probes",
                    "failed",
                    f"cannot load {part.probes_path.name}: {type(e).__name__}: {e}",
                    "warning",
                    "fix the pack, or report it to its author",
                )
            )
            continue
        for name, fn in items:
            probe_code(f"{part.name}-{name}", f"pack {part.name}")
            out.append(_guard(f"{part.name}-{name}", fn))
    return out


#: Every probe run_probes runs, in its order (the packs' own come after, named `<pack>-<name>`).
PROBE_NAMES = (
    "draft-pp-pinned",
    "tap-set-normalized",
    "tap-resolution-v2",
    "tap-resolution-v1",
    "partition",
    "model-runner-v2",
    "vllm-version",
    "pack-patches",
    "inner-decoder-opt-in",
    "target-embed-last-stage",
)


for _name in PROBE_NAMES:
    probe_code(_name)


def run_probes(
    *,
    target_arch: str | None,
    method: str | None,
    num_layers: int | None,
    pp: int,
    partition: list[int] | None,
    drafter_config: dict[str, Any] | None,
    pack: Any,
    family: Any = None,
    drafter_has_embed: bool | None = None,
) -> list[ProbeResult]:
    """Every probe, in a fixed order, then the describing packs' own (`family`). Without an
    importable vLLM every probe is not_run."""
    if installed_vllm() is None:
        return [_not_run(n, "vLLM is not installed here") for n in PROBE_NAMES]
    return [
        probe_draft_pp_pinned(),
        probe_tap_set_normalized(),
        probe_tap_resolution(drafter_config),
        probe_tap_resolution_v1(drafter_config),
        probe_partition(num_layers, pp, partition),
        probe_v2_runner(method, pp),
        probe_vllm_version(),
        probe_pack_patches(pack),
        probe_inner_decoder(target_arch, method, pp, pack, family),
        probe_target_embed(target_arch, method, pp, drafter_has_embed, pack, family),
        *probe_pack_own(family),
    ]
