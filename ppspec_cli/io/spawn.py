"""The one way ppspec starts a child process.

- Always an argv list, never a shell.
- A child Python (this interpreter, `python -c ...` or `python -m ...`) is always started with
  `-P` (Python 3.11+: the current directory and the script's directory are NOT put first on the
  import path) and without PYTHONSTARTUP/PYTHONHOME/PYTHONINSPECT (io/env.NOT_INHERITED), so a
  `json.py` planted in the working directory (a shared directory, another user's) never runs.
  PYTHONPATH, the user's own explicit choice, is kept: a source checkout still imports itself.
  `python_argv()` builds that argv; `run`/`popen` refuse a Python argv without the flag (a
  programming error, caught by the tests, never a user-facing condition).
- The in-engine plugin's trigger (PPSPEC_PLAN_FILE) is never inherited unless the caller passes
  it explicitly in `env` (the engine launch does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ppspec_cli.io import env as _env

DEVNULL = subprocess.DEVNULL
PIPE = subprocess.PIPE
STDOUT = subprocess.STDOUT
TimeoutExpired = subprocess.TimeoutExpired
CompletedProcess = subprocess.CompletedProcess
Popen = subprocess.Popen
#: The flag that keeps a child Python from importing what lies in its working directory.
ISOLATE = "-P"


def python_argv(*args: str) -> list[str]:
    """`[this python, -P, *args]`: a child interpreter of this install that never imports from the
    working directory."""
    return [sys.executable, ISOLATE, *args]


def _is_python(exe: str) -> bool:
    base = os.path.basename(exe)
    return exe == sys.executable or base.startswith("python")


def _checked(argv: Sequence[str]) -> list[str]:
    argv = [os.fspath(a) for a in argv]
    if not argv:
        raise ValueError("spawn: empty argv")
    if _is_python(argv[0]) and (len(argv) < 2 or argv[1] not in ("-I", ISOLATE)):
        raise ValueError(f"spawn: a child Python must be isolated (-P or -I first): {argv[:3]}")
    return argv


def child_env(extra: Mapping[str, str] | None = None, *, inherit: bool = True) -> dict[str, str]:
    """The child's environment: this process's (less io/env.NOT_INHERITED) plus `extra`; with
    inherit=False only `extra`."""
    return _env.child_env(extra) if inherit else dict(extra or {})


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess:
    """subprocess.run on an argv list (no shell); env=None: child_env()."""
    kw.pop("shell", None)
    # argv list, no shell
    return subprocess.run(_checked(argv), env=dict(env) if env is not None else child_env(), **kw)  # noqa: S603


def popen(argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kw: Any) -> subprocess.Popen:
    """subprocess.Popen on an argv list (no shell); env=None: child_env()."""
    kw.pop("shell", None)
    # argv list, no shell
    return subprocess.Popen(_checked(argv), env=dict(env) if env is not None else child_env(), **kw)  # noqa: S603


def event_stream(fd: int = 1) -> Any:
    """A text stream on a duplicate of descriptor `fd` (a child's private channel to its parent,
    which keeps working after the descriptor itself is redirected)."""
    return os.fdopen(os.dup(fd), "w", encoding="utf-8")
