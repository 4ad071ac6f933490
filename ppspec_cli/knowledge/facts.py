"""What is true of vLLM as a whole (not of one model family) that ppspec mirrors: the first release
with speculative decoding under PP, the newest release checked, refused options, MTP layer counts
and how versions are compared. Read off the vLLM 0.30-0.33 sources. What each speculative method
does (taps, gating, passes per step, numbering, speculators conversion, its drafter contract) is
its object in ppspec_cli.knowledge.methods; the names below are views of those objects.

Everything about one model family (its inner decoder, where its embedding lives, how many MTP
layers it has, whether it relays taps on a platform and version) lives in its adapter pack
(adapters/<family>/pack.yaml, read through ppspec_cli.knowledge.packs), never here.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from ppspec_cli.knowledge import methods
from ppspec_cli.knowledge.versions import NEWEST_VERIFIED

#: The method names (one Literal, owned by knowledge/methods with one object per method).
Method = methods.Method
METHODS = methods.METHODS

#: Every `method` value vLLM accepts (model-specific MTP aliases are rewritten to `mtp`); ppspec
#: plans the subset in `Method`.
VLLM_METHODS = frozenset(
    {"ngram", "draft_model", "suffix", "custom_class", "extract_hidden_states", "ngram_gpu", *METHODS}
)

#: Methods for which the last stage builds the target's embedding under PP
#: (spec_decode_needs_target_embed), read off the method objects. A family may add `mtp`.
TARGET_EMBED_METHODS: frozenset[str] = frozenset(m.name for m in methods.REGISTRY.values() if m.needs_target_embed)

#: Drafter forward passes per target step (the method's `drafter_passes`).
drafter_passes = methods.drafter_passes

#: The method a drafter checkpoint was built for (knowledge/methods).
method_of_drafter_config = methods.method_of_drafter_config


#: First vLLM release with PR #50514 (EAGLE3-family drafters under pipeline parallelism, V2 runner).
PP_SPEC_MIN_VERSION = Version("0.30.0")

#: The newest vLLM release ppspec's facts and packs were checked against; the version a verdict is
#: for when vLLM is not installed and the profile names no `engine_version`.
NEWEST_SUPPORTED = NEWEST_VERIFIED  # knowledge/versions.py: the verified releases in one place

#: Engine options vLLM refuses together with PP (or mishandles), keyed by the `engine:` flag name.
PP_REFUSED_ENGINE_FLAGS = {
    "enable-return-routed-experts": "vLLM refuses returning routed experts with pipeline parallelism",
}

#: Where most families keep their MTP layer count (first present wins); a pack names its own keys.
DEFAULT_MTP_LAYER_KEYS = ("mtp_num_hidden_layers", "num_nextn_predict_layers")

#: No real target has more MTP layers than this; a larger value is a corrupt or hostile config.
MAX_MTP_LAYERS = 64


def parse_version(v: str | None) -> Version | None:
    """'0.32.0+cpu' -> Version('0.32.0') (the public part). None when it is not a version."""
    try:
        return Version(Version(v or "").public)
    except InvalidVersion:
        return None


def mtp_layer_count(
    text_config: dict,
    keys: tuple[str, ...] = DEFAULT_MTP_LAYER_KEYS,
    default: int | None = None,
    fixed: int | None = None,
) -> int | None:
    """How many MTP layers vLLM's `mtp` method builds for a target (None: unknown / none).

    `keys`, `default` and `fixed` come from the family's pack (its `mtp_layers` facts): the config
    keys vLLM reads (first present wins), the value vLLM falls back to when none is set, and a count
    vLLM uses whatever the config says."""
    if fixed is not None:
        return fixed
    for key in keys:
        v = text_config.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v if v <= MAX_MTP_LAYERS else None  # beyond any real model: unknown, never planned with
    return default
