"""Load the mirror cases (tests/mirror/cases/*.yaml): vLLM release-test inputs and expected values.

One YAML file per topic; each case names the vLLM versions whose sources give that expected value,
the release test (or, with `derived: source`, the vLLM function) it comes from, and what to check.
Both tests/mirror/test_mirror.py (ppspec's answer) and tests/test_vllm_mirror.py (the installed
vLLM's answer, for its own version) read the cases from here.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

CASES_DIR = Path(__file__).resolve().parent / "cases"

#: The vLLM releases the suite mirrors (their sdists on PyPI are the sources the cases cite).
VERSIONS = ("0.30.0", "0.32.0", "0.33.0")

_CASE_KEYS = {"id", "source", "versions", "check", "input", "expect", "derived", "pending", "inner_decoder"}


@dataclass(frozen=True)
class Case:
    topic: str
    id: str
    source: str  # vLLM path::test (or ::function when derived from the source)
    versions: tuple[str, ...]
    check: str
    input: dict[str, Any]
    expect: Any
    derived: str | None  # "source": read off a vLLM function, no release test asserts it
    pending: str | None  # why ppspec cannot answer yet (strict xfail until it can)
    inner_decoder: str | None = None  # gate cases: vllm/...py::Class whose opt-in flag vLLM checks


@functools.cache
def _parse(path: Path) -> Any:
    # Every test module asks for the cases; parse each file once (with libyaml where present).
    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_cases() -> list[Case]:
    """Every case of every topic file. Raises ValueError on a malformed file (never drops a case)."""
    out: list[Case] = []
    seen: set[tuple[str, str]] = set()
    for path in sorted(CASES_DIR.glob("*.yaml")):
        doc = copy.deepcopy(_parse(path))  # callers get their own copy to change
        topic = doc.get("topic")
        if topic != path.stem:
            raise ValueError(f"{path.name}: topic {topic!r} must equal the file name")
        for raw in doc.get("cases") or []:
            extra = set(raw) - _CASE_KEYS
            missing = {"id", "source", "versions", "input", "expect"} - set(raw)
            if extra or missing:
                raise ValueError(
                    f"{path.name}: case {raw.get('id')!r}: unknown keys {sorted(extra)}, missing {sorted(missing)}"
                )
            versions = tuple(str(v) for v in raw["versions"])
            if not versions or set(versions) - set(VERSIONS):
                raise ValueError(f"{path.name}: case {raw['id']!r}: versions {versions} not within {VERSIONS}")
            if "::" not in raw["source"]:
                raise ValueError(f"{path.name}: case {raw['id']!r}: source must be path::test_or_function")
            if (topic, raw["id"]) in seen:
                raise ValueError(f"{path.name}: duplicate case id {raw['id']!r}")
            seen.add((topic, raw["id"]))
            out.append(
                Case(
                    topic=topic,
                    id=raw["id"],
                    source=raw["source"],
                    versions=versions,
                    check=raw.get("check", topic),
                    input=raw["input"],
                    expect=raw["expect"],
                    derived=raw.get("derived"),
                    pending=raw.get("pending"),
                    inner_decoder=raw.get("inner_decoder"),
                )
            )
    return out


def case_params(topic: str | None = None, version: str | None = None, *, pending_xfail: bool = True) -> list:
    """pytest params (case, version), one per version a case holds for. Pending cases (ppspec
    cannot answer them yet) are strict xfails, unless the caller asks vLLM rather than ppspec."""
    params = []
    for c in load_cases():
        if topic is not None and c.topic != topic:
            continue
        for v in c.versions:
            if version is not None and v != version:
                continue
            marks = [pytest.mark.xfail(strict=True, reason=c.pending)] if c.pending and pending_xfail else []
            params.append(pytest.param(c, v, id=f"{c.topic}/{c.id}@{v}", marks=marks))
    return params


def refusal_matching(expect: str, refusal: str | None) -> str:
    """A refusal case's answer: 'ok' when nothing was refused; the expected text when the (first) refusal contains it;
    else the refusal."""
    if refusal is None:
        return "ok"
    return expect if expect != "ok" and expect in refusal else refusal
