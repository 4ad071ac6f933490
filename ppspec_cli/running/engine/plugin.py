"""The in-engine plugin (entry point `vllm.general_plugins: ppspec`).

vLLM calls `register()` in every engine process: the API server process, the registry inspection
subprocess, the engine core, and each worker before it builds the model. Unless `ppspec serve`
started the engine (environment variable PPSPEC_PLAN_FILE set), it returns at once and imports
nothing. When active it:

1. reads the plan file (ppspec_cli.running.planfile) — missing, unparseable or foreign: refuse;
2. records the running vLLM's version and whether ppspec verified it (never a gate: see 3 and 4);
3. loads the pack's patches module(s) by file path and reads each patch's anchor in the running
   code: it applies (idempotently, verified by value) where the anchor matches, stands aside where
   vLLM already does what it adds (reported as native), and refuses by name where it has drifted;
4. asserts by value that the behaviours the profile needs (expect.needs) are present in this process;
5. installs the in-engine tripwires: partition (vLLM's own get_pp_indices, with this process's
   VLLM_PP_LAYER_PARTITION), pipeline size (the engine's config, when reachable), and a watch on
   EagleModelMixin._set_aux_hidden_state_layers that compares the taps and the stage's layer range
   the engine really uses with the plan when the model is built;
6. writes `<status_dir>/<pid>.json` (one JSON object, one line): role, pid, pack, patches, verified.

Any failure raises one `PluginRefusal` (a RuntimeError) naming the pack, the patch, the vLLM version
and the fix — before the model is built — after writing the failure to the status file too.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ppspec_cli.io import env as env_io

ENV_PLAN_FILE = "PPSPEC_PLAN_FILE"
STATUS_FORMAT = "ppspec-plugin-status/1"
#: Patches the plugin itself installs (not from a pack): the tap watch.
CORE_PACK = "ppspec"


class PluginRefusal(RuntimeError):
    """The plugin refuses to let this engine start. str() is the whole, self-contained message."""

    def __init__(
        self, what: str, *, pack: str | None = None, patch: str | None = None, vllm: str | None = None, fix: str = ""
    ):
        self.what, self.pack, self.patch, self.vllm, self.fix = what, pack, patch, vllm, fix
        ctx = [f"pack {pack or '(none)'}"]
        if patch:
            ctx.append(f"patch {patch}")
        ctx.append(f"vLLM {vllm or 'unknown'}")
        msg = f"ppspec plugin refused to start the engine: {what} [{'; '.join(ctx)}]"
        if fix:
            msg += f". Fix: {fix}"
        super().__init__(msg)


_state: dict[str, Any] = {
    "active": False,
    "patches": [],
    "status": None,
    "status_path": None,
    "expect": {},
    "plan": None,
}


# ---------------------------------------------------------------------------------------------
# Entry point


def register() -> None:
    """vLLM's general-plugin hook. Inert (and import-free) unless PPSPEC_PLAN_FILE is set."""
    path = env_io.get(ENV_PLAN_FILE)
    if not path:
        return
    if _state["active"] and _state["status"]["pid"] == os.getpid():
        _state["status"]["calls"] += 1
        _write_status()
        return
    if _state["active"]:  # a forked child inherited the parent's state: this process reports itself
        _state.update({"active": False, "patches": [], "status": None, "status_path": None})
    _activate(path)


# ---------------------------------------------------------------------------------------------
# Activation


def _vllm_version() -> str | None:
    """What the running vLLM reports (its version module), else its package metadata."""
    from ppspec_cli.knowledge.engine import running_vllm_version

    return running_vllm_version()


