"""ppspec_cli/planning/partition.py: the drafter-aware layer split (pure; exhaustive checks on small cases)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import pytest

from ppspec_cli.planning.partition import stage_bounds, suggest_partition
from ppspec_cli.planning.plan import EngineTaps, PlanInputs, WeightBytes, build_plan, default_partition


def stage_costs(
    layer_costs: Sequence[float], partition: Sequence[int], *, first_extra: float = 0.0, last_extra: float = 0.0
) -> list[float]:
    """Cost of every stage of `partition` (layer counts) under partition.py's cost model (the brute force's
    yardstick)."""
    out = []
    for i, (start, end) in enumerate(stage_bounds(list(partition))):
        c = float(sum(layer_costs[start:end]))
        if i == 0:
            c += first_extra
        if i == len(partition) - 1:
            c += last_extra
        out.append(c)
    return out


def _all_splits(n: int, pp: int):
    for cuts in itertools.combinations(range(1, n), pp - 1):
        b = (0, *cuts, n)
        yield [b[i + 1] - b[i] for i in range(pp)]


@pytest.mark.parametrize(
    "n,pp,last,first",
    [(6, 2, 0, 0), (32, 2, 4.0, 0), (32, 4, 6.3, 0.5), (7, 3, 2.5, 0), (61, 4, 3.0, 0), (5, 5, 9.0, 0)],
)
def test_suggestion_is_optimal_and_sums(n, pp, last, first):
    costs = [1.0 + (i % 3) * 0.25 for i in range(n)]  # uneven layers too
    got = suggest_partition(costs, pp, last_extra=last, first_extra=first)
    assert len(got) == pp and sum(got) == n and min(got) >= 1
    best = min(max(stage_costs(costs, p, first_extra=first, last_extra=last)) for p in _all_splits(n, pp))
    assert max(stage_costs(costs, got, first_extra=first, last_extra=last)) == pytest.approx(best)


def test_drafter_moves_layers_off_the_last_stage():
    assert suggest_partition(32, 2) == [16, 16]
    # a drafter of 4 layer-equivalents on the last stage: 18 + 14 (+4) is balanced
    assert suggest_partition(32, 2, last_extra=4.0) == [18, 14]
    # ties go to the split nearest the preferred one
    assert suggest_partition(6, 2, last_extra=1.0, prefer=[3, 3]) in ([3, 3], [4, 2])
    assert suggest_partition(6, 3, prefer=default_partition(6, 3)) == [2, 2, 2]
    with pytest.raises(ValueError):
        suggest_partition(3, 4)


def test_plan_reports_the_suggestion_with_the_drafter_counted():
    common = dict(
        num_layers=32,
        pp=2,
        layer_partition=None,
        method="eagle3",
        runner="v2",
        taps=EngineTaps((2, 16, 29), "default"),
        hidden_size=4096,
        dtype_bytes=2,
        n_draft_layers=1,
        draft_numbering="global",
        drafter_needs_target_embed=True,
    )
    sizes = WeightBytes((100,) * 32, embed=50, lm_head=50)
    p = build_plan(PlanInputs(**common, weights=replace(sizes, drafter=150), num_speculative_tokens=2))
    assert p.suggested_partition == (18, 14) and any("suggested layer_partition [18, 14]" in n for n in p.notes)
    assert p.to_json()["suggested_partition"] == [18, 14]
    no_drafter = build_plan(PlanInputs(**{**common, "method": None}, weights=sizes))
    assert no_drafter.suggested_partition is None
    # lm_head + 1 byte: default stays best
    tiny = build_plan(PlanInputs(**common, weights=replace(sizes, drafter=1), num_speculative_tokens=1))
    assert tiny.suggested_partition == (16, 16) and not any("suggested" in n for n in tiny.notes)
