"""The drafter-config contract vLLM enforces when it builds a DFlash or DSpark drafter, per version.

ppspec plans the standalone Qwen3 block drafters: DFlash (`DFlashDraftModel` and the other
classes built on vLLM's `qwen3_dflash.py` DFlashQwen3 model) and DSpark (`Qwen3DSparkModel`,
`Qwen3OmniDSparkModel`, `qwen3_dspark.py`, a subclass of it). Read off the vLLM 0.30.0, 0.32.0 and
0.33.0 sources; where a rule differs between them the version is a parameter. Every function reads
the drafter config as vLLM sees it (`checkpoint.speculators_view`) and, for tensors, the names in
the safetensors headers; nothing is filled in: a key or tensor ppspec cannot see is not judged.
The `drafter-contract` rule in rules.py turns the answers into findings (`CODES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ppspec_cli.findings import Severity

from packaging.version import Version

#: Architectures vLLM builds from qwen3_dflash.py's DFlashQwen3 model or a subclass of it (as the
#: registry names them after EAGLEConfig's `DFlash{arch}` rename): the DFlash drafters ppspec plans.
DFLASH_QWEN3_ARCHS = frozenset({"DFlashDraftModel", "DFlash2DraftModel", "DFlashMuseGlimmerAssistantModel", "DFlashQwen3XPressModel", "Qwen3XPressModel"})
#: qwen3_dspark.py's Qwen3DSparkForCausalLM (a DFlashQwen3 subclass): the DSpark drafters ppspec plans.
DSPARK_QWEN3_ARCHS = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel"})

#: The DFlash drafter classes in vLLM's model registry, per first release that has them
#: (model_executor/models/registry.py); EAGLEConfig keeps LiLiCorrDraftModel's name since 0.32.
_DFLASH_REGISTERED = {
    Version("0.30.0"): frozenset({"DFlashDraftModel", "DFlash2DraftModel", "DFlashMuseGlimmerAssistantModel", "DFlashLagunaForCausalLM"}),
    Version("0.32.0"): frozenset({"DFlashDraftModel", "DFlash2DraftModel", "DFlashMuseGlimmerAssistantModel", "DFlashLagunaForCausalLM", "LiLiCorrDraftModel"}),
    Version("0.33.0"): frozenset({"DFlashDraftModel", "DFlash2DraftModel", "DFlashMuseGlimmerAssistantModel", "DFlashLagunaForCausalLM", "LiLiCorrDraftModel",
                                  "DFlash2BeamDraftModel", "Qwen3XPressModel", "DFlashQwen3XPressModel"}),
}
LILICORR_KEPT_SINCE = Version("0.32.0")


def registered_dflash(arch: str, version: Version) -> bool:
    """Whether vLLM `version`'s model registry has this (served) DFlash architecture."""
    return arch in _by_version(_DFLASH_REGISTERED, version)


def _by_version(table: dict[Version, frozenset[str]], version: Version) -> frozenset[str]:
    """The entry of the newest release not after `version` (the oldest entry for older versions)."""
    return table[max((v for v in table if v <= version), default=min(table))]


#: DSpark architectures vLLM keeps as the checkpoint names them (config/speculative.py, the
#: `method == "dspark"` architecture rewrite); any other is served as DeepSeek-V4's in-target
#: drafter `DSparkDraftModel` with the target's quantization. 0.33 adds MuseSparkDSparkModel.
_DSPARK_KEPT = {
    Version("0.30.0"): frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel", "K3DSparkModel"}),
    Version("0.33.0"): frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel", "K3DSparkModel", "MuseSparkDSparkModel"}),
}

#: Where vLLM looks for the token it feeds at the parallel-drafting query slots, first present
#: wins (V2: spec_decode/utils.py::get_parallel_drafting_token_id; V1:
#: llm_base_proposer.py::_init_parallel_drafting_params; the same order in 0.30-0.33). The first
#: counts when the key is in `dflash_config`, the second when it is set and not null, the others
#: when the key is there at all (hasattr), even null.
MASK_TOKEN_KEYS = ("dflash_config.mask_token_id", "mask_token_id", "dspark_noise_token_id", "pard_token", "ptd_token_id")

