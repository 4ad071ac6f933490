"""The attacker suite (tests/fixtures/bad/ppspec_attacks.py) in CI: named cases plus a few generated
ones per class; every class must count 0 problems. benchmarks/robustness.py runs it at scale."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "bad"))
import ppspec_attacks as PA  # noqa: E402

pytestmark = pytest.mark.slow  # runs the CLI in subprocesses


def test_attacker_suite_finds_nothing():
    t = PA.run_all(25, seed=12)
    assert all(t.cases[c] > 0 for c in PA.CLASSES), t.cases
    assert sum(t.problems.values()) == 0, "\n".join(t.notes)
