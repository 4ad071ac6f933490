"""serve.confirm: which plugin status records make a run confirmed (fast; the engine test is
tests/test_plugin_confirm_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppspec_cli.serve.confirm import plugin_record, unconfirmed

API = {"role": "api", "pid": 10, "ok": True}
CORE = {"role": "engine_core", "pid": 11, "ok": True, "workers_confirmed": True, "workers": [{"rank": 0, "pp_rank": 0, "ok": True}],
        "patches": [{"patch": "ppspec.tap_watch"}, {"patch": "ppspec.worker_confirm"}], "pack": "llama"}
WORKER = {"role": "worker", "pid": 12, "rank": 0, "pp_rank": 0, "ok": True, "pack": "llama", "patches": [{"patch": "llama.relay"}]}


def _dir(tmp_path: Path, *recs: dict) -> Path:
    d = tmp_path / "plugin-status"
    d.mkdir()
    for r in recs:
        (d / f"{r['pid']}.json").write_text(json.dumps(r))
    return d


def test_api_core_and_confirmed_workers_are_confirmed(tmp_path):
    assert unconfirmed(_dir(tmp_path, API, CORE, WORKER)) is None


@pytest.mark.parametrize(
    ("recs", "needle"),
    [
        ((), "no ok plugin status from the API server"),
        ((CORE,), "API server"),
        ((API,), "no ok plugin status from the engine core"),
        ((API, dict(CORE, workers_confirmed=False)), "did not confirm its workers"),
        ((API, CORE, dict(WORKER, ok=False, error="vLLM 9.9 is outside the range")), "worker process (pid 12): vLLM 9.9"),
    ],
)
def test_what_is_missing_is_named(tmp_path, recs, needle):
    why = unconfirmed(_dir(tmp_path, *recs))
    assert why is not None and needle in why, why


def test_an_unreadable_record_is_not_ok(tmp_path):
    d = _dir(tmp_path, API, CORE)
    (d / "13.json").write_text("{half")
    assert "unreadable" in (unconfirmed(d) or "")


def test_the_record_says_which_pack_ran_where(tmp_path):
    rec = {r["pid"]: r for r in plugin_record(_dir(tmp_path, API, CORE, WORKER))}
    assert rec[12]["pack"] == "llama" and rec[12]["patches"] == ["llama.relay"] and rec[12]["pp_rank"] == 0
    assert rec[11]["workers"] == CORE["workers"] and rec[11]["patches"] == ["ppspec.tap_watch", "ppspec.worker_confirm"]