#: The `layer_types` entry of a sliding-window layer (qwen3_dflash.py::_resolve_layer_attention).
SLIDING = "sliding_attention"

#: Since 0.32 vLLM skips the `n_predict` divisibility check for DSpark (its parallel width is
#: independent of MTP stages); 0.30 checks it for every method.
DSPARK_N_PREDICT_FREE_SINCE = Version("0.32.0")

#: Targets vLLM holds to the Qwen3-Omni DSpark contract (config/speculative.py::_is_qwen3_omni_target).
OMNI_TARGET_MODEL_TYPE = "qwen3_omni_moe"
OMNI_TARGET_ARCHS = frozenset({"Qwen3OmniMoeForConditionalGeneration", "Qwen3OmniMoeThinkerForConditionalGeneration"})
OMNI_DRAFTER_ARCH = "Qwen3OmniDSparkModel"

#: First release whose XPress drafters (and their `xpress_topc` bound) exist.
XPRESS_SINCE = Version("0.33.0")
XPRESS_ARCHS = frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel"})

#: Every code this module reports: severity and what it means (docs and tests read this table).
CODES: dict[str, tuple[Severity, str]] = {
    "drafter-no-mask-token": ("error", "a DFlash/DSpark drafter config names no parallel-drafting token (vLLM refuses at start)"),
    "drafter-bad-mask-token": ("error", "the parallel-drafting token vLLM picks is not a non-negative integer (vLLM fails at start or feeds garbage)"),
    "drafter-mask-token-out-of-vocab": ("warning", "the parallel-drafting token lies outside the drafter's input vocabulary"),
    "dflash-sample-from-anchor": ("error", "`dflash_config.sample_from_anchor: true`: Model Runner V2 refuses it; V1 ignores it"),
    "dflash-mixed-attention-v1": ("error", "mixed sliding/full draft layers need Model Runner V2 (V1 refuses at start)"),
    "dflash-no-sliding-window": ("error", "a sliding draft layer without a window size (vLLM refuses at start)"),
    "dspark-no-markov-rank": ("error", "a Qwen3 DSpark drafter config without a positive `markov_rank` (vLLM cannot build its Markov head)"),
    "dspark-lm-head-missing": ("error", "a reduced-vocabulary Qwen3 DSpark drafter without lm_head weights (vLLM refuses at load)"),
    "dspark-d2t-missing": ("error", "a reduced-vocabulary Qwen3 DSpark drafter without a d2t tensor (vLLM refuses at load)"),
    "dspark-embed-missing": ("error", "a Qwen3 DSpark drafter with a larger input vocabulary than the target but no embed_tokens (vLLM refuses at load)"),
    "dspark-tensors-not-checked": ("info", "the DSpark drafter's vocabulary differs from the target's; its tensors were not read"),
    "dspark-draft-topk": ("error", "`dspark_draft_topk` outside 1..draft vocabulary, or on a drafter class that cannot use it (vLLM refuses at start)"),
    "dspark-served-as-deepseek-v4": ("warning", "vLLM does not keep the checkpoint's DSpark architecture and serves it as DeepSeek-V4's in-target DSparkDraftModel"),
    "xpress-topc": ("error", "`xpress_topc` outside 0..draft vocabulary (vLLM 0.33 refuses at start)"),
    "drafter-n-predict-divisible": ("error", "num_speculative_tokens above the drafter config's `n_predict` and not a multiple of it (vLLM refuses at start)"),
    "drafter-beyond-block": ("warning", "num_speculative_tokens asks for more draft positions than the drafter's trained block holds; vLLM drafts them anyway"),
    "dflash-arch-unknown": ("error", "vLLM's model registry has no class for the DFlash drafter's architecture, as vLLM renames it (vLLM refuses at start)"),
    "dspark-omni-contract": ("error", "a DSpark drafter for a Qwen3-Omni target breaks vLLM's Qwen3-Omni DSpark checkpoint contract (vLLM refuses at start)"),
}


