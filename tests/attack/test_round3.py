"""Round 3's guards can fail (issue 32): each mechanism of cases3.py is run with its guard broken
(monkeypatched back to what the code did before, or to nothing) and must then report problems.
test_suite.py runs the same cases with the guards in place, where they must all hold."""

from __future__ import annotations

import sys

import pytest

from . import cases3


def _problems(mechanism: str) -> list[str]:
    out = []
    for _m, _cls, label, fn in cases3.MECHANISMS3[mechanism]():
        p = fn()
        if p:
            out.append(f"{label}: {p}")
    return out


def test_environment_guard_can_fail(monkeypatch):
    """Without the typed settings, `nan` and `-1` are read as numbers (the old float())."""
    from ppspec_cli.io import settings

    class Loose:
        def __getattr__(self, field):
            import os

            raw = os.environ.get("PPSPEC_" + field.upper())
            try:
                return float(raw) if raw else None
            except ValueError:
                return None

    monkeypatch.setattr(settings, "settings", lambda: Loose())
    bad = _problems("environment")
    assert any("accepted nan" in p for p in bad) and any("accepted -1.0" in p for p in bad), bad[:5]


def test_cache_guard_can_fail(monkeypatch):
    from ppspec_cli.io import cache

    monkeypatch.setattr(cache, "check_owned", lambda p, directory, shown=None: None)
    bad = _problems("caches")
    assert len(bad) >= 12, bad[:5]


def test_child_isolation_can_fail(monkeypatch):
    from ppspec_cli.io import spawn

    monkeypatch.setattr(spawn, "python_argv", lambda *a: [sys.executable, *a])
    monkeypatch.setattr(spawn, "_checked", lambda argv: list(argv))
    bad = _problems("child-processes")
    assert any("json" in p and "ran the planted module" in p for p in bad), bad[:5]


def test_export_guards_can_fail(monkeypatch):
    import re

    from ppspec_cli.running import export

    monkeypatch.setattr(
        export,
        "k8s_name",
        lambda name: re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-") or "ppspec",
    )  # the DNS-1123 label of round 2
    orig = export._header
    monkeypatch.setattr(
        export, "_header", lambda r, path, errors, warnings=None: orig(r, path, errors)
    )  # warnings dropped
    bad = _problems("exports")
    assert any("8b-llama" in p for p in bad) and any("not in the header" in p for p in bad), bad[:5]


def test_bench_guards_can_fail(monkeypatch):
    from ppspec_cli.io import markdown, records
    from ppspec_cli.verify.bench import schema

    class Anything(records.Record):
        pass

    monkeypatch.setattr(schema, "model_for", lambda name: Anything)
    monkeypatch.setattr(markdown, "text", lambda v, limit=2000: str(v))
    bad = _problems("bench")
    assert any("accepted" in p for p in bad) and any("raw HTML" in p for p in bad) and any("link" in p for p in bad), (
        bad[:5]
    )


def test_yaml_budget_can_fail(monkeypatch):
    import yaml

    from ppspec_cli.io import yamlload

    monkeypatch.setattr(yamlload, "load", lambda text, **kw: yaml.safe_load(text))
    bad = _problems("yaml")
    assert any("2024-01-01" in p and "accepted" in p for p in bad) and any("5000x8000" in p for p in bad), bad[:8]


@pytest.mark.parametrize("mechanism", sorted(cases3.MECHANISMS3))
def test_every_round3_mechanism_generates_cases(mechanism):
    assert sum(1 for _ in cases3.MECHANISMS3[mechanism]()) >= 5
