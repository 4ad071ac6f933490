"""Findings: what `check` (and `plan`, `serve`'s refusals, pack rules) report. The bottom layer:
every module that judges a profile speaks in these.

A finding is made by its code object, never from a string: `TAPS_DEFAULT.at(field, message)`. The
code carries the severity (the first it lists, unless the rule picks another it lists), the question
it answers, whether `serve` refuses on it here, its cause and its fix; its documentation is
generated from it (docs/findings.md). ruff's `Violation` is the model: the check names the code and
the place, the code says the rest.

Codes are registered by their owners when they load: the core codes (`findings/codes.py`), each
speculative method's (knowledge/methods), each adapter pack's (its rules module's `CODES`), the
behaviour probes'. A second, different code of one name is refused (`DuplicateCode`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "info"]
Question = Literal["profile", "here"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

#: Most severe first: the order findings are printed in.
SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Code:
    """One finding code: the name scripts match on, the severities it is raised with (the first is
    its own; a few are an error in one case and a warning in another, and the message says which),
    cause and fix (the reference's text and the finding's default fix), the question it answers
    (`profile`: does the profile launch on what it declares; `here`: on this machine, now),
    `refuses_here` (serve refuses on it even as a warning), the reference section, and the probe
    whose pass settles it (`check --probes` then drops the finding)."""

    code: str
    severities: tuple[Severity, ...]
    cause: str
    fix: str
    question: Question = "profile"
    refuses_here: bool = False
    section: str = ""
    settled_by: str | None = None

    def at(self, field: str, message: str, *, severity: Severity | None = None, fix: str | None = None) -> Finding:
        """A finding of this code about `field`. `severity`: one of those the code lists (default:
        its first). `fix`: what to do in this case, where the message's specifics change it
        (default: the code's fix; an info needs nothing from the reader, so none)."""
        sev = self.severities[0] if severity is None else severity
        if sev not in self.severities:
            raise ValueError(f"finding code {self.code!r} is not raised as {sev!r} (it lists {self.severities})")
        hint = fix if fix is not None else ("" if sev == "info" else self.fix)
        return Finding(self, sev, field, message, hint)


@dataclass(frozen=True)
class Finding:
    """What a rule found: made only by `Code.at`. `kind` is the code object (its question and
    whether serve refuses it here); `code` its name."""

    kind: Code = field(repr=False)
    severity: Severity
    field: str
    message: str
    hint: str

    @property
    def code(self) -> str:
        return self.kind.code

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "field": self.field,
            "message": self.message,
            "hint": self.hint,
        }


class DuplicateCode(ValueError):
    """A code registered twice with different content, or by two owners."""


#: name -> (code, owner): every code registered so far (the owners register theirs when they load).
_REGISTRY: dict[str, tuple[Code, str]] = {}


def register(owner: str, *codes: Code) -> tuple[Code, ...]:
    """Register `codes` as `owner`'s ("core", "method dflash", "pack kimi_k3", "probes"). The same
    code again from the same owner is a no-op (a module loaded twice); another code of that name,
    or the same name from another owner, raises DuplicateCode."""
    for c in codes:
        got = _REGISTRY.get(c.code)
        if got is not None and (got[0] != c or got[1] != owner):
            raise DuplicateCode(
                f"finding code {c.code!r} is registered by {got[1]}"
                + (" with other content" if got[1] == owner else f"; {owner} registers it again")
            )
        if not c.severities or not set(c.severities) <= set(SEVERITIES):
            raise ValueError(f"finding code {c.code!r}: severities {c.severities!r}")
        _REGISTRY[c.code] = (c, owner)
    return codes


def registered() -> dict[str, Code]:
    """Every code registered so far, in registration order."""
    return {name: c for name, (c, _owner) in _REGISTRY.items()}


def owner_of(code: str) -> str | None:
    got = _REGISTRY.get(code)
    return None if got is None else got[1]


def get(code: str) -> Code | None:
    """The registered code of this name (the docs and the tests look codes up; rules never do)."""
    got = _REGISTRY.get(code)
    return None if got is None else got[0]


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Most severe first; the order within one severity is kept."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


#: The finding of a rule that crashed (the guard's). Registered with the core codes.
RULE_CRASHED = Code(
    "rule-crashed",
    ("warning",),
    "A rule (core, pack, drafter contract, probe or P/D) crashed: what it checks was not checked. The preflight's one "
    "guard turns the crash into this finding.",
    "Report the message (it names the rule and the error); `--debug` does not change it.",
    section="Platform, vLLM and adapter packs",
)


@contextmanager
def guard(
    out: list[Finding],
    source: str,
    *,
    code: Code = RULE_CRASHED,
    field: str = "profile",
    fix: str = "report this (the message names the rule and the error)",
) -> Iterator[None]:
    """The one guard every rule source runs in (core rules, pack rules, drafter contracts, probes,
    engine-option and P/D rules): `with guard(out, "rule 'x'"): out.extend(list(rule(r)))`. A rule
    that raises adds a warning finding of `code` to `out` that names it (`source`), never a
    traceback; what it checks was not checked. Signals (BaseException) pass. Only the findings
    travel here, not the facts the rule reads."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - the guard: any crash of a rule is a finding
        out.append(
            code.at(
                field,
                f"{source} crashed ({type(e).__name__}: {str(e)[:300]}); what it checks was not checked",
                severity="warning",
                fix=fix,
            )
        )