@dataclass(frozen=True)
class Breach:
    """One way the drafter config breaks vLLM's contract (`code` in CODES)."""

    code: str
    message: str
    fix: str
    field: str = "drafter.model"  # the profile field the fix goes to

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]


def declared_architectures(cfg: dict) -> list[str]:
    """The architecture names the drafter config declares (hostile input: only strings count)."""
    archs = cfg.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _dflash_config(cfg: dict) -> dict:
    dc = cfg.get("dflash_config")
    return dc if isinstance(dc, dict) else {}


def served_architectures(method: str, cfg: dict, version: Version, target_model_type: str | None = None) -> list[str]:
    """The architectures vLLM builds the drafter as (config/speculative.py): DFlash drafters are
    renamed `DFlash{arch}` unless the name already starts or ends with DFlash (EAGLEConfig);
    a DSpark `DSparkDraftModel` whose model_type is qwen3 becomes Qwen3DSparkModel, and one naming
    none of the kept DSpark classes becomes DeepSeek-V4's DSparkDraftModel (V41 for a deepseek_v41 target)."""
    raw = cfg.get("architectures")
    archs = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
    if method == "dflash" and "speculators_model_type" not in cfg:
        kept = ("LiLiCorrDraftModel",) if version >= LILICORR_KEPT_SINCE else ()
        return [a if a.startswith("DFlash") or a.endswith("DFlash") or a in kept else f"DFlash{a}" for a in archs]
    if method == "dspark":
        if "DSparkDraftModel" in archs and cfg.get("model_type") == "qwen3":
            return ["Qwen3DSparkModel"]
        if not _by_version(_DSPARK_KEPT, version) & set(archs):
            return ["DSparkV41DraftModel" if target_model_type == "deepseek_v41" else "DSparkDraftModel"]
    return archs


def planned_class(method: str, served: list[str]) -> Literal["dflash", "dspark"] | None:
    """Which of the Qwen3 block drafter classes ppspec plans vLLM builds (None: another class)."""
    if method == "dflash" and DFLASH_QWEN3_ARCHS & set(served):
        return "dflash"
    if method == "dspark" and DSPARK_QWEN3_ARCHS & set(served):
        return "dspark"
    return None


def parallel_drafting_token(cfg: dict) -> tuple[str | None, Any]:
    """(the key vLLM reads the parallel-drafting token from, its raw value); (None, None) when
    the config names none, which vLLM refuses (MASK_TOKEN_KEYS gives the order)."""
    dc = _dflash_config(cfg)
    if "mask_token_id" in dc:
        return "dflash_config.mask_token_id", dc["mask_token_id"]
    if cfg.get("mask_token_id") is not None:
        return "mask_token_id", cfg["mask_token_id"]
    for key in MASK_TOKEN_KEYS[2:]:
        if key in cfg:
            return key, cfg[key]
    return None, None


def layer_types(cfg: dict) -> list[str] | None:
    """The draft layers' attention types as the config class hands them to vLLM: `layer_types`
    when the config lists them; for a qwen3 config without it, what transformers' Qwen3Config
    derives: all full unless `use_sliding_window` is true (its default is false), else sliding
    from `max_window_layers` on when a window is set. None: not known from the config (a key
    the derivation reads is missing; its library default is not assumed)."""
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and all(isinstance(x, str) for x in lt):
        return lt
    n, mwl = cfg.get("num_hidden_layers"), cfg.get("max_window_layers")
    if lt is not None or cfg.get("model_type") != "qwen3" or not _is_int(n):
        return None
    if cfg.get("use_sliding_window") is not True or ("sliding_window" in cfg and cfg["sliding_window"] is None):
        return ["full_attention"] * n
    if "sliding_window" in cfg and _is_int(mwl):
        return [SLIDING if i >= mwl else "full_attention" for i in range(n)]
    return None


