"""`drafter.schedule`: vLLM's dynamic speculative decoding (`speculative_config.
num_speculative_tokens_per_batch_size`, vLLM 0.30 to 0.34), a list of `[batch_lo, batch_hi, k]`
inclusive ranges of the number of scheduled requests and the draft tokens per step there.

Two things live here: `check` (vLLM's own rules for the schedule, per release, and the known
pitfalls, as findings) and `derive` (the schedule `ppspec bench` proposes from the best k it
measured at each concurrency).

vLLM's rules, read in the source of vLLM 0.30, 0.31, 0.32, 0.33 and 0.34 (the same
vllm/v1/spec_decode/dynamic/utils.py in all five:
`validate_and_normalize_dynamic_sd_schedule` and `build_dynamic_sd_schedule_lookup`;
vllm/config/vllm.py `_maybe_disable_dynamic_sd_for_data_parallel` and
`_maybe_override_dynamic_sd_cudagraph_mode`): ranges positive with start <= end, k >= 0, sorted
ranges without overlap, the first starting at 1; gaps and the tail carry the previous k forward;
k is clamped to num_speculative_tokens; data parallelism drops the schedule (static k); on the V1
model runner full CUDA graphs become piecewise. vLLM 0.33 (`_maybe_disable_dynamic_sd_for_v1`)
also drops it on V1 for methods other than ngram, eagle, eagle3, mtp, draft_model and dflash;
0.34 has no V1 runner. The V1 rules are read per release from its table (`runners.dynamic_sd`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator

from ppspec_cli.findings import Finding
from ppspec_cli.findings.codes import (
    SCHEDULE_BOUNDARY_THRASH,
    SCHEDULE_CUDAGRAPH_PIECEWISE,
    SCHEDULE_DP_DISABLED,
    SCHEDULE_INVALID,
    SCHEDULE_K_ABOVE_MAX,
    SCHEDULE_METHOD_DISABLED,
    SCHEDULE_PP_UNVERIFIED,
    SCHEDULE_RELEASE_UNVERIFIED,
    SCHEDULE_ZERO_K_COST,
)
from ppspec_cli.knowledge import methods

if TYPE_CHECKING:
    from ppspec_cli.planning.resolve import Resolved

#: The oldest release whose source was read for the rules above (0.30 to 0.34 all have the feature;
#: 0.34 has no V1 runner, so its V1 rules are gone).
VERIFIED_FROM = (0, 30)
#: The top of the last range bench derives: the highest --concurrency bench accepts. vLLM cuts any
#: range at its max_num_seqs and carries the last k through the tail, so a larger top is harmless.
TOP = 4096


def structure_problems(schedule: list[list[int]]) -> list[str]:
    """vLLM's structural rules (validate_and_normalize_dynamic_sd_schedule), as messages; [] if valid."""
    out = []
    if not schedule:
        return ["the schedule is empty"]
    for lo, hi, k in schedule:
        if lo <= 0 or hi <= 0:
            out.append(f"range [{lo}, {hi}] is not positive")
        elif lo > hi:
            out.append(f"range [{lo}, {hi}] starts after it ends")
        if k < 0:
            out.append(f"k {k} in range [{lo}, {hi}] is negative")
    prev = 0
    for lo, hi, _k in sorted(schedule, key=lambda e: e[0]):
        if lo <= prev:
            out.append(f"range [{lo}, {hi}] overlaps the range before it (ending at {prev})")
        prev = max(prev, hi)
    first = min(e[0] for e in schedule)
    if first != 1:
        out.append(f"the first range starts at {first}, not 1 (every batch size needs a k)")
    return out


def check(r: "Resolved") -> Iterator[Finding]:
    """The findings of a profile's `drafter.schedule` for the vLLM release, runner and topology it
    will run on."""
    d = r.profile.drafter
    if d is None or d.schedule is None:
        return
    field = "drafter.schedule"
    bad = structure_problems(d.schedule)
    if bad:
        yield SCHEDULE_INVALID.at(field, "vLLM refuses this schedule at start: " + "; ".join(bad[:4]))
        return
    over = [e for e in d.schedule if e[2] > d.num_speculative_tokens]
    if over:
        yield SCHEDULE_K_ABOVE_MAX.at(
            field,
            f"k {over[0][2]} in range [{over[0][0]}, {over[0][1]}] exceeds drafter.num_speculative_tokens "
            f"{d.num_speculative_tokens}: vLLM silently clamps it (the drafter proposes at most "
            "num_speculative_tokens)",
        )
    yield from _release(r, field)
    yield from _pitfalls(r, d, field)


