"""qwen3_dflash's contract rules: what vLLM's Qwen3 block drafter classes (qwen3_dflash.py's
DFlashQwen3 and its subclasses: the DFlash classes, the 0.33 XPress classes, qwen3_dspark.py's
Qwen3 DSpark classes) require of a drafter config and its tensors when vLLM builds them. Read
off the vLLM 0.30.0, 0.32.0 and 0.33.0 sources; where a rule differs the version is a parameter.

A drafter pack's rules get a DrafterView (the drafter config as vLLM sees it, its architectures,
the target config facts, the tensor names, version and runner) and yield Findings with the codes
pack.yaml lists, at the severity it gives each. Loaded by file path; must not import vLLM or torch.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from packaging.version import Version

from ppspec_cli.findings import Finding
from ppspec_cli.knowledge.methods import DrafterView, is_int
from ppspec_cli.knowledge.methods.base import contract_code
from ppspec_cli.knowledge.methods.block import dflash_config, parallel_drafting_token

DRAFTER_NO_MASK_TOKEN = contract_code(
    "drafter-no-mask-token",
    "error",
    "the parallel-drafting token is read from `dflash_config.mask_token_id`, `mask_token_id` (when not null), "
    "`dspark_noise_token_id`, `pard_token`, `ptd_token_id`, first present wins; none: refused at start "
    "(`v1/worker/gpu/spec_decode/utils.py::get_parallel_drafting_token_id`, V1: "
    "`llm_base_proposer.py::_init_parallel_drafting_params`)",
)

DRAFTER_BAD_MASK_TOKEN = contract_code(
    "drafter-bad-mask-token",
    "error",
    "the key it picks holds no non-negative integer (a null `dspark_noise_token_id` still counts as present)",
)

DRAFTER_MASK_TOKEN_OUT_OF_VOCAB = contract_code(
    "drafter-mask-token-out-of-vocab",
    "warning",
    "the token is not below the drafter's `vocab_size`: vLLM does not check, and embeds an untrained row",
)

DFLASH_SAMPLE_FROM_ANCHOR = contract_code(
    "dflash-sample-from-anchor",
    "error",
    "`dflash_config.sample_from_anchor: true` is refused by Model Runner V2 (`dflash/speculator.py`); V1 ignores it",
)

DFLASH_MIXED_ATTENTION_V1 = contract_code(
    "dflash-mixed-attention-v1",
    "error",
    "sliding and full draft layers mixed (`layer_types`, or what Qwen3Config derives from "
    "`use_sliding_window`/`max_window_layers`) need Model Runner V2: refused on V1, e.g. on CPU "
    "(`qwen3_dflash.py::_resolve_layer_attention`)",
)

DFLASH_NO_SLIDING_WINDOW = contract_code(
    "dflash-no-sliding-window",
    "error",
    "a sliding draft layer (or `dflash_config.use_swa`) without `dflash_config.swa_window_size` or a top-level "
    "`sliding_window` (which Qwen3Config drops unless `use_sliding_window: true`)",
)

DSPARK_NO_MARKOV_RANK = contract_code(
    "dspark-no-markov-rank",
    "error",
    "a Qwen3 DSpark config without a positive `markov_rank` (`qwen3_dspark.py`, the Markov head)",
)

DSPARK_LM_HEAD_MISSING = contract_code(
    "dspark-lm-head-missing",
    "error",
    "a draft vocabulary smaller than the target's needs the drafter's own `lm_head` and a `d2t` tensor "
    "(`Qwen3DSparkForCausalLM.load_weights`); no vocab check by `shapes` for these drafters",
)

DSPARK_D2T_MISSING = contract_code(
    "dspark-d2t-missing",
    "error",
    "a draft vocabulary smaller than the target's needs the drafter's own `lm_head` and a `d2t` tensor "
    "(`Qwen3DSparkForCausalLM.load_weights`); no vocab check by `shapes` for these drafters",
)

DSPARK_EMBED_MISSING = contract_code(
    "dspark-embed-missing",
    "error",
    "an input `vocab_size` larger than the target's needs the drafter's own `embed_tokens` (same function; not a "
    "`vocab-mismatch`)",
)

DSPARK_TENSORS_NOT_CHECKED = contract_code(
    "dspark-tensors-not-checked",
    "info",
    "the vocabularies differ and no index or safetensors header was read",
)

XPRESS_TOPC = contract_code(
    "xpress-topc",
    "error",
    "vLLM 0.33 only: an XPress drafter's `xpress_topc` outside 0..draft vocabulary",
)

#: The codes these rules report (registered as the pack's when this file loads).
CODES = (
    DRAFTER_NO_MASK_TOKEN,
    DRAFTER_BAD_MASK_TOKEN,
    DRAFTER_MASK_TOKEN_OUT_OF_VOCAB,
    DFLASH_SAMPLE_FROM_ANCHOR,
    DFLASH_MIXED_ATTENTION_V1,
    DFLASH_NO_SLIDING_WINDOW,
    DSPARK_NO_MARKOV_RANK,
    DSPARK_LM_HEAD_MISSING,
    DSPARK_D2T_MISSING,
    DSPARK_EMBED_MISSING,
    DSPARK_TENSORS_NOT_CHECKED,
    XPRESS_TOPC,
)


#: qwen3_dspark.py's Qwen3DSparkForCausalLM classes (served with method dspark).
QWEN3_DSPARK = frozenset({"Qwen3DSparkModel", "Qwen3OmniDSparkModel"})
DSPARK, DFLASH = "dspark", "dflash"

#: First release whose XPress drafters (and their `xpress_topc` bound) exist.
XPRESS_SINCE = Version("0.33.0")
XPRESS = frozenset({"Qwen3XPressModel", "DFlashQwen3XPressModel"})

#: The `layer_types` entry of a sliding-window layer (qwen3_dflash.py::_resolve_layer_attention).
SLIDING = "sliding_attention"


def layer_types(cfg: Mapping[str, Any]) -> list[str] | None:
    """The draft layers' attention types as the config class hands them to vLLM: `layer_types`
    when the config lists them; for a qwen3 config without it, what transformers' Qwen3Config
    derives: all full unless `use_sliding_window` is true (its default is false), else sliding
    from `max_window_layers` on when a window is set. None: not known from the config (a key
    the derivation reads is missing; its library default is not assumed)."""
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and all(isinstance(x, str) for x in lt):
        return lt
    n, mwl = cfg.get("num_hidden_layers"), cfg.get("max_window_layers")
    if lt is not None or cfg.get("model_type") != "qwen3" or not is_int(n):
        return None
    if cfg.get("use_sliding_window") is not True or ("sliding_window" in cfg and cfg["sliding_window"] is None):
        return ["full_attention"] * n
    if "sliding_window" in cfg and is_int(mwl):
        return [SLIDING if i >= mwl else "full_attention" for i in range(n)]
    return None


def sliding_window(cfg: Mapping[str, Any]) -> tuple[bool, Any]:
    """(known, the window vLLM gives a sliding draft layer): `dflash_config.swa_window_size` when
    the key is there (even null), else the top-level `sliding_window`, which transformers'
    Qwen3Config drops (None) unless `use_sliding_window` is true, and sets to its own default
    when the key is missing (not known here)."""
    dc = dflash_config(cfg)
    if "swa_window_size" in dc:
        return True, dc["swa_window_size"]
    if cfg.get("model_type") == "qwen3":
        if cfg.get("use_sliding_window") is not True:
            return True, None
        return ("sliding_window" in cfg), cfg.get("sliding_window")
    return True, cfg.get("sliding_window")


def attention_breaches(cfg: Mapping[str, Any], runner: str) -> list[Finding]:
    """qwen3_dflash.py::_resolve_layer_attention (same in 0.30-0.33), for every draft layer."""
    types = layer_types(cfg)
    use_swa = bool(dflash_config(cfg).get("use_swa", False))
    out: list[Finding] = []
    if types is None and not use_swa:
        return out
    n_sliding = sum(t == SLIDING for t in types or ())
    if types is not None and 0 < n_sliding < len(types) and runner != "v2":
        out.append(
            DFLASH_MIXED_ATTENTION_V1.at(
                "drafter.model",
                f"the drafter mixes sliding and full attention layers ({n_sliding} of {len(types)} sliding): vLLM's "
                "V1 model runner refuses at start "
                "('DFlash drafters with mixed sliding/full attention require the V2 model runner')",
                fix="run on GPUs (Model Runner V2), or use a drafter whose layers all use one attention type",
            )
        )
    any_sliding = use_swa or n_sliding > 0
    known, window = sliding_window(cfg)
    if any_sliding and known and window is None:
        out.append(
            DFLASH_NO_SLIDING_WINDOW.at(
                "drafter.model",
                "the drafter has sliding-attention layers but no window size: vLLM refuses at start ('DFlash sliding "
                "attention requires a window size configured in "
                "dflash_config.swa_window_size or the top-level sliding_window')"
                + (
                    " (its qwen3 config sets sliding_window but not use_sliding_window: true, so transformers drops it)"
                    if cfg.get("sliding_window") is not None
                    else ""
                ),
                fix="set dflash_config.swa_window_size to the window the drafter was trained with",
            )
        )
    return out


def dspark_tensor_breaches(
    cfg: Mapping[str, Any], names: set[str] | frozenset[str] | None, target_vocab: int | None
) -> list[Finding]:
    """qwen3_dspark.py::Qwen3DSparkForCausalLM.load_weights (same in 0.30-0.33): a drafter whose
    input vocab is larger than the target's must ship embed_tokens; one whose draft vocab is smaller
    must ship lm_head and d2t (names are matched as vLLM matches them: by substring; t2d is skipped)."""
    vocab = cfg.get("vocab_size")
    dvs = cfg.get("draft_vocab_size") if cfg.get("draft_vocab_size") is not None else vocab
    if not (is_int(vocab) and is_int(dvs) and is_int(target_vocab)):
        return []
    expanded, reduced = vocab > target_vocab, dvs < target_vocab  # type: ignore[operator]
    if not (expanded or reduced):
        return []
    if names is None:
        return [
            DSPARK_TENSORS_NOT_CHECKED.at(
                "drafter.model",
                f"the DSpark drafter's vocabulary (input {vocab}, draft {dvs}) differs from the target's "
                f"{target_vocab}; "
                "whether it ships the embed_tokens / lm_head / d2t tensors vLLM then requires was not checked (no "
                "index or weights here)",
            )
        ]
    loaded = [n for n in names if "t2d" not in n]
    out = []
    if expanded and not any("embed_tokens" in n for n in loaded):
        out.append(
            DSPARK_EMBED_MISSING.at(
                "drafter.model",
                f"the DSpark drafter's input vocabulary ({vocab}) is larger than the target's ({target_vocab}) but "
                "it has no embed_tokens tensor: vLLM refuses at load",
                fix="use a drafter checkpoint that includes its embed_tokens",
            )
        )
    if reduced and not any("lm_head" in n for n in loaded):
        out.append(
            DSPARK_LM_HEAD_MISSING.at(
                "drafter.model",
                f"the DSpark drafter's draft vocabulary ({dvs}) is smaller than the target's ({target_vocab}) but it "
                "has no lm_head tensor (the target's cannot be shared): vLLM refuses at load",
                fix="use a drafter checkpoint that includes its lm_head",
            )
        )
    if reduced and not any("d2t" in n for n in loaded):
        out.append(
            DSPARK_D2T_MISSING.at(
                "drafter.model",
                f"the DSpark drafter's draft vocabulary ({dvs}) is smaller than the target's ({target_vocab}) but it "
                "has no d2t tensor to map draft ids to target ids: vLLM refuses at load",
                fix="use a drafter checkpoint that includes d2t",
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# The rules (in the order vLLM meets them)


def xpress_topc(v: DrafterView) -> Iterator[Finding]:
    """vLLM 0.33's `xpress_topc` on an XPress drafter must lie in 0..draft vocabulary."""
    cfg = v.config
    topc = cfg.get("xpress_topc")
    if v.method != DFLASH or v.version < XPRESS_SINCE or not XPRESS & set(v.served) or topc is None:
        return
    dvs = cfg.get("draft_vocab_size") or cfg.get("vocab_size")
    if not (isinstance(topc, (int, float)) and is_int(dvs) and 0 <= topc <= dvs):
        yield XPRESS_TOPC.at(
            "drafter.model",
            f"the drafter's xpress_topc is {str(topc)[:40]!r}: vLLM refuses at start ('xpress_topc must be between 0 "
            f"and the draft vocabulary size ({dvs})')",
            fix="set xpress_topc between 0 and the draft vocabulary size, or remove it",
        )