def sliding_window(cfg: dict) -> tuple[bool, Any]:
    """(known, the window vLLM gives a sliding draft layer): `dflash_config.swa_window_size` when
    the key is there (even null), else the top-level `sliding_window`, which transformers'
    Qwen3Config drops (None) unless `use_sliding_window` is true, and sets to its own default
    when the key is missing (not known here)."""
    dc = _dflash_config(cfg)
    if "swa_window_size" in dc:
        return True, dc["swa_window_size"]
    if cfg.get("model_type") == "qwen3":
        if cfg.get("use_sliding_window") is not True:
            return True, None
        return ("sliding_window" in cfg), cfg.get("sliding_window")
    return True, cfg.get("sliding_window")


def attention_breaches(cfg: dict, runner: str) -> list[Breach]:
    """qwen3_dflash.py::_resolve_layer_attention (same in 0.30-0.33), for every draft layer."""
    types = layer_types(cfg)
    use_swa = bool(_dflash_config(cfg).get("use_swa", False))
    out: list[Breach] = []
    if types is None and not use_swa:
        return out
    n_sliding = sum(t == SLIDING for t in types or ())
    if types is not None and 0 < n_sliding < len(types) and runner != "v2":
        out.append(Breach(
            "dflash-mixed-attention-v1",
            f"the drafter mixes sliding and full attention layers ({n_sliding} of {len(types)} sliding): vLLM's V1 model runner refuses at start "
            "('DFlash drafters with mixed sliding/full attention require the V2 model runner')",
            "run on GPUs (Model Runner V2), or use a drafter whose layers all use one attention type",
        ))
    any_sliding = use_swa or n_sliding > 0
    known, window = sliding_window(cfg)
    if any_sliding and known and window is None:
        out.append(Breach(
            "dflash-no-sliding-window",
            "the drafter has sliding-attention layers but no window size: vLLM refuses at start ('DFlash sliding attention requires a window size configured in "
            "dflash_config.swa_window_size or the top-level sliding_window')"
            + (" (its qwen3 config sets sliding_window but not use_sliding_window: true, so transformers drops it)" if cfg.get("sliding_window") is not None else ""),
            "set dflash_config.swa_window_size to the window the drafter was trained with",
        ))
    return out


def dspark_tensor_breaches(cfg: dict, names: set[str] | None, target_vocab: int | None) -> list[Breach]:
    """qwen3_dspark.py::Qwen3DSparkForCausalLM.load_weights (same in 0.30-0.33): a drafter whose
    input vocab is larger than the target's must ship embed_tokens; one whose draft vocab is smaller
    must ship lm_head and d2t (names are matched as vLLM matches them: by substring; t2d is skipped)."""
    vocab = cfg.get("vocab_size")
    dvs = cfg.get("draft_vocab_size") if cfg.get("draft_vocab_size") is not None else vocab
    if not (_is_int(vocab) and _is_int(dvs) and _is_int(target_vocab)):
        return []
    expanded, reduced = vocab > target_vocab, dvs < target_vocab  # type: ignore[operator]
    if not (expanded or reduced):
        return []
    if names is None:
        return [Breach("dspark-tensors-not-checked", f"the DSpark drafter's vocabulary (input {vocab}, draft {dvs}) differs from the target's {target_vocab}; "
                       "whether it ships the embed_tokens / lm_head / d2t tensors vLLM then requires was not checked (no index or weights here)", "")]
    loaded = [n for n in names if "t2d" not in n]
    out = []
    if expanded and not any("embed_tokens" in n for n in loaded):
        out.append(Breach("dspark-embed-missing", f"the DSpark drafter's input vocabulary ({vocab}) is larger than the target's ({target_vocab}) but it has no embed_tokens tensor: vLLM refuses at load",
                          "use a drafter checkpoint that includes its embed_tokens"))
    if reduced and not any("lm_head" in n for n in loaded):
        out.append(Breach("dspark-lm-head-missing", f"the DSpark drafter's draft vocabulary ({dvs}) is smaller than the target's ({target_vocab}) but it has no lm_head tensor (the target's cannot be shared): vLLM refuses at load",
                          "use a drafter checkpoint that includes its lm_head"))
    if reduced and not any("d2t" in n for n in loaded):
        out.append(Breach("dspark-d2t-missing", f"the DSpark drafter's draft vocabulary ({dvs}) is smaller than the target's ({target_vocab}) but it has no d2t tensor to map draft ids to target ids: vLLM refuses at load",
                          "use a drafter checkpoint that includes d2t"))
    return out


