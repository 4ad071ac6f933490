"""One error type for everything a user can get wrong.

Every user-facing failure says what went wrong, where, and how to fix it; the CLI renders it
as one paragraph and exits non-zero (no traceback unless --debug).
"""

from __future__ import annotations

#: The exit codes every command documents (docs/commands.md), named once.
EXIT_OK = 0  # the profile passes; the run finished
EXIT_REFUSED = 1  # refused (an error of the verdict), or a launch or run that failed
EXIT_USAGE = 2  # bad usage, or input that cannot be read
EXIT_INTERNAL = 3  # ppspec itself failed (a bug): the message says how to report it
EXIT_UNCONFIRMED = 4  # serve: the engine started, but the plugin did not confirm it in every process
EXIT_SIGNAL = 128  # + N: stopped by signal N (130: Ctrl-C, 143: SIGTERM)
EXIT_INTERRUPTED = EXIT_SIGNAL + 2  # Ctrl-C (SIGINT)


def exit_for_signal(signum: int) -> int:
    """The exit code of a run stopped by signal `signum` (the shell's 128+N)."""
    return EXIT_SIGNAL + signum


class PpspecError(Exception):
    """A failure the user can act on. `exit_code`: EXIT_REFUSED for a failed check or launch,
    EXIT_USAGE (the default) for bad usage or unreadable input."""

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None, exit_code: int = EXIT_USAGE):
        super().__init__(what)
        self.what = what
        self.where = where
        self.fix = fix
        self.exit_code = exit_code

    def render(self) -> str:
        """The message as printed: each part bounded (MAX_PART characters; a message may quote a
        server's answer). Control characters are made inert where it is printed (io.terminal)."""
        parts = [f"error: {_bound(self.what)}"]
        if self.where:
            parts.append(f"  where: {_bound(self.where)}")
        if self.fix:
            parts.append(f"  fix: {_bound(self.fix)}")
        return "\n".join(parts)

    def to_json(self) -> dict:
        return {
            "error": _bound(self.what),
            "where": _bound(self.where),
            "fix": _bound(self.fix),
            "exit_code": self.exit_code,
        }


#: The most characters of one part (what / where / fix) of a rendered error.
MAX_PART = 4000


def _bound(s: object) -> object:
    if isinstance(s, str) and len(s) > MAX_PART:
        return s[:MAX_PART] + f"... ({len(s) - MAX_PART} more characters not shown)"
    return s