def _activate(plan_path: str) -> None:
    from ppspec_cli.running.planfile import PlanFileError, read_plan_file

    status: dict[str, Any] = {
        "format": STATUS_FORMAT,
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "role": "unknown",
        "rank": None,
        "pp_rank": None,
        "process_name": _process_name(),
        "plan_file": plan_path,
        "pack": None,
        "vllm": None,
        "patches": [],
        "verified": False,
        "ok": False,
        "error": None,
        "tripwires": {},
        "observed": {},
        "calls": 1,
        "time": time.time(),
    }
    role, rank, vllm_config, pp_size = _caller_context()
    status["role"], status["rank"], status["pp_size"] = role, rank, pp_size
    _state["status"] = status
    try:
        data = read_plan_file(plan_path)
    except PlanFileError as e:
        # No status_dir known: the refusal itself is the record.
        raise PluginRefusal(f"{e.what} ({plan_path})", fix=e.fix or "") from None
    status_dir = data.get("status_dir")
    if status_dir:
        _state["status_path"] = Path(status_dir) / f"{os.getpid()}.json"
    _state["expect"] = dict(data.get("expect") or {})
    _state["plan"] = data.get("plan") or {}
    status["pack"] = data.get("pack")
    version = _vllm_version()
    status["vllm"] = version
    from ppspec_cli.knowledge.versions import verdict

    status["vllm_verified"] = verdict(version).verified if version else False
    try:
        patches = _apply_pack(data.get("pack"), version)
        status["patches"] = [dict(p.report(), verified=True) for p in patches if p.skipped is None]
        status["skipped"] = [p.report() for p in patches if p.skipped is not None]
        status["verified"] = True
        _state["patches"] = patches
        status["needs"] = assert_needs(_state["expect"].get("needs") or [], version, data.get("pack"))
        _startup_tripwires(pp_size, version, data.get("pack"), status)
        if vllm_config is not None:
            status["pp_rank"] = _pp_rank(vllm_config, rank)
        status["ok"] = True
        _state["active"] = True
    except PluginRefusal as e:
        status["error"] = str(e)
        _revert()
        _write_status()
        raise
    _write_status()


def _apply_pack(pack_name: str | None, version: str | None) -> list[Any]:
    """Pack patches plus the core tap watch: applied, verified, or one PluginRefusal."""
    from ppspec_cli.running.engine.patching import PatchError, PatchTargetMissing

    patches: list[Any] = []
    if pack_name:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.knowledge.packs import get_pack

        try:
            pack = get_pack(pack_name)
        except PpspecError as e:
            raise PluginRefusal(e.what, pack=pack_name, vllm=version, fix=e.fix or "") from None
        # The pack's version range is evidence, not a gate: each patch's anchor is read from the
        # running code (applies where it matches, stands aside where vLLM already does what it
        # adds, refuses by name where it has drifted), and the behaviours the profile needs are
        # asserted by value afterwards (assert_needs).
        for part_name, file in pack.patch_files:
            patches.extend(load_patches(part_name, file, version))
    patches.extend(core_patches())
    current = None
    try:
        applied: list[Any] = []
        for p in patches:
            current = p
            p.apply()
            applied.append(p)
        for p in patches:
            current = p
            p.verify()
    except PatchTargetMissing as e:
        _revert_list(patches)
        raise PluginRefusal(
            f"the installed vLLM does not have what the patch expects: {e}",
            pack=pack_name,
            patch=getattr(current, "qualname", None),
            vllm=version,
            fix="this vLLM's code differs where the patch applies: use a vLLM release the pack was verified on "
            "(`ppspec adapters show <pack>`), or update the pack",
        ) from None
    except PatchError as e:
        _revert_list(patches)
        raise PluginRefusal(
            str(e),
            pack=pack_name,
            patch=getattr(current, "qualname", None),
            vllm=version,
            fix="another plugin may patch the same vLLM code, or this vLLM differs from what the pack expects; "
            "run `ppspec check` and report it",
        ) from None
    return patches