def check(
    method: str, cfg: dict, *, version: Version, runner: str, names: set[str] | None, num_speculative_tokens: int,
    target_config: dict | None = None, target_text: dict | None = None,
) -> list[Breach]:
    """Every breach of vLLM's DFlash/DSpark drafter contract in this drafter config, for `version`
    and `runner` ("v1" | "v2"), against the target's raw config and its text part. Drafter classes
    ppspec does not plan are not judged (except the Qwen3-Omni contract, which vLLM applies to
    every DSpark drafter of a Qwen3-Omni target)."""
    out: list[Breach] = []
    tcfg, text = target_config or {}, target_text or {}
    target_vocab = text.get("vocab_size") if _is_int(text.get("vocab_size")) else None
    declared = declared_architectures(cfg)
    served = served_architectures(method, cfg, version, tcfg.get("model_type"))
    if method == "dspark" and served != declared and served[0].startswith("DSpark") and any("DSpark" in a for a in declared):
        out.append(Breach(
            "dspark-served-as-deepseek-v4",
            f"vLLM {version} does not keep the drafter's architecture {declared}: it serves it as {served[0]} (DeepSeek-V4's drafter, weights from the target checkpoint, the target's quantization)",
            "use a drafter whose config names Qwen3DSparkModel (or another DSpark class this vLLM keeps), or a vLLM release that knows its class",
        ))
    if method == "dflash" and served and not any(registered_dflash(a, version) for a in served):
        out.append(Breach("dflash-arch-unknown", f"vLLM {version} serves this DFlash drafter as {served} (architectures {declared}, renamed DFlash<arch>), a class its model registry does not have: "
                          "vLLM refuses at start", "use a DFlash drafter whose config names an architecture this vLLM serves (e.g. DFlashDraftModel)"))
    out.extend(topk_breaches(method, cfg, served, version))
    if method == "dspark" and tcfg:
        thinker = _nested(tcfg, "thinker_config", "text_config")
        for field, why in omni_breaches(tcfg, thinker if isinstance(thinker, dict) else text, cfg, served, num_speculative_tokens):
            out.append(Breach("dspark-omni-contract", f"{why}: vLLM refuses at start", "convert the drafter for Qwen3-Omni (its trained block size, the thinker's shapes and taps), or set the field as the message says", field))
    out.extend(width_breaches(method, cfg, version, num_speculative_tokens))
    kind = planned_class(method, served)
    if kind is None:
        return out
    key, tok = parallel_drafting_token(cfg)
    if key is None:
        out.append(Breach(
            "drafter-no-mask-token",
            f"the {method} drafter config names no parallel-drafting token: vLLM refuses at start ('Model config must specify `dflash_config.mask_token_id`, "
            "`mask_token_id`, `dspark_noise_token_id`, `pard_token`, or `ptd_token_id` for parallel drafting.')",
            "set the token the drafter was trained with (DFlash: dflash_config.mask_token_id; DSpark: dspark_noise_token_id) in its config.json",
        ))
    elif not _is_int(tok) or tok < 0:
        out.append(Breach("drafter-bad-mask-token", f"the drafter's parallel-drafting token `{key}` is {str(tok)[:40]!r}, not a non-negative integer token id: vLLM cannot use it",
                          f"set `{key}` to the token id the drafter was trained with"))
    elif _is_int(cfg.get("vocab_size")) and tok >= cfg["vocab_size"]:
        out.append(Breach("drafter-mask-token-out-of-vocab", f"the drafter's parallel-drafting token `{key}` = {tok} lies outside its input vocabulary (vocab_size {cfg['vocab_size']}): "
                          "vLLM does not check this and embeds a row that is not a trained token", f"check `{key}` and vocab_size against the drafter's training config"))
    if runner == "v2" and _dflash_config(cfg).get("sample_from_anchor", False):
        out.append(Breach("dflash-sample-from-anchor", "the drafter sets dflash_config.sample_from_anchor: true: vLLM's Model Runner V2 refuses it at start ('sample_from_anchor=True is not supported for DFlash')",
                          "remove dflash_config.sample_from_anchor (DFlash uses the anchor as the bonus token); a DSpark drafter sets the top-level sample_from_anchor"))
    out.extend(attention_breaches(cfg, runner))
    if kind == "dspark":
        rank = cfg.get("markov_rank")
        if not (_is_int(rank) and rank > 0):
            out.append(Breach("dspark-no-markov-rank", f"the DSpark drafter config's markov_rank is {'missing' if rank is None else repr(rank)[:40]}: vLLM's Qwen3 DSpark model cannot build its Markov head and fails at start",
                              "set markov_rank to the rank the drafter was trained with"))
        out.extend(dspark_tensor_breaches(cfg, names, target_vocab))
    return out


