"""One verdict over findings, for the question asked (each finding's code says which it answers):

- `profile` (check, plan, export, bench, `serve --dry-run`'s exit code): refused by an error about
  the profile itself, judged for the platform and vLLM it declares;
- `here` (serve; `serve --dry-run`'s `ok`; check's "on this machine" section): refused by every
  error, and by the warnings `serve` refuses on when it starts here (`refuses_here`: an API key not
  exported, a multi-node launch by hand without a head address).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from ppspec_cli.findings import Finding, Question

__all__ = ["EXIT_OK", "EXIT_REFUSED", "EXIT_USAGE", "Verdict", "refuses", "verdict"]


def refuses(f: Finding, question: Question) -> bool:
    """Whether `f` refuses the answer to `question`."""
    if question == "profile":
        return f.severity == "error" and f.kind.question == "profile"
    return f.severity == "error" or f.kind.refuses_here


@dataclass(frozen=True)
class Verdict:
    question: Question
    refused: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.refused

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_REFUSED

    @property
    def refused_by(self) -> list[str]:
        """The codes that refuse, sorted, once each (`--json`'s `refused_by`)."""
        return sorted({f.code for f in self.refused})

    def to_json(self) -> dict:
        return {"ok": self.ok, "refused_by": self.refused_by}


def verdict(findings: Iterable[Finding], question: Question) -> Verdict:
    return Verdict(question, tuple(f for f in findings if refuses(f, question)))
