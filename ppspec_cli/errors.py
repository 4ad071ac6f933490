"""One error type for everything a user can get wrong.

Every user-facing failure says what went wrong, where, and how to fix it; the CLI renders it
as one paragraph and exits non-zero (no traceback unless --debug).
"""

from __future__ import annotations


class PpspecError(Exception):
    """A failure the user can act on.

    exit_code: 1 for a failed check/launch, 2 for bad usage or unreadable input.
    """

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None, exit_code: int = 2):
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