def topk_breaches(method: str, cfg: dict, served: list[str], version: Version) -> list[Breach]:
    """config/speculative.py (0.30-0.33): a drafter config's `dspark_draft_topk` must lie in
    1..draft vocabulary (`draft_vocab_size`, else `vocab_size`) and the served class must be a
    Qwen3 DSpark one; vLLM 0.33's `xpress_topc` on an XPress drafter must lie in 0..draft vocabulary."""
    out: list[Breach] = []
    dvs = cfg.get("draft_vocab_size") or cfg.get("vocab_size")
    topk = cfg.get("dspark_draft_topk")
    if method == "dspark" and topk is not None:
        if not (isinstance(topk, (int, float)) and _is_int(dvs) and 1 <= topk <= dvs):
            out.append(Breach("dspark-draft-topk", f"the drafter's dspark_draft_topk is {str(topk)[:40]!r}: vLLM refuses at start ('dspark_draft_topk must be between 1 and the draft vocabulary size ({dvs})')",
                              "set dspark_draft_topk between 1 and the draft vocabulary size, or remove it"))
        elif not DSPARK_QWEN3_ARCHS & set(served):
            out.append(Breach("dspark-draft-topk", f"the drafter sets dspark_draft_topk but vLLM serves it as {served}: vLLM refuses at start ('dspark_draft_topk is only supported by Qwen3DSparkModel and Qwen3OmniDSparkModel')",
                              "remove dspark_draft_topk from the drafter config"))
    topc = cfg.get("xpress_topc")
    if version >= XPRESS_SINCE and method == "dflash" and XPRESS_ARCHS & set(served) and topc is not None:
        if not (isinstance(topc, (int, float)) and _is_int(dvs) and 0 <= topc <= dvs):
            out.append(Breach("xpress-topc", f"the drafter's xpress_topc is {str(topc)[:40]!r}: vLLM refuses at start ('xpress_topc must be between 0 and the draft vocabulary size ({dvs})')",
                              "set xpress_topc between 0 and the draft vocabulary size, or remove it"))
    return out


def _nested(cfg: dict, section: str, name: str) -> Any:
    sub = cfg.get(section)
    return sub.get(name) if isinstance(sub, dict) else None


def _dspark_value(cfg: dict, name: str) -> Any:
    """`dflash_config`, then `eagle_config`, then the top level: the first non-null wins."""
    for v in (_nested(cfg, "dflash_config", name), _nested(cfg, "eagle_config", name), cfg.get(name)):
        if v is not None:
            return v
    return None


def _positive(v: Any) -> bool:
    return _is_int(v) and v > 0


def is_omni_target(target_config: dict) -> bool:
    archs = target_config.get("architectures")
    return target_config.get("model_type") == OMNI_TARGET_MODEL_TYPE or bool(isinstance(archs, list) and OMNI_TARGET_ARCHS & {a for a in archs if isinstance(a, str)})