def mask_token(v: DrafterView) -> Iterator[Finding]:
    """The parallel-drafting token (vLLM's get_parallel_drafting_token_id order)."""
    cfg = v.config
    key, tok = parallel_drafting_token(cfg)
    if key is None:
        yield DRAFTER_NO_MASK_TOKEN.at(
            "drafter.model",
            f"the {v.method} drafter config names no parallel-drafting token: vLLM refuses at start ('Model config "
            "must specify `dflash_config.mask_token_id`, "
            "`mask_token_id`, `dspark_noise_token_id`, `pard_token`, or `ptd_token_id` for parallel drafting.')",
            fix="set the token the drafter was trained with (DFlash: dflash_config.mask_token_id; DSpark: "
            "dspark_noise_token_id) in its config.json",
        )
    elif not is_int(tok) or tok < 0:
        yield DRAFTER_BAD_MASK_TOKEN.at(
            "drafter.model",
            f"the drafter's parallel-drafting token `{key}` is {str(tok)[:40]!r}, not a non-negative integer token "
            "id: vLLM cannot use it",
            fix=f"set `{key}` to the token id the drafter was trained with",
        )
    elif is_int(cfg.get("vocab_size")) and tok >= cfg["vocab_size"]:
        yield DRAFTER_MASK_TOKEN_OUT_OF_VOCAB.at(
            "drafter.model",
            f"the drafter's parallel-drafting token `{key}` = {tok} lies outside its input vocabulary (vocab_size "
            f"{cfg['vocab_size']}): "
            "vLLM does not check this and embeds a row that is not a trained token",
            fix=f"check `{key}` and vocab_size against the drafter's training config",
        )