def assert_needs(needs: list[Any], version: str | None, pack: str | None) -> list[dict[str, Any]]:
    """Prove by value, in this process, that the engine has each behaviour the profile needs
    (planning.resolve.needed_behaviours, Resolved.needs: e.g. the target's inner decoder relays taps over PP), whether
    natively
    or through the pack just applied. A fork that "imports cleanly and looks patched" but lacks one
    is refused here, before the model is built. Returns what was checked, for the status record."""
    from ppspec_cli.knowledge import engine

    out: list[dict[str, Any]] = []
    for need in needs:
        if not isinstance(need, dict):
            continue
        what, ref, arch = need.get("behaviour"), need.get("decoder"), need.get("arch")
        try:
            cls = engine.import_ref(ref) if ref else (engine.inner_decoder_of(arch) if arch else None)
        except Exception as e:  # noqa: BLE001 - an unimportable decoder is the finding
            raise PluginRefusal(
                f"the profile needs {what} of {arch}, but its inner decoder {ref} does not import here: "
                f"{type(e).__name__}: {e}",
                pack=pack,
                vllm=version,
                fix="install the same vLLM build on every node, or report it",
            ) from None
        if cls is None:
            out.append(
                {
                    "behaviour": what,
                    "arch": arch,
                    "status": "unknown",
                    "detail": f"vLLM's registry does not say which inner decoder {arch} builds",
                }
            )
            continue
        name = engine.class_ref(cls)
        if what == "aux_relay_over_pp":
            ok = engine.relays_taps(cls)
            detail = (
                f"{name}.supports_aux_hidden_states_over_pp is "
                f"{getattr(cls, 'supports_aux_hidden_states_over_pp', None)!r}"
            )
        elif what == "target_embed_on_last_stage":
            got = engine.builds_embed_on_last_stage(cls)
            ok = got is not False
            detail = f"{name} builds embed_tokens on the last stage: {'unknown' if got is None else got}"
        else:
            continue
        if not ok:
            raise PluginRefusal(
                f"the profile needs {what} but this engine lacks it: {detail} (vLLM {version} with pack "
                f"{pack or 'none'} applied; a fork or build that only looks patched?)",
                pack=pack,
                vllm=version,
                fix="run `ppspec check PROFILE --probes` on this install; use a vLLM build that has it, or an "
                "adapter pack that adds it",
            )
        out.append({"behaviour": what, "decoder": name, "status": "present", "detail": detail})
    return out


def load_patches(pack_name: str, file: Path, version: str | None = None) -> list[Any]:
    """Import a pack's patches module from its file (never as a top-level `adapters` package)
    under a private name, and return its `get_patches()` with the pack name set."""
    from ppspec_cli.knowledge.packs import load_pack_module

    try:
        mod = load_pack_module(pack_name, "patches", file)
    except Exception as e:  # noqa: BLE001 - any import failure is one refusal
        raise PluginRefusal(
            f"cannot load the pack's patches module {file}: {type(e).__name__}: {e}",
            pack=pack_name,
            vllm=version,
            fix="use a vLLM version the pack supports, or reinstall ppspec",
        ) from None
    factory = getattr(mod, "get_patches", None)
    if factory is None:
        raise PluginRefusal(f"{file} has no get_patches()", pack=pack_name, vllm=version, fix="fix the pack")
    patches = list(factory())
    for p in patches:
        p.pack = pack_name
    return patches


def core_patches() -> list[Any]:
    """The plugin's own patch: a watch on EagleModelMixin's tap setter (the in-engine tripwire)."""
    from ppspec_cli.running.engine import relay
    from ppspec_cli.running.engine.patching import Patch

    def check(mixin: type) -> bool:
        seen: list[dict[str, Any]] = []

        def obs(kind: str, data: dict[str, Any]) -> None:
            seen.append(data)

        bare = type("_BareDecoder", (mixin,), {"start_layer": 0, "end_layer": 4})()
        relay.add_observer(obs)
        try:
            bare._set_aux_hidden_state_layers((3, 1, 3))
        finally:
            relay.remove_observer(obs)
        if [d.get("taps") for d in seen] != [[1, 3]] or tuple(bare.aux_hidden_state_layers) != (1, 3):
            raise AssertionError(f"tap watch saw {seen}; stored {bare.aux_hidden_state_layers}")
        return True

    def confirm_check(core: type) -> bool:
        return getattr(core._initialize_kv_caches, "__wrapped__", None) is not None

    return [
        Patch(
            name="worker_confirm",
            module="vllm.v1.engine.core",
            target="EngineCore",
            attrs=lambda orig: {"_initialize_kv_caches": _confirm_workers_after(orig["_initialize_kv_caches"])},
            description="after the workers built their models, ask each one (vLLM's collective_rpc, every node) for "
            "its plugin status",
            requires=("_initialize_kv_caches",),
            check=confirm_check,
            pack=CORE_PACK,
        ),
        Patch(
            name="tap_watch",
            module="vllm.model_executor.models.interfaces",
            target="EagleModelMixin",
            attrs=lambda orig: {
                "_set_aux_hidden_state_layers": relay.watch_tap_setter(orig["_set_aux_hidden_state_layers"])
            },
            description="report the taps and layer range each stage uses when the model is built",
            requires=("_set_aux_hidden_state_layers", "pack_local_aux_hidden_states"),
            check=check,
            pack=CORE_PACK,
        ),
    ]


# ---------------------------------------------------------------------------------------------
# Worker confirmation: the engine core asks every worker, through the engine's own RPC


