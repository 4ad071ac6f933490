"""The attacker suite of issue 23: every generated case of every mechanism and class (cases.py) must
hold. One test per (mechanism, class); the counts per mechanism and class are printed at the end of
the session (conftest.py) and by `python -m tests.attack.run`."""

from __future__ import annotations

import pytest

from . import cases
from .counts import COUNTS

#: Mechanisms whose cases start loopback servers and wait on deadlines (seconds each): slow.
SLOW = {"network"}
#: Classes whose cases start ppspec processes or run commands at a schema's maxima (a minute or more
#: on two cores): slow.
SLOW_CLASSES = {
    ("exits", "closed-stdout"),
    ("exits", "demo-build"),
    ("costs", "nodes"),
    ("costs", "nodes-at-max"),
    ("costs", "pp"),
    ("costs", "levels"),
    ("costs", "levels-at-max"),
    ("costs", "pp-at-max"),
    ("costs", "demo-no-weights"),
}


def _classes() -> list:
    out = []
    for mech, gen in cases.MECHANISMS.items():
        seen: dict[str, int] = {}
        for _m, cls, _label, _fn in gen():
            seen[cls] = seen.get(cls, 0) + 1
        for cls in seen:
            marks = [pytest.mark.slow] if mech in SLOW or (mech, cls) in SLOW_CLASSES else []
            out.append(pytest.param(mech, cls, id=f"{mech}/{cls}", marks=marks))
    return out


@pytest.mark.parametrize("mechanism,cls", _classes())
def test_class_holds(mechanism, cls):
    problems, n = [], 0
    for _m, c, label, fn in cases.MECHANISMS[mechanism]():
        if c != cls:
            continue
        n += 1
        problem = fn()
        if problem:
            problems.append(f"{label}: {problem}")
    COUNTS[(mechanism, cls)] = (n, len(problems))
    assert n > 0
    assert problems == [], f"{len(problems)} of {n} {mechanism}/{cls} cases failed:\n" + "\n".join(problems[:20])


def test_every_mechanism_generates_cases():
    """A mechanism whose generator yields nothing would pass vacuously."""
    for mech, gen in cases.MECHANISMS.items():
        assert sum(1 for _ in gen()) >= 5, mech
