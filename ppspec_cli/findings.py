"""Findings: what `check` (and `plan`, `serve`'s refusals, pack rules) report. The bottom layer:
every module that judges a profile speaks in these; nothing here imports ppspec."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]

#: Most severe first: the order findings are printed in.
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    field: str
    message: str
    hint: str

    def to_json(self) -> dict:
        return asdict(self)


def finding(code: str, severity: Severity, field: str, message: str, hint: str = "") -> Finding:
    """A finding (also the constructor packs' own rules use: adapters/<pack>/rules.py)."""
    return Finding(code, severity, field, message, hint)


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first; the order within one severity is kept."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]
