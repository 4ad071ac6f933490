"""Findings: what `check` (and `plan`, `serve`'s refusals, pack rules) report. The bottom layer:
every module that judges a profile speaks in these; nothing here imports ppspec."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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


@contextmanager
def guard(
    out: list[Finding],
    source: str,
    *,
    code: str = "rule-crashed",
    field: str = "profile",
    fix: str = "report this (the message names the rule and the error)",
) -> Iterator[None]:
    """The one guard every rule source runs in (core rules, pack rules, drafter contracts, probes,
    engine-option and P/D rules): `with guard(out, "rule 'x'"): out.extend(list(rule(r)))`. A rule
    that raises adds a warning finding to `out` that names it (`source`), never a traceback; what it
    checks was not checked. Signals (BaseException) pass. Only the findings travel here, not the
    facts the rule reads."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - the guard: any crash of a rule is a finding
        out.append(
            Finding(
                code,
                "warning",
                field,
                f"{source} crashed ({type(e).__name__}: {str(e)[:300]}); what it checks was not checked",
                fix,
            )
        )
