"""What is true of vLLM as a whole (not of one model family) that ppspec mirrors: the speculative
method names, which methods read or are gated on taps, the first release with speculative decoding
under PP, and how versions are compared. Read off the vLLM 0.30-0.33 sources.

Everything about one model family (its inner decoder, where its embedding lives, how many MTP
layers it has, whether it relays taps on a platform and version) lives in its adapter pack
(adapters/<family>/pack.yaml, read through ppspec_cli.knowledge.packs), never here.
"""

from __future__ import annotations

from typing import Literal, get_args

from packaging.version import InvalidVersion, Version

#: The speculative methods ppspec plans, named as vLLM names them (config/speculative.py). The one
#: list of method names: the profile schema, these facts and the rules all use it.
Method = Literal["eagle3", "dflash", "dspark", "mtp", "eagle"]
METHODS: tuple[Method, ...] = get_args(Method)

#: Every `method` value vLLM accepts (model-specific MTP aliases are rewritten to `mtp`); ppspec
#: plans the subset in `Method`.
VLLM_METHODS = frozenset({"ngram", "draft_model", "suffix", "custom_class", "extract_hidden_states", "ngram_gpu", *METHODS})

#: Methods whose drafter reads the target's auxiliary hidden states ("taps").
TAP_METHODS: frozenset[Method] = frozenset({"eagle3", "dflash", "dspark"})

#: Methods whose drafter drafts the whole block in one forward pass (DFlash: bonus + one mask query
#: per draft token; DSpark: anchor + noise queries, then a light sequential Markov head). The others
#: run one drafter pass per speculative token.
PARALLEL_DRAFT_METHODS: frozenset[Method] = frozenset({"dflash", "dspark"})


def drafter_passes(method: str, num_speculative_tokens: int) -> int:
    """Drafter forward passes per target step (each reads the drafter's weights once)."""
    return 1 if method in PARALLEL_DRAFT_METHODS else num_speculative_tokens


#: Methods vLLM gates on the target opting in to relaying taps over PP
#: (eagle3_utils.verify_supports_aux_hidden_states_over_pp). `mtp` and `eagle` are not gated.
AUX_METHODS = frozenset({*TAP_METHODS, "extract_hidden_states"})

#: Methods for which the last stage builds the target's embedding under PP
#: (spec_decode_needs_target_embed). A family may add `mtp` (its pack says so).
TARGET_EMBED_METHODS: frozenset[Method] = frozenset({"eagle", "eagle3", "dflash", "dspark"})

#: First vLLM release with PR #50514 (EAGLE3-family drafters under pipeline parallelism, V2 runner).
PP_SPEC_MIN_VERSION = Version("0.30.0")

#: The newest vLLM release ppspec's facts and packs were checked against; the version a verdict is
#: for when vLLM is not installed and the profile names no `engine_version`.
NEWEST_SUPPORTED = "0.33.0"

#: Since 0.33.0 an EAGLE3 drafter whose `eagle_config.use_aux_hidden_state` is false uses no aux
#: hidden states: no taps, nothing relayed, and the target's opt-in check is not run. 0.30-0.32
#: tap every eagle3 drafter.
EAGLE3_AUX_OPT_OUT_SINCE = Version("0.33.0")

#: EAGLE-1 drafters number their layers from the last stage's PP-local layer count (every EAGLE-1
#: drafter class in vLLM 0.30-0.33); the EAGLE3, DFlash and DSpark drafters and MTP number them
#: globally from the target depth. A drafter pack may change this (global_draft_layer_ids).
PP_LOCAL_NUMBERING_METHODS: frozenset[Method] = frozenset({"eagle"})

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


def uses_taps(method: str | None, drafter_view: dict | None, version: Version | None) -> bool:
    """Whether the drafter reads target taps on this vLLM version (and so is gated on the opt-in).

    0.33 reads `eagle_config.use_aux_hidden_state: false` on an EAGLE3 drafter as "no taps";
    earlier releases tap every EAGLE3 drafter. `version` None means the newest supported release.
    """
    if method not in TAP_METHODS:
        return False
    if method == "eagle3" and (version is None or version >= EAGLE3_AUX_OPT_OUT_SINCE):
        ec = (drafter_view or {}).get("eagle_config")
        if isinstance(ec, dict) and ec.get("use_aux_hidden_state") is False:
            return False
    return True


def mtp_layer_count(text_config: dict, keys: tuple[str, ...] = DEFAULT_MTP_LAYER_KEYS, default: int | None = None, fixed: int | None = None) -> int | None:
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


#: speculators_model_type / speculators_config.algorithm -> the method vLLM serves it as.
SPECULATORS_METHODS = {"eagle3": "eagle3", "peagle": "eagle3", "dflash": "dflash", "dflash2": "dflash", "dspark": "dspark"}


def method_of_drafter_config(cfg: dict) -> str | None:
    """The speculative method a drafter checkpoint was built for, when its config says so."""
    raw = cfg.get("architectures")
    archs = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
    # Speculators format: vLLM serves `speculators_model_type` (peagle as eagle3, dflash2 as dflash).
    if isinstance(cfg.get("speculators_model_type"), str):
        return SPECULATORS_METHODS.get(cfg["speculators_model_type"], cfg["speculators_model_type"])
    spec = cfg.get("speculators_config")
    if isinstance(spec, dict) and isinstance(spec.get("algorithm"), str):
        return SPECULATORS_METHODS.get(spec["algorithm"], spec["algorithm"])
    if any("DSpark" in a for a in archs) or "dspark_target_layer_ids" in cfg:
        return "dspark"
    if any("DFlash" in a for a in archs) or isinstance(cfg.get("dflash_config"), dict):
        return "dflash"
    if any("Eagle3" in a or "Peagle" in a or a == "PEagleDraftModel" for a in archs):
        return "eagle3"
    if any(a.startswith("Eagle") for a in archs):
        return "eagle"
    if isinstance(cfg.get("eagle_config"), dict) and cfg["eagle_config"].get("use_aux_hidden_state", True) and (
        "eagle_aux_hidden_state_layer_ids" in cfg["eagle_config"]
    ):
        return "eagle3"
    return None