#: Seconds the engine core waits for every worker's answer.
CONFIRM_TIMEOUT_S = 120.0


def worker_status(wrapper: Any) -> dict[str, Any]:
    """Run in a worker by the engine core (collective_rpc sends this function by reference: a worker
    that cannot import ppspec fails the call, which the engine core reports). This worker's plugin
    status, or why there is none."""
    rank = getattr(wrapper, "global_rank", None)
    cfg = getattr(wrapper, "vllm_config", None)
    pp_rank = _pp_rank(cfg, rank) if cfg is not None else None
    st = _state.get("status")
    if not _state["active"] or not st or st.get("pid") != os.getpid():
        why = st.get("error") if st else None
        plugins = env_io.get("VLLM_PLUGINS")
        return {
            "pid": os.getpid(),
            "rank": rank,
            "pp_rank": pp_rank,
            "ok": False,
            "pack": None,
            "error": why
            or "the ppspec plugin did not run in this worker"
            + (f" (VLLM_PLUGINS={plugins!r})" if plugins is not None else " (its import failed, or vLLM skipped it)"),
        }
    return {
        "pid": os.getpid(),
        "rank": rank,
        "pp_rank": pp_rank,
        "ok": bool(st.get("ok")),
        "pack": st.get("pack"),
        "patches": [p.get("patch") for p in st.get("patches") or []],
        "tripwires": st.get("tripwires"),
        "error": st.get("error"),
    }


