"""Counts per mechanism and class, printed after the session."""

from __future__ import annotations

from .counts import COUNTS


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not COUNTS:
        return
    tr = terminalreporter
    tr.section("attacker suite (issue 23): cases / problems per mechanism and class")
    by_mech: dict[str, list] = {}
    for (mech, cls), (n, bad) in sorted(COUNTS.items()):
        by_mech.setdefault(mech, []).append((cls, n, bad))
    for mech, rows in by_mech.items():
        total, bad = sum(r[1] for r in rows), sum(r[2] for r in rows)
        tr.write_line(f"{mech}: {total} cases, {bad} problems  (" + ", ".join(f"{c} {n}/{b}" for c, n, b in rows) + ")")