def omni_breaches(target_config: dict, target_text: dict, cfg: dict, served: list[str], num_speculative_tokens: int) -> list[tuple[str, str]]:  # noqa: C901, PLR0912 (a limit to bring it under)
    """config/speculative.py::_validate_qwen3_omni_dspark (same in 0.30-0.33), for a DSpark drafter
    of a Qwen3-Omni target: (profile field, what breaks it, in vLLM's words where it refuses) in the
    order vLLM checks them; vLLM stops at the first. `target_text` is the thinker's text config
    (`thinker_config.text_config`), else the target's text config."""
    if not is_omni_target(target_config):
        return []
    out: list[tuple[str, str]] = []
    model = "drafter.model"
    declared = declared_architectures(cfg)
    if OMNI_DRAFTER_ARCH not in served and OMNI_DRAFTER_ARCH not in declared:
        out.append((model, f"Qwen3-Omni DSpark requires a standalone draft checkpoint with architectures=['{OMNI_DRAFTER_ARCH}'] (the drafter names {declared}); generic Qwen3DSparkModel checkpoints must be converted first"))
    block = _dspark_value(cfg, "block_size")
    if block is None:
        block = _dspark_value(cfg, "dspark_block_size")
    if not _positive(block):
        out.append((model, f"Qwen3-Omni DSpark requires a positive integer block_size in the draft config (it is {str(block)[:40]!r})"))
    elif num_speculative_tokens != block:
        out.append(("drafter.num_speculative_tokens", f"Qwen3-Omni DSpark requires num_speculative_tokens to match the trained block_size ({block}); got {num_speculative_tokens}"))
    # Keys the config classes default (hidden sizes, heads, head_dim, vocab sizes, depth) are
    # compared only where both configs state them: a missing one is not known here.
    hidden = target_text.get("hidden_size")
    if hidden is not None and cfg.get("target_hidden_size") != hidden:
        out.append((model, f"Qwen3-Omni DSpark draft target_hidden_size must match the target text hidden size ({hidden}); got {cfg.get('target_hidden_size')}"))
    if hidden is not None and "hidden_size" in cfg and cfg["hidden_size"] != hidden:
        out.append((model, f"Qwen3-Omni DSpark draft hidden_size must match the target thinker hidden size ({hidden}); got {cfg['hidden_size']}"))
    for name in ("num_attention_heads", "num_key_value_heads", "head_dim"):
        t = target_text.get(name)
        if name in target_text and not _positive(t):
            out.append(("target.model", f"Qwen3-Omni DSpark requires a positive integer {name} in the target thinker text_config; got {str(t)[:40]}"))
        elif t is not None and name in cfg and cfg[name] != t:
            out.append((model, f"Qwen3-Omni DSpark draft {name} must match the target thinker value ({t}); got {str(cfg[name])[:40]}"))
    ids = _nested(cfg, "dflash_config", "target_layer_ids")
    for key in ("dspark_target_layer_ids", "target_layer_ids"):
        ids = cfg.get(key) if ids is None else ids
    n = target_text.get("num_hidden_layers")
    if not isinstance(ids, list) or not ids:
        out.append((model, "Qwen3-Omni DSpark requires a non-empty target_layer_ids list in the draft config"))
    elif not all(_is_int(i) for i in ids):
        out.append((model, "Qwen3-Omni DSpark target_layer_ids must contain only integers"))
    elif ids != sorted(set(ids)):
        out.append((model, f"Qwen3-Omni DSpark target_layer_ids must be unique and strictly increasing (got {ids[:16]})"))
    elif _is_int(n) and (ids[0] < 0 or ids[-1] >= n):
        out.append((model, f"Qwen3-Omni DSpark target_layer_ids must be zero-based text-layer indices in [0, {n - 1}]; got {ids[:16]}"))
    if _dspark_value(cfg, "use_aux_hidden_state") is not True:
        out.append((model, "Qwen3-Omni DSpark requires use_aux_hidden_state=true because Omni conditioning is supplied through thinker hidden states"))
    if not _positive(cfg.get("markov_rank")):
        out.append((model, "Qwen3-Omni DSpark requires a positive integer markov_rank in the draft config"))
    if cfg.get("markov_head_type") != "vanilla":
        out.append((model, f"Qwen3-Omni DSpark currently requires markov_head_type='vanilla'; got {str(cfg.get('markov_head_type'))[:40]!r}"))
    if cfg.get("sample_from_anchor", True) is not True or cfg.get("dspark_bonus_anchor", False) is not False:
        out.append((model, "Qwen3-Omni DSpark requires sample_from_anchor=true and dspark_bonus_anchor=false"))
    vocab, target_vocab = cfg.get("vocab_size"), target_text.get("vocab_size")
    if vocab is None:
        return out
    if not _positive(vocab):
        out.append((model, f"Qwen3-Omni DSpark input vocab_size must be a positive integer; got {str(vocab)[:40]}"))
        return out
    dvs = cfg.get("draft_vocab_size") if cfg.get("draft_vocab_size") is not None else vocab
    if not _positive(dvs) or (_is_int(target_vocab) and dvs > target_vocab):
        out.append((model, f"Qwen3-Omni DSpark draft_vocab_size must be a positive integer no larger than target vocab_size ({target_vocab}); got {str(dvs)[:40]}"))
    token = _nested(cfg, "dflash_config", "mask_token_id")
    for key in MASK_TOKEN_KEYS[1:]:
        token = cfg.get(key) if token is None else token
    if not (_is_int(token) and 0 <= token < vocab):
        out.append((model, f"Qwen3-Omni DSpark requires a valid mask/noise token id within the draft input vocabulary [0, {vocab - 1}] (got {str(token)[:40]})"))
    ropes = [r for r in (cfg.get("rope_parameters"), cfg.get("rope_scaling")) if isinstance(r, dict)]
    if cfg.get("mrope_section") is not None or any("mrope_section" in r for r in ropes):
        out.append((model, "Qwen3-Omni DSpark draft checkpoints must use logical 1-D RoPE and must not define mrope_section"))
    return out