def _v1_rules(r: "Resolved") -> tuple[set[str] | None, str | None] | None:
    """The release's Dynamic-SD rules on the V1 runner, from its table (`runners.dynamic_sd`): the
    methods V1 keeps a schedule for (None: every method) and where V1 turns full CUDA graphs
    piecewise (None: it does not); None when the table carries no runner facts."""
    from ppspec_cli.knowledge import archtable

    run = archtable.runner_section(r.arch_table)
    if not run.get("classes"):
        return None
    dsd = run.get("dynamic_sd") or {}
    keeps = set(dsd["v1_keeps_methods"]) if dsd.get("v1_keeps_methods") else None
    return keeps, dsd.get("v1_piecewise_at")


def _release(r: "Resolved", field: str) -> Iterator[Finding]:
    v = r.version
    d = r.profile.drafter
    assert d is not None  # the schedule rule runs for a drafter's schedule only
    if v is not None and (v.major, v.minor) < VERIFIED_FROM:
        yield SCHEDULE_RELEASE_UNVERIFIED.at(
            field,
            f"dynamic speculative decoding is read in the source of vLLM 0.30 to 0.34; vLLM {r.engine_version} is "
            "older (it may refuse the unknown speculative_config key at start)",
        )
    if r.profile.topology.data_parallel > 1:
        yield SCHEDULE_DP_DISABLED.at(
            field,
            f"data_parallel {r.profile.topology.data_parallel}: vLLM drops the schedule and serves the static "
            f"num_speculative_tokens {d.num_speculative_tokens} (ranks could pick different k and deadlock)",
        )
    dsd = _v1_rules(r)
    keeps: set[str] | None
    if dsd is None:  # no runner facts in the table: vLLM 0.33's rule as read by hand
        keeps = (
            None
            if (v is None or (v.major, v.minor) < (0, 33))
            else ({d.method} if methods.get(d.method).schedule_on_v1 else set())
        )
        piecewise: str | None = "config/vllm.py _maybe_override_dynamic_sd_cudagraph_mode"
    else:
        keeps, piecewise = dsd
    if r.runner == "v1" and keeps is not None and d.method not in keeps:
        yield SCHEDULE_METHOD_DISABLED.at(
            field,
            f"vLLM {r.engine_version} drops the schedule on the V1 runner for method {d.method}"
            + (f" (it keeps it for {', '.join(sorted(keeps))} only)" if keeps else ""),
        )
    if r.runner == "v1" and r.platform != "cpu" and piecewise:
        yield SCHEDULE_CUDAGRAPH_PIECEWISE.at(
            field,
            "on the V1 runner a schedule makes vLLM replace full CUDA graphs with piecewise ones (the verification "
            f"length changes at run time; {piecewise}): every step may get slower",
        )
    if r.pp > 1:
        yield SCHEDULE_PP_UNVERIFIED.at(
            field,
            f"dynamic speculative decoding under pipeline parallelism ({r.pp} stages) is unverified: vLLM does not "
            "test it and ppspec's GPU validation has not run it yet",
        )


def _pitfalls(r: "Resolved", d, field: str) -> Iterator[Finding]:
    ks = {e[2] for e in d.schedule}
    if len(ks) > 1:
        yield SCHEDULE_BOUNDARY_THRASH.at(
            field,
            "vLLM picks k from the raw number of scheduled requests each step, prefills included: a load near a "
            "range boundary flips k as requests join and leave (vLLM #49548 reports throughput collapsing there)",
            fix="put boundaries away from the concurrency you serve; `ppspec bench` measures the schedule at every "
            "level",
        )
    if 0 in ks:
        yield SCHEDULE_ZERO_K_COST.at(
            field,
            "a range with k 0 still reserves lookahead slots and runs the drafter's prefill: it is slower than "
            "serving without speculation (users report 6.6-21.6% TPOT; ppspec measured 7% below no speculation on an "
            "H200)",
            fix="if speculation never pays at your load, serve without `drafter:`",
        )


def derive(best_k: list[tuple[int, int]]) -> list[list[int]]:
    """The schedule from the best k measured at each concurrency ([(c, k)], k 0 where no
    speculation was best): the boundary between two measured levels c1 < c2 is their geometric
    midpoint (floor(sqrt(c1 * c2)), so 1 and 4 split at 2, 4 and 16 at 8); the first range starts
    at 1 and the last runs to TOP; neighbours with the same k are merged."""
    pts = sorted(best_k)
    out: list[list[int]] = []
    lo = 1
    for i, (c, k) in enumerate(pts):
        hi = math.isqrt(c * pts[i + 1][0]) if i + 1 < len(pts) else max(TOP, c)
        if out and out[-1][2] == k:
            out[-1][1] = hi
        else:
            out.append([lo, hi, k])
        lo = hi + 1
    return out


def k_at(schedule: list[list[int]], batch: int) -> int:
    """The k vLLM uses at `batch` scheduled requests (gaps and the tail carry the previous k)."""
    k = 0
    for lo, hi, kk in sorted(schedule):
        if lo > batch:
            break
        k = kk
        if batch <= hi:
            break
    return k
