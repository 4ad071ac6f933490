"""Round 4's guards can fail (issue 42): each mechanism of cases4.py is run with its guard broken
(monkeypatched back to what the code did before, or to nothing) and must then report problems.
test_suite.py runs the same cases with the guards in place, where they hold. The cases were also
run against the code before round 4 (5c492d2), where every class but the demo ones (fixed before,
by the lead) and three of the exports' failed."""

from __future__ import annotations

import pytest

from . import cases4


def _problems(mechanism: str, cls: str | None = None) -> list[str]:
    out = []
    for _m, c, label, fn in cases4.MECHANISMS4[mechanism]():
        if cls is not None and c != cls:
            continue
        p = fn()
        if p:
            out.append(f"{label}: {p}")
    return out


def test_bench_out_guard_can_fail(monkeypatch):
    """Without the ownership check and the lock, a shared or linked --out is claimed twice."""
    from ppspec_cli.io import helddir

    monkeypatch.setattr(helddir, "unsafe", lambda st: None)
    monkeypatch.setattr(helddir.HeldDir, "lock", lambda self, name, holder: None)
    bad = _problems("bench-out")
    assert any("world-writable" in p for p in bad) and any("second bench" in p for p in bad), bad[:5]


def test_bench_record_identity_can_fail(monkeypatch):
    from ppspec_cli.verify.bench import results

    monkeypatch.setattr(results, "identity_problem", lambda *a, **k: None)
    bad = _problems("bench-records")
    assert any("another profile" in p for p in bad) and any("another arm" in p for p in bad), bad[:5]


def test_env_moves_guard_can_fail(monkeypatch):
    """With the list of names alone (round 3), HOME, XDG_* and a path value pass."""
    from ppspec_cli.knowledge import options

    monkeypatch.setattr(options, "ENV_ROOTS", {})
    monkeypatch.setattr(options, "_MOVES_BY_SUFFIX", ())
    monkeypatch.setattr(options, "_value_moves", lambda v: False)
    bad = _problems("env-moves")
    assert any(p.startswith("HOME") for p in bad) and any("/opt/hooks" in p for p in bad), bad[:5]


def test_number_guards_can_fail(monkeypatch):
    from ppspec_cli.planning import predict_inputs

    monkeypatch.setattr(predict_inputs, "_bad_positions", lambda p: None)
    bad = _problems("numbers", "acceptance-report")
    assert any("2 million" in p for p in bad) and any("1e999" in p for p in bad), bad[:5]


def test_scan_cache_guard_can_fail(monkeypatch):
    from ppspec_cli.knowledge import archtable

    monkeypatch.setattr(archtable, "_shape_problem", lambda doc: None if isinstance(doc, dict) else "x")
    bad = _problems("engine-scan", "cache-entry")
    assert any("targets a string" in p for p in bad), bad[:5]


def test_surrogate_guard_can_fail(monkeypatch):
    from ppspec_cli.io import shellout

    monkeypatch.setattr(shellout, "_bytes", lambda v: v.encode("utf-8", "surrogateescape"))
    bad = _problems("exits", "lone-surrogate")
    assert any("ud800" in p for p in bad), bad[:5]


def test_export_guards_can_fail(monkeypatch):
    import re

    from ppspec_cli.running import export

    monkeypatch.setattr(
        export,
        "k8s_name",
        lambda name: re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:50].strip("-") or "ppspec",
    )  # round 3's
    monkeypatch.setattr(export, "CONFIGMAP_MAX_BYTES", 1 << 40)
    bad = _problems("exports-cluster", "k8s-names") + _problems("exports-cluster", "configmap")
    assert any("collide" in p for p in bad) and any("ConfigMap" in p for p in bad), bad[:5]


def test_endpoint_guard_can_fail(monkeypatch):
    from ppspec_cli.verify import client

    monkeypatch.setattr(client, "normalize_endpoint", lambda url: url)
    bad = _problems("ready", "bench-endpoint")
    assert any("user:secret" in p for p in bad), bad[:5]


@pytest.mark.parametrize("mechanism", sorted(cases4.MECHANISMS4))
def test_every_round4_mechanism_generates_cases(mechanism):
    assert sum(1 for _ in cases4.MECHANISMS4[mechanism]()) >= 5
