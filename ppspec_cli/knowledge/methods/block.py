"""What the parallel block drafters (DFlash, DSpark) share: one drafter pass drafts the whole
block, the token fed at the parallel-drafting query slots, and vLLM's width checks of
num_speculative_tokens against the drafter config (config/speculative.py, 0.30-0.33)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, TypeGuard

from packaging.version import Version

from ppspec_cli.findings import Finding
from ppspec_cli.knowledge.methods.base import DrafterClass, DrafterView, SpecMethod, contract_code, is_int

#: Where vLLM looks for the token it feeds at the parallel-drafting query slots, first present
#: wins (V2: spec_decode/utils.py::get_parallel_drafting_token_id; V1:
#: llm_base_proposer.py::_init_parallel_drafting_params; the same order in 0.30-0.33). The first
#: counts when the key is in `dflash_config`, the second when it is set and not null, the others
#: when the key is there at all (hasattr), even null.
MASK_TOKEN_KEYS = (
    "dflash_config.mask_token_id",
    "mask_token_id",
    "dspark_noise_token_id",
    "pard_token",
    "ptd_token_id",
)


def nested(cfg: Mapping[str, Any], section: str, name: str) -> Any:
    sub = cfg.get(section)
    return sub.get(name) if isinstance(sub, dict) else None


def dflash_config(cfg: Mapping[str, Any]) -> dict:
    dc = cfg.get("dflash_config")
    return dc if isinstance(dc, dict) else {}


def positive(v: Any) -> TypeGuard[int]:
    return is_int(v) and v > 0


def parallel_drafting_token(cfg: Mapping[str, Any]) -> tuple[str | None, Any]:
    """(the key vLLM reads the parallel-drafting token from, its raw value); (None, None) when
    the config names none, which vLLM refuses (MASK_TOKEN_KEYS gives the order)."""
    dc = dflash_config(cfg)
    if "mask_token_id" in dc:
        return "dflash_config.mask_token_id", dc["mask_token_id"]
    if cfg.get("mask_token_id") is not None:
        return "mask_token_id", cfg["mask_token_id"]
    for key in MASK_TOKEN_KEYS[2:]:
        if key in cfg:
            return key, cfg[key]
    return None, None


#: The width codes every block drafter reports.
N_PREDICT_DIVISIBLE = contract_code(
    "drafter-n-predict-divisible",
    "error",
    "`num_speculative_tokens` above the config's `n_predict` must be a multiple of it (`config/speculative.py`; field "
    "`drafter.num_speculative_tokens`); DSpark is exempt since 0.32",
)
BEYOND_BLOCK = contract_code(
    "drafter-beyond-block",
    "warning",
    "`num_speculative_tokens` beyond the trained block (DFlash: `block_size` - 1 masks after the bonus token; DSpark: "
    "`block_size` / `dspark_block_size`, vLLM's own default): vLLM never reads `block_size` and drafts the extra "
    "positions anyway (field `drafter.num_speculative_tokens`)",
)
WIDTH_CODES = (N_PREDICT_DIVISIBLE, BEYOND_BLOCK)


@dataclass(frozen=True)
class BlockMethod(SpecMethod):
    """A parallel block drafter: `parallel_draft`, trained on blocks of `block_size`."""

    block_holds_bonus: bool = False  # the block is the bonus token + block_size - 1 draft slots
    n_predict_free_since: Version | None = None  # vLLM no longer checks `n_predict` divisibility from this release

    def block_size(self, cfg: Mapping[str, Any]) -> Any:
        """The block the drafter was trained on, from the keys vLLM's default for the method reads."""
        return cfg.get("block_size")

    def width_breaches(self, cfg: Mapping[str, Any], version: Version, k: int) -> list[Finding]:
        """num_speculative_tokens against the drafter config: vLLM refuses k above `n_predict` that
        is not a multiple of it, and drafts k positions whatever the trained block says. A DFlash
        block is the bonus token + block_size - 1 masks (vLLM's speculators conversion: "yielding
        block_size - 1 speculative tokens"); DSpark drafts block_size tokens by vLLM's own default.
        vLLM never reads block_size otherwise."""
        out: list[Finding] = []
        n_predict = cfg.get("n_predict")
        checked = self.n_predict_free_since is None or version < self.n_predict_free_since
        if checked and positive(n_predict) and k > n_predict and k % n_predict:
            out.append(
                N_PREDICT_DIVISIBLE.at(
                    "drafter.num_speculative_tokens",
                    f"num_speculative_tokens {k} is above the drafter config's n_predict {n_predict} and not a "
                    f"multiple of it: vLLM {version} refuses at start "
                    f"('num_speculative_tokens:{k} must be divisible by n_predict={n_predict}')",
                    fix=f"use num_speculative_tokens <= {n_predict} or a multiple of it",
                )
            )
        b = self.block_size(cfg)
        most = b - 1 if self.block_holds_bonus and positive(b) else b
        if positive(b) and is_int(most) and k > most:
            trained = (
                f"blocks of {b} (the bonus token and {b - 1} masks)" if self.block_holds_bonus else f"blocks of {b}"
            )
            out.append(
                BEYOND_BLOCK.at(
                    "drafter.num_speculative_tokens",
                    f"the drafter was trained on {trained}, so it predicts at most {most} draft tokens, but "
                    f"num_speculative_tokens is {k}: vLLM does not read block_size "
                    "and drafts the extra positions anyway; they are next to never accepted and cost draft compute",
                    fix=f"set num_speculative_tokens to at most {most}",
                )
            )
        return out

    def contract(self, view: DrafterView, classes: tuple[DrafterClass, ...]) -> list[Finding]:
        return self.width_breaches(view.config, view.version, view.num_speculative_tokens)
