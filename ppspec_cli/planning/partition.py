"""How the target's layers are split into pipeline stages: vLLM's default split, and a drafter-aware one.

vLLM's split (`default_partition`, vLLM distributed/utils.py::get_pp_indices) and the [start, end)
bounds of each stage are what every other module asks for.

A drafter-aware split: which `layer_partition` balances the stages' cost per step.

Cost model (decode, where pipeline stages wait on each other): one target step of a stage costs
about the bytes of weights it reads, because decode at serving batch sizes is memory-bound. Every
stage reads its decoder layers once per step. The last stage also reads the lm_head once and runs
the drafter its method's `drafter_passes` times (knowledge/methods: one draft pass per speculative token for EAGLE3,
EAGLE
and MTP; one pass for the whole block for DFlash and DSpark), each reading the drafter's weights:
its layer(s), fc and its own lm_head. The first stage's embedding is a row
lookup and costs next to nothing. vLLM's default split ignores the drafter (it gives the last stage
no more than `n // pp` layers), so with a drafter of several layer-equivalents the last stage is
the slowest and every other stage idles for the difference.

`suggest_partition` returns the contiguous split (at least one layer per stage) that minimises the
most expensive stage under that model; ties go to the split that is closest to vLLM's default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Partition (vLLM: distributed/utils.py::get_pp_indices)


def default_partition(num_layers: int, pp: int) -> list[int]:
    """vLLM's default split: n // pp each; the remainder adds one layer to stages -2, -3, ...

    The last stage never gets an extra layer (it also holds the lm_head and the drafter); the first
    stage only does when rem == pp - 1.
    """
    if pp < 1:
        raise ValueError("pp must be >= 1")
    base, rem = divmod(num_layers, pp)
    parts = [base] * pp
    for i in range(rem):
        parts[pp - 2 - i] += 1
    return parts


def stage_bounds(partition: list[int]) -> list[tuple[int, int]]:
    """[start, end) per stage from layer counts."""
    out, start = [], 0
    for n in partition:
        out.append((start, start + n))
        start += n
    return out


def suggest_partition(
    layer_costs: Sequence[float] | int,
    pp: int,
    *,
    last_extra: float = 0.0,
    first_extra: float = 0.0,
    prefer: Sequence[int] | None = None,
) -> list[int]:
    """The split of the layers into `pp` contiguous stages that minimises the largest stage cost.

    layer_costs: one cost per decoder layer, or a layer count (every layer costs 1).
    last_extra / first_extra: what the last / first stage carries besides its layers, in the same
    unit (lm_head + num_speculative_tokens x drafter; embedding).
    prefer: among equally good splits, the one nearest this one (default: none, leftmost).
    """
    costs = [1.0] * layer_costs if isinstance(layer_costs, int) else [float(c) for c in layer_costs]
    n = len(costs)
    if pp < 1 or n < pp:
        raise ValueError(f"cannot split {n} layers into {pp} stages of at least one layer")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)

    def seg(i: int, j: int, stage: int) -> float:
        return prefix[j] - prefix[i] + (first_extra if stage == 0 else 0.0) + (last_extra if stage == pp - 1 else 0.0)

    # best[s][j]: the smallest possible max stage cost covering layers [0, j) with stages 0..s
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(pp)]
    for j in range(1, n - pp + 2):
        best[0][j] = seg(0, j, 0)
    for s in range(1, pp):
        for j in range(s + 1, n - (pp - s - 1) + 1):
            best[s][j] = min(max(best[s - 1][i], seg(i, j, s)) for i in range(s, j))
    target = best[pp - 1][n]
    eps = 1e-9 * max(1.0, target)
    # every split achieving the optimum, then the one nearest `prefer`
    splits: list[list[int]] = []

    def walk(s: int, j: int, tail: list[int]) -> None:
        if len(splits) >= 4096:
            return
        if s == 0:
            if seg(0, j, 0) <= target + eps:
                splits.append([j, *tail])
            return
        for i in range(s, j):
            if best[s - 1][i] <= target + eps and seg(i, j, s) <= target + eps:
                walk(s - 1, i, [j - i, *tail])

    walk(pp - 1, n, [])
    if prefer is not None and len(prefer) == pp:
        return min(splits, key=lambda p: (sum(abs(a - b) for a, b in zip(p, prefer)), p))
    return splits[0]


#: the most layers the memory balance splits (its search is O(PP x layers^2); real models have under 200)
MAX_BALANCED_LAYERS = 1024
#: how much slower than the time-balanced optimum (the busiest stage's bytes read per step) a split may be for
#: the memory balance to choose it
TIME_SLACK = 0.02


@dataclass(frozen=True)
class StageEnds:
    """What the first and last stage add to their layers' own: the first stage's embedding (memory);
    on the last stage the lm_head and the drafter's passes (time), the lm_head, drafter, embedding
    copy and sampler (memory) and the drafter's KV layers (KV bytes per token)."""

    first_mem: float = 0.0
    last_time: float = 0.0
    last_mem: float = 0.0
    last_kv: float = 0.0


