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

from collections.abc import Sequence

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
