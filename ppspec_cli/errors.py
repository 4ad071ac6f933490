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
        parts = [f"error: {self.what}"]
        if self.where:
            parts.append(f"  where: {self.where}")
        if self.fix:
            parts.append(f"  fix: {self.fix}")
        return "\n".join(parts)

    def to_json(self) -> dict:
        return {"error": self.what, "where": self.where, "fix": self.fix, "exit_code": self.exit_code}
