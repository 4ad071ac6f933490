"""`ppspec bench`'s judgement: repeated samples per (arm, concurrency) -> a verdict per level that
says "faster", "slower" or "no significant difference", the schedule the grid proposes, the
recommendation (the best *measured* configuration), and the envelope per level.

The test (docs/bench.md, "How a difference is judged"): arm A is faster than arm B at a level when
every repeat of A beat every repeat of B (their min-max ranges of output tokens/s do not overlap)
AND A's median is more than NOISE_FLOOR above B's; slower the other way round; otherwise no
significant difference. One repeat per arm has no spread: never significant.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable

from ppspec_cli.planning import schedule as sched

#: Medians closer than this (relative) are never called different, however tight the repeats:
#: below it a shared machine's drift (clock boost, a neighbour's job) moves the figures.
NOISE_FLOOR = 0.03
FASTER, SLOWER, SAME = "faster", "slower", "no significant difference"
BASELINE = "baseline"
TUNED = "tuned"

Grid = dict[tuple[str, int], list[float]]  # (arm, concurrency) -> output tokens/s, one per repeat


def spread(samples: Iterable[float]) -> dict | None:
    xs = [float(x) for x in samples]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def compare(a: list[float] | None, b: list[float] | None) -> str | None:
    """A's output tokens/s against B's: FASTER, SLOWER, SAME; None if either is unmeasured."""
    if not a or not b:
        return None
    ratio = statistics.median(a) / statistics.median(b)
    if len(a) < 2 or len(b) < 2:
        return SAME
    if min(a) > max(b) and ratio > 1 + NOISE_FLOOR:
        return FASTER
    if max(a) < min(b) and ratio < 1 - NOISE_FLOOR:
        return SLOWER
    return SAME


def ratio(a: list[float] | None, b: list[float] | None) -> dict | None:
    """A over B: the ratio of the medians, and its spread (worst and best pairing of repeats)."""
    if not a or not b or min(b) <= 0:
        return None
    return {"median": statistics.median(a) / statistics.median(b), "min": min(a) / max(b), "max": max(a) / min(b)}


def _med(grid: Grid, arm: str, c: int) -> float:
    xs = grid.get((arm, c))
    return statistics.median(xs) if xs else -math.inf


def complete(grid: Grid, arm: str, levels: list[int]) -> bool:
    return all(grid.get((arm, c)) for c in levels)


def gmean_speedup(grid: Grid, arm: str, levels: list[int]) -> float:
    """The geometric mean over the levels of the arm's median over the baseline's (tie-breaker)."""
    rs = [r["median"] for c in levels if (r := ratio(grid.get((arm, c)), grid.get((BASELINE, c))))]
    return math.exp(sum(math.log(x) for x in rs) / len(rs)) if rs else 0.0


def dominates(grid: Grid, x: str, y: str, levels: list[int]) -> bool:
    """X is significantly faster than Y at one level at least and significantly slower at none."""
    vs = [compare(grid.get((x, c)), grid.get((y, c))) for c in levels]
    return FASTER in vs and SLOWER not in vs


def per_level(grid: Grid, static: list[tuple[str, int]], levels: list[int]) -> list[dict]:
    """Per level: the best static speculative arm (by median) against the baseline: the verdict
    and the speed-up with its spread; and the k the schedule takes there: that arm's k, 0 only
    where the baseline is significantly faster than it (a median that wins within the noise does
    not switch speculation off: the schedule would flip with the noise)."""
    out = []
    for c in levels:
        spec = [(a, k) for a, k in static if k and grid.get((a, c))]
        best = max(spec, key=lambda ak: _med(grid, ak[0], c), default=None)
        base = grid.get((BASELINE, c))
        v = compare(grid.get((best[0], c)), base) if best else None
        k = (0 if v == SLOWER else best[1]) if best else (0 if base else None)
        out.append(
            {
                "concurrency": c,
                "verdict": v,
                "best_speculative_arm": best[0] if best else None,
                "best_num_speculative_tokens": best[1] if best else None,
                "speedup": ratio(grid.get((best[0], c)), base) if best else None,
                "schedule_k": k,
                "arms": {a: spread(grid[(a, c)]) for a, _k in static if grid.get((a, c))},
            }
        )
    return out


def proposed_schedule(levels_doc: list[dict]) -> list[list[int]] | None:
    """The schedule from the best static arm per level (planning/schedule.py's boundaries)."""
    pts = [(lv["concurrency"], lv["schedule_k"]) for lv in levels_doc if lv["schedule_k"] is not None]
    return sched.derive(pts) if pts else None


def choose(
    grid: Grid, static: list[tuple[str, int]], levels: list[int], incumbent: str | None, tuned: str | None
) -> dict:
    """The recommended measured configuration. Start from the profile's own setting (the incumbent,
    when measured); move to a static arm only when it dominates the current choice (significantly
    faster somewhere, significantly slower nowhere), the best geometric-mean speed-up first. The
    schedule (the tuned arm) is recommended only when it dominates every static arm."""
    names = [a for a, _k in static if complete(grid, a, levels)]
    if not names:
        return {"static": None, "schedule": False, "moved": False}
    choice = incumbent if incumbent in names else max(names, key=lambda a: gmean_speedup(grid, a, levels))
    seen = {choice}
    while True:
        better = [a for a in names if a not in seen and dominates(grid, a, choice, levels)]
        if not better:
            break
        choice = max(better, key=lambda a: gmean_speedup(grid, a, levels))
        seen.add(choice)
    use_schedule = bool(
        tuned and complete(grid, tuned, levels) and all(dominates(grid, tuned, a, levels) for a in names)
    )
    return {"static": choice, "schedule": use_schedule, "moved": choice != incumbent}


def envelope(grid: Grid, levels: list[int], recommended: str, incumbent: str | None, arms: list[str]) -> list[dict]:
    """Per level: the recommended configuration against the best measured arm there and against
    the profile's own setting (ratio of medians with its spread, and the verdict)."""
    out = []
    for c in levels:
        measured = [a for a in arms if grid.get((a, c))]
        best = max(measured, key=lambda a: _med(grid, a, c), default=None)
        rec = grid.get((recommended, c))
        row = {
            "concurrency": c,
            "recommended": recommended,
            "best_arm": best,
            "vs_best": {
                "arm": best,
                "ratio": ratio(rec, grid.get((best, c))),
                "verdict": compare(rec, grid.get((best, c))),
            }
            if best
            else None,
            "vs_profile": None,
        }
        if incumbent is not None and grid.get((incumbent, c)):
            row["vs_profile"] = {
                "arm": incumbent,
                "ratio": ratio(rec, grid.get((incumbent, c))),
                "verdict": compare(rec, grid.get((incumbent, c))),
            }
        out.append(row)
    return out


def drift_check(
    grid: Grid, levels: list[int], tuned_schedule: list[list[int]] | None, static: list[tuple[str, int]]
) -> list[str]:
    """A schedule of one range serves the same k as a static arm (through vLLM's dynamic path):
    a significant difference between the two, at a level, is drift between engine sessions (the
    repeats of one arm run in one session, so their spread does not hold it) or the dynamic path's
    own cost. Either way the verdicts of this run rest on more than the configurations, and bench
    recommends nothing from it (results.recommendation's `withheld`)."""
    if not tuned_schedule or len(tuned_schedule) != 1:
        return []
    k = tuned_schedule[0][2]
    twin = next((a for a, kk in static if kk == k), None)
    if twin is None:
        return []
    out = []
    for c in levels:
        v = compare(grid.get((TUNED, c)), grid.get((twin, c)))
        if v in (FASTER, SLOWER):
            r = ratio(grid.get((TUNED, c)), grid.get((twin, c)))
            out.append(
                f"c={c}: the tuned arm, serving {tuned_schedule}, serves the same k as {twin} yet measured {v}, "
                f"{r['median']:.2f}x: the machine drifted between engine sessions, or vLLM's dynamic path costs that "
                "much; this run recommends nothing: repeat it on a quieter machine"
            )
    return out