def _confirm_workers_after(orig: Any) -> Any:
    import functools

    @functools.wraps(orig)
    def _initialize_kv_caches(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        if _state["active"]:
            confirm_workers(self.model_executor)
        return out

    return _initialize_kv_caches


def confirm_workers(executor: Any) -> None:
    """Ask every worker of this engine core for its status; record them in this process's status
    (`workers`, `workers_confirmed`) and refuse (PluginRefusal) unless each is ok and together they
    cover every pipeline stage of the plan."""
    status = _state["status"]
    exp = _state["expect"]
    try:
        got = executor.collective_rpc(worker_status, timeout=CONFIRM_TIMEOUT_S)
        workers = [dict(w) for w in got]
        error = None
    except Exception as e:  # noqa: BLE001 - a worker without ppspec fails the call: that is the finding
        workers, error = [], f"a worker could not report its plugin status: {type(e).__name__}: {str(e)[:500]}"
    status["workers"] = workers
    bad = [w for w in workers if not w.get("ok")]
    if error is None and bad:
        error = "; ".join(f"worker rank {w.get('rank')} (pid {w.get('pid')}): {w.get('error')}" for w in bad[:8])
    want_pp = exp.get("pp")
    stages = {w.get("pp_rank") for w in workers}
    if error is None and want_pp is not None and not set(range(int(want_pp))) <= stages:
        error = (
            f"the workers cover pipeline stages {sorted(s for s in stages if s is not None)}, the plan has {want_pp}"
        )
    status["workers_confirmed"] = error is None
    if error is not None:
        e = PluginRefusal(
            f"not every worker runs the ppspec plugin: {error}",
            pack=status.get("pack"),
            vllm=status.get("vllm"),
            fix="install the same ppspec in every node's environment, keep `ppspec` in VLLM_PLUGINS, and see the "
            "worker's log for its import error",
        )
        status["ok"] = False
        status["error"] = str(e)
        _write_status()
        raise e
    _write_status()


# ---------------------------------------------------------------------------------------------
# Tripwires


def _startup_tripwires(pp_size: int | None, version: str | None, pack: str | None, status: dict[str, Any]) -> None:
    from ppspec_cli.running.engine import relay

    exp = _state["expect"]
    trip = status["tripwires"]
    if pp_size is not None:
        if exp.get("pp") is not None and pp_size != int(exp["pp"]):
            raise PluginRefusal(
                f"the engine runs pipeline_parallel_size={pp_size} but the plan is for {exp['pp']}",
                pack=pack,
                vllm=version,
                fix="start the engine with `ppspec serve` (do not edit its command line), or re-plan",
            )
        trip["pp"] = "passed" if exp.get("pp") is not None else "not_run"
    else:
        trip["pp"] = "not_run"
    partition = exp.get("partition")
    num_layers = (
        (_state["plan"] or {}).get("num_layers") or exp.get("num_layers") or (sum(partition) if partition else None)
    )
    if partition and num_layers:
        from vllm.distributed.utils import get_pp_indices

        pp = len(partition)
        try:
            got = [list(get_pp_indices(int(num_layers), r, pp)) for r in range(pp)]
        except ValueError as e:
            raise PluginRefusal(
                f"vLLM rejects the layer partition in this process: {e}",
                pack=pack,
                vllm=version,
                fix="do not set VLLM_PP_LAYER_PARTITION by hand; let the profile's topology.layer_partition drive it",
            ) from None
        from ppspec_cli.planning.plan import stage_bounds

        want = [list(b) for b in stage_bounds(partition)]
        if got != want:
            raise PluginRefusal(
                f"vLLM will split the {num_layers} layers as {got} but the plan says {want}",
                pack=pack,
                vllm=version,
                fix="check VLLM_PP_LAYER_PARTITION in the engine environment against the profile",
            )
        trip["partition"] = "passed"
    else:
        trip["partition"] = "not_run"
    trip["taps"] = "pending (checked when the model is built)" if exp.get("taps") else "not_run"
    relay.add_observer(_observer)


def _observer(kind: str, data: dict[str, Any]) -> None:
    """Called by the tap watch / draft numbering wrapper when the engine builds its model."""
    status = _state["status"]
    exp = _state["expect"]
    pack = status.get("pack")
    version = status.get("vllm")
    status["observed"].setdefault(kind, []).append(data)
    try:
        if kind == "taps":
            want = exp.get("taps")
            if want:
                if sorted(set(want)) != list(data["taps"]):
                    raise PluginRefusal(
                        f"the engine taps layers {data['taps']} ({data.get('decoder')}) but the plan says "
                        f"{sorted(set(want))}",
                        pack=pack,
                        vllm=version,
                        fix="the drafter config the engine reads differs from the one ppspec planned with: re-run "
                        "`ppspec plan` and serve through ppspec",
                    )
                status["tripwires"]["taps"] = "passed"
            partition = exp.get("partition")
            s, e = data.get("start_layer"), data.get("end_layer")
            if partition and s is not None and e is not None:
                from ppspec_cli.planning.plan import stage_bounds

                if (s, e) not in stage_bounds(partition):
                    raise PluginRefusal(
                        f"this stage holds layers [{s}, {e}) which is not a stage of the planned partition {partition}",
                        pack=pack,
                        vllm=version,
                        fix="check VLLM_PP_LAYER_PARTITION and the pipeline size against the profile",
                    )
                status["tripwires"]["stage_layers"] = "passed"
        elif kind == "draft_layers":
            want = exp.get("draft_layer_start")
            if want is not None:
                if int(data["draft_layer_start"]) != int(want):
                    raise PluginRefusal(
                        f"the drafter numbers its layers from {data['draft_layer_start']} but the plan says {want}",
                        pack=pack,
                        vllm=version,
                        fix="report this: the plan and the pack disagree on draft layer numbering",
                    )
                status["tripwires"]["draft_layer_start"] = "passed"
    except PluginRefusal as e:
        status["ok"] = False
        status["error"] = str(e)
        _write_status()
        raise
    _write_status()


# ---------------------------------------------------------------------------------------------
# Status files


def _write_status() -> None:
    path = _state.get("status_path")
    status = _state.get("status")
    if not path or status is None:
        return
    status["time"] = time.time()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.io import safeio

        safeio.write_text(path, json.dumps(status, sort_keys=True, default=str) + "\n", what="the plugin status")
    except (OSError, PpspecError):
        pass  # a status file is evidence, never a reason to stop an engine


@functools.lru_cache(maxsize=1)
def StatusRecord() -> type:  # noqa: N802 - a model class, built on first use (pydantic is imported late)
    """A plugin status record as `serve` reads it back: `ok` and `workers_confirmed` are booleans
    (a string "yes" is not an ok status), the rest typed where `serve` reads it."""
    from typing import Optional

    from pydantic import StrictInt, StrictStr

    from ppspec_cli.io.records import Record

    class _Status(Record):
        pid: StrictInt | StrictStr
        ok: bool
        role: Optional[str] = None
        error: Optional[str] = None
        rank: Optional[StrictInt] = None
        pp_rank: Optional[StrictInt] = None
        pack: Optional[str] = None
        vllm: Optional[str] = None
        workers_confirmed: Optional[bool] = None
        patches: Optional[list[dict[str, Any]]] = None

    return _Status


def read_status_dir(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every plugin status record in a status folder (one per engine process), by pid. Records
    that cannot be read come back as {"pid": ..., "ok": False, "error": "unreadable: ..."}."""
    from ppspec_cli.io import records, safeio

    out = []
    d = Path(path)
    if not d.is_dir():
        return out
    for f in sorted(d.glob("*.json")):
        try:
            rec = safeio.read_json(f, limit=1 << 20, what="status record", follow_symlinks=False)
            records.validate(
                StatusRecord(), rec, what="status record", where=str(f), fix="let the ppspec plugin write it"
            )
        except safeio.PpspecError as e:  # a record of the wrong shape (`ok: "yes"`) is not an ok record
            rec = {"pid": f.stem, "ok": False, "error": f"unreadable: {e.what}"}
        out.append(rec)
    return sorted(out, key=lambda r: str(r.get("pid")))


# ---------------------------------------------------------------------------------------------
# Which process is this?


_ROLE_FILES = (
    ("vllm/v1/worker/worker_base.py", "worker"),
    ("vllm/v1/engine/core.py", "engine_core"),
    ("vllm/model_executor/models/registry.py", "registry_subprocess"),
    ("vllm/engine/arg_utils.py", "api"),
)


def _caller_context() -> tuple[str, int | None, Any, int | None]:
    """(role, global rank, the engine's VllmConfig, pipeline size) from the stack of whoever called
    register(). Best effort: an unknown caller gives ("unknown", None, None, None)."""
    role, rank, cfg, pp = "unknown", None, None, None
    try:
        f = sys._getframe(1)
    except ValueError:
        return role, rank, cfg, pp
    depth = 0
    while f is not None and depth < 60:
        fn = f.f_code.co_filename.replace("\\", "/")
        try:
            loc = f.f_locals
            me = loc.get("self")
            if cfg is None:
                c = loc.get("vllm_config")
                if c is None:
                    c = getattr(me, "vllm_config", None)
                if c is None and isinstance(loc.get("kwargs"), dict):
                    c = loc["kwargs"].get("vllm_config")
                if c is not None and hasattr(c, "parallel_config"):
                    cfg = c
            if pp is None and type(me).__name__ == "EngineArgs":
                v = getattr(me, "pipeline_parallel_size", None)
                pp = int(v) if isinstance(v, int) else None
            if role == "unknown":
                for suffix, name in _ROLE_FILES:
                    if fn.endswith(suffix):
                        role = name
                        if name == "worker":
                            r = getattr(me, "global_rank", None)
                            rank = int(r) if isinstance(r, int) else None
                        break
        except Exception:  # noqa: BLE001 - introspection must never break the engine
            pass
        f = f.f_back
        depth += 1
    if cfg is not None:
        pp = int(cfg.parallel_config.pipeline_parallel_size)
    return role, rank, cfg, pp


def _pp_rank(vllm_config: Any, rank: int | None) -> int | None:
    """This worker's stage, from the engine's own parallel sizes (plan.pp_rank_of: the one layout)."""
    from ppspec_cli.planning.plan import pp_rank_of

    if rank is None:
        return None
    pc = vllm_config.parallel_config
    return pp_rank_of(
        rank,
        tp=int(getattr(pc, "tensor_parallel_size", 1) or 1),
        pp=int(getattr(pc, "pipeline_parallel_size", 1) or 1),
        pcp=int(getattr(pc, "prefill_context_parallel_size", 1) or 1),
    )


def _process_name() -> str:
    try:
        import multiprocessing

        return multiprocessing.current_process().name
    except Exception:  # noqa: BLE001
        return "?"


# ---------------------------------------------------------------------------------------------
# Tests: undo everything this process did


def _revert_list(patches: list[Any]) -> None:
    for p in reversed(patches):
        try:
            p.revert()
        except Exception:  # noqa: BLE001 - best effort while reporting another failure
            pass


def _revert() -> None:
    _revert_list(_state.get("patches") or [])


def reset_for_tests() -> None:
    """Revert every patch this plugin applied in this process and forget its state."""
    _revert()
    try:
        from ppspec_cli.running.engine import relay

        relay.remove_observer(_observer)
    except Exception:  # noqa: BLE001 - vLLM not importable: nothing was installed
        pass
    _state.update({"active": False, "patches": [], "status": None, "status_path": None, "expect": {}, "plan": None})