def sample_from_anchor(v: DrafterView) -> Iterator[Finding]:
    if v.runner == "v2" and dflash_config(v.config).get("sample_from_anchor", False):
        yield DFLASH_SAMPLE_FROM_ANCHOR.at(
            "drafter.model",
            "the drafter sets dflash_config.sample_from_anchor: true: vLLM's Model Runner V2 refuses it at start "
            "('sample_from_anchor=True is not supported for DFlash')",
            fix="remove dflash_config.sample_from_anchor (DFlash uses the anchor as the bonus token); a DSpark "
            "drafter sets the top-level sample_from_anchor",
        )


def layer_attention(v: DrafterView) -> Iterator[Finding]:
    yield from attention_breaches(v.config, v.runner)


def markov_head(v: DrafterView) -> Iterator[Finding]:
    """Qwen3DSparkForCausalLM builds its Markov head from `markov_rank`."""
    if v.method != DSPARK or not QWEN3_DSPARK & set(v.served):
        return
    rank = v.config.get("markov_rank")
    if not (is_int(rank) and rank > 0):
        yield DSPARK_NO_MARKOV_RANK.at(
            "drafter.model",
            f"the DSpark drafter config's markov_rank is {'missing' if rank is None else repr(rank)[:40]}: vLLM's "
            "Qwen3 DSpark model cannot build its Markov head and fails at start",
            fix="set markov_rank to the rank the drafter was trained with",
        )


def vocabulary_tensors(v: DrafterView) -> Iterator[Finding]:
    if v.method == DSPARK and QWEN3_DSPARK & set(v.served):
        yield from dspark_tensor_breaches(v.config, v.tensor_names, v.target_vocab)


def get_rules() -> list[tuple[str, Any]]:
    return [
        ("xpress-topc", xpress_topc),
        ("parallel-drafting-token", mask_token),
        ("sample-from-anchor", sample_from_anchor),
        ("layer-attention", layer_attention),
        ("markov-head", markov_head),
        ("vocabulary-tensors", vocabulary_tensors),
    ]