def balance_memory(
    layer_time: Sequence[float],
    layer_mem: Sequence[float],
    layer_kv: Sequence[float],
    pp: int,
    *,
    budget: float,
    ends: StageEnds = StageEnds(),
    slack: float = TIME_SLACK,
    prefer: Sequence[int] | None = None,
) -> list[int] | None:
    """The contiguous split into `pp` stages that maximises the smallest stage's KV capacity, among the splits whose
    busiest stage costs at most (1 + slack) x the time-balanced optimum (`suggest_partition`).

    layer_time: per layer, what a step reads (the time model); layer_mem: per layer, one GPU's weight bytes;
    layer_kv: per layer, one GPU's KV bytes per token; `ends`: what the first and last stage add. A stage's
    capacity = (budget - its memory) / its KV bytes per token (tokens). None when no split leaves every stage
    positive room, or the KV is unknown (all zero)."""
    n = len(layer_time)
    if pp < 2 or n < pp or n > MAX_BALANCED_LAYERS or len(layer_mem) != n or len(layer_kv) != n or not any(layer_kv):
        return None
    best_time = suggest_partition(list(layer_time), pp, last_extra=ends.last_time)
    pt, pm, pk = _prefix(layer_time), _prefix(layer_mem), _prefix(layer_kv)

    def time(i: int, j: int, s: int) -> float:
        return pt[j] - pt[i] + (ends.last_time if s == pp - 1 else 0.0)

    bounds, start = [], 0
    for c in best_time:
        bounds.append((start, start + c))
        start += c
    limit = max(time(i, j, s) for s, (i, j) in enumerate(bounds)) * (1 + slack) + 1e-9

    def cap(i: int, j: int, s: int) -> float:
        if time(i, j, s) > limit:
            return float("-inf")  # slower than the slack allows: not a candidate
        mem = pm[j] - pm[i] + (ends.first_mem if s == 0 else 0.0) + (ends.last_mem if s == pp - 1 else 0.0)
        kv = pk[j] - pk[i] + (ends.last_kv if s == pp - 1 else 0.0)
        room = budget - mem
        if room <= 0:
            return -1.0
        return room / kv if kv > 0 else float("inf")

    return _max_min_split(n, pp, cap, prefer)


def _prefix(xs: Sequence[float]) -> list[float]:
    out = [0.0]
    for x in xs:
        out.append(out[-1] + x)
    return out


def _max_min_split(
    n: int, pp: int, cap: Callable[[int, int, int], float], prefer: Sequence[int] | None
) -> list[int] | None:
    """The split of n layers into pp stages maximising the smallest cap(i, j, stage) (dynamic
    programming; a tie goes to the split nearer `prefer`); None when its smallest cap is not positive."""
    neg = float("-inf")
    best = [[neg] * (n + 1) for _ in range(pp)]
    back = [[-1] * (n + 1) for _ in range(pp)]
    for j in range(1, n - pp + 2):
        best[0][j] = cap(0, j, 0)
    for s in range(1, pp):
        for j in range(s + 1, n - (pp - s - 1) + 1):
            for i in range(s, j):
                c = cap(i, j, s)
                if best[s - 1][i] == neg or c == neg:
                    continue
                v = min(best[s - 1][i], c)
                better = v > best[s][j] + 1e-9
                tie = abs(v - best[s][j]) <= 1e-9 and prefer is not None
                if better or (tie and back[s][j] >= 0 and _closer(i, back[s][j], s, prefer)):
                    best[s][j], back[s][j] = v, i
    if best[pp - 1][n] <= 0:
        return None
    out, j = [], n
    for s in range(pp - 1, 0, -1):
        i = back[s][j]
        out.append(j - i)
        j = i
    out.append(j)
    return out[::-1]


def _closer(i: int, old: int, s: int, prefer: Sequence[int] | None) -> bool:
    """Whether ending stage s-1 at layer i is nearer the preferred split than at `old`."""
    if prefer is None:
        return False
    want = sum(prefer[:s])
    return abs(i - want) < abs(old - want)