def block_size(method: str, cfg: dict) -> Any:
    """The block the drafter was trained on: DFlash `dflash_config.block_size`, else the top-level
    `block_size`; DSpark `block_size`, else `dspark_block_size` (the keys vLLM's DSpark default reads)."""
    if method == "dflash":
        b = _nested(cfg, "dflash_config", "block_size")
        return cfg.get("block_size") if b is None else b
    return cfg.get("dspark_block_size") if cfg.get("block_size") is None else cfg.get("block_size")


def width_breaches(method: str, cfg: dict, version: Version, k: int) -> list[Breach]:
    """num_speculative_tokens against the drafter config: vLLM refuses k above `n_predict` that is
    not a multiple of it (config/speculative.py; DSpark exempt since 0.32), and drafts k positions
    whatever the trained block says. A DFlash block is the bonus token + block_size - 1 masks
    (vLLM's speculators conversion: "yielding block_size - 1 speculative tokens"); DSpark drafts
    block_size tokens by vLLM's own default. vLLM never reads block_size otherwise."""
    out: list[Breach] = []
    n_predict = cfg.get("n_predict")
    checked = method != "dspark" or version < DSPARK_N_PREDICT_FREE_SINCE
    if checked and _positive(n_predict) and k > n_predict and k % n_predict:
        out.append(Breach("drafter-n-predict-divisible", f"num_speculative_tokens {k} is above the drafter config's n_predict {n_predict} and not a multiple of it: vLLM {version} refuses at start "
                          f"('num_speculative_tokens:{k} must be divisible by n_predict={n_predict}')", f"use num_speculative_tokens <= {n_predict} or a multiple of it", "drafter.num_speculative_tokens"))
    b = block_size(method, cfg)
    most = b - 1 if method == "dflash" and _positive(b) else b
    if _positive(b) and _is_int(most) and k > most:
        trained = f"blocks of {b} (the bonus token and {b - 1} masks)" if method == "dflash" else f"blocks of {b}"
        out.append(Breach("drafter-beyond-block", f"the drafter was trained on {trained}, so it predicts at most {most} draft tokens, but num_speculative_tokens is {k}: vLLM does not read block_size "
                          "and drafts the extra positions anyway; they are next to never accepted and cost draft compute", f"set num_speculative_tokens to at most {most}", "drafter.num_speculative_tokens"))
    return out
