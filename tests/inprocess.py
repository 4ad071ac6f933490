"""Run `ppspec ARGS` in this process, through the real entry point (`ppspec_cli.cli.main`): the same
error handling as a user's shell gets (exit codes, one-paragraph errors, `--json` errors, exit 3
"unexpected" for anything else) without the second or so a fresh interpreter costs on a 2-core box.

What a process boundary adds is not covered here, and a test that needs it keeps its subprocess:
signals, the real entry point's exit status, a hang that needs a kill, and environment variables
that libraries read once at import. huggingface_hub reads its variables at import into
`huggingface_hub.constants`; it looks up HF_HUB_OFFLINE and HF_HUB_CACHE there at every call, so
`run` sets those two for the call as `env` says. The others (HF_ENDPOINT and the URL templates made
from it, HF_HOME, HF_TOKEN, ...) it cannot fake: `run` refuses them (use conftest.run_ppspec).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

#: Read by huggingface_hub at import only: a test that changes them needs a fresh interpreter.
IMPORT_TIME_ENV = (
    "HF_ENDPOINT",
    "HF_HOME",
    "HF_HUB_DISABLE_TELEMETRY",
    "HF_HUB_DISABLE_XET",
    "HF_HUB_ETAG_TIMEOUT",
    "HF_TOKEN",
    "HUGGINGFACE_HUB_CACHE",
)
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class _Text(io.TextIOWrapper):
    """A captured stream as a pipe looks to ppspec: not a tty, UTF-8, undecodable bytes escaped."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="surrogateescape", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", errors="surrogateescape")  # type: ignore[attr-defined]


def _default_hub_cache() -> str:
    return os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub"
    )


def run(*args: str, env: dict[str, str | None] | None = None, cwd: Path | str | None = None) -> Result:
    """`ppspec ARGS` in process, with `env` changes (None removes a variable) and `cwd` for the call.
    Like conftest.run_ppspec: HF_HUB_OFFLINE=1 unless `env` says otherwise, PPSPEC_DEBUG unset,
    COLUMNS=200 (rich must not wrap messages mid-word in assertions)."""
    import huggingface_hub.constants as hf_constants

    from ppspec_cli import cli
    from ppspec_cli.io import redact

    changes: dict[str, str | None] = {
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
        "PPSPEC_DEBUG": None,
        "COLUMNS": "200",
    }
    changes.update(env or {})
    for k in IMPORT_TIME_ENV:
        if k in changes and changes[k] != os.environ.get(k):
            raise RuntimeError(
                f"{k} is read by huggingface_hub at import: run this case in a subprocess (conftest.run_ppspec)"
            )
    saved_env = {k: os.environ.get(k) for k in changes}
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_signals = {s: signal.getsignal(s) for s in _SIGNALS}
    saved_hf = (hf_constants.HF_HUB_OFFLINE, hf_constants.HF_HUB_CACHE)
    saved_secrets, saved_pattern = set(redact._secrets), redact._pattern
    saved_state = dict(cli._state)
    out, err = _Text(), _Text()
    code: int = 0
    try:
        for k, v in changes.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hf_constants.HF_HUB_OFFLINE = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
        if "HF_HUB_CACHE" in changes:
            hf_constants.HF_HUB_CACHE = os.path.expanduser(
                os.path.expandvars(changes["HF_HUB_CACHE"] or _default_hub_cache())
            )
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = ["ppspec", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        for s, h in saved_signals.items():
            signal.signal(s, h)
        hf_constants.HF_HUB_OFFLINE, hf_constants.HF_HUB_CACHE = saved_hf
        redact._secrets.clear()
        redact._secrets.update(saved_secrets)
        redact._pattern = saved_pattern
        cli._state.clear()
        cli._state.update(saved_state)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Result(code, out.text(), err.text())
