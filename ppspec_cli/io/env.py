"""The one place ppspec reads (or sets) the process environment.

`PPSPEC_*` variables are read as one typed, bounded object (io/settings.py); everything else
(an API key named by the profile, vLLM's own variables, the network interface variables a
multi-node launch copies) goes through these few functions, so tests/test_chokepoints.py can hold
that no other module touches `os.environ`. Standard library only: the in-engine plugin reads its
plan file's path through `get`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

#: What a child process of ppspec never inherits: the in-engine plugin's trigger (a child that
#: imports vLLM would otherwise activate ppspec's plugin) and Python's start-up hooks (code a child
#: interpreter would run before its own). PYTHONPATH, the user's explicit choice, is kept.
NOT_INHERITED = ("PPSPEC_PLAN_FILE", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT")


def get(name: str, default: str | None = None) -> str | None:
    """One variable's value (None or `default` when unset)."""
    return os.environ.get(name, default)


def has(name: str) -> bool:
    return name in os.environ


def snapshot() -> dict[str, str]:
    """A copy of the whole environment (for rules that judge it, and for a child's environment)."""
    return dict(os.environ)


def child_env(extra: Mapping[str, str] | None = None, *, drop: tuple[str, ...] = NOT_INHERITED) -> dict[str, str]:
    """The environment of a child process ppspec starts: this one's, less `drop`, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra or {})
    return env


def set_var(name: str, value: str | None) -> None:
    """Set (None: unset) one variable of this process (a library that reads its setting there)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@contextmanager
def env_set(name: str, value: str | None) -> Iterator[None]:
    """Set (or, with None, unset) one environment variable for the block, then put it back."""
    old = os.environ.get(name)
    try:
        set_var(name, value)
        yield
    finally:
        set_var(name, old)
