"""serve.confirm: which plugin status records make a run confirmed (fast; the engine test is
tests/test_plugin_confirm_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ppspec_cli.running.serve.confirm import plugin_record, unconfirmed

API = {"role": "api", "pid": 10, "ok": True}
CORE = {
    "role": "engine_core",
    "pid": 11,
    "ok": True,
    "workers_confirmed": True,
    "workers": [{"rank": 0, "pp_rank": 0, "ok": True}],
    "patches": [{"patch": "ppspec.tap_watch"}, {"patch": "ppspec.worker_confirm"}],
    "pack": "llama",
}
WORKER = {
    "role": "worker",
    "pid": 12,
    "rank": 0,
    "pp_rank": 0,
    "ok": True,
    "pack": "llama",
    "patches": [{"patch": "llama.relay"}],
}


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
        (
            (API, CORE, dict(WORKER, ok=False, error="vLLM 9.9 is outside the range")),
            "worker process (pid 12): vLLM 9.9",
        ),
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


class _Wrapper:
    """What vLLM passes to a collective_rpc function in a worker: the WorkerWrapperBase."""

    def __init__(self, rank: int, tp: int, pp: int):
        from types import SimpleNamespace

        self.global_rank = rank
        self.vllm_config = SimpleNamespace(
            parallel_config=SimpleNamespace(
                tensor_parallel_size=tp, pipeline_parallel_size=pp, prefill_context_parallel_size=1
            )
        )


class _Executor:
    def __init__(self, wrappers, fail: str | None = None):
        self.wrappers, self.fail = wrappers, fail

    def collective_rpc(self, fn, timeout=None):
        if self.fail:
            raise RuntimeError(self.fail)
        return [fn(w) for w in self.wrappers]


@pytest.fixture
def active_plugin(tmp_path, monkeypatch):
    import os

    from ppspec_cli.running.engine import plugin

    monkeypatch.setitem(plugin._state, "active", True)
    monkeypatch.setitem(
        plugin._state,
        "status",
        {"pid": os.getpid(), "ok": True, "pack": "llama", "patches": [{"patch": "llama.relay"}]},
    )
    monkeypatch.setitem(plugin._state, "status_path", tmp_path / "1.json")
    monkeypatch.setitem(plugin._state, "expect", {"pp": 2, "tp": 2})
    return plugin


def test_the_engine_core_confirms_every_stage(active_plugin):
    active_plugin.confirm_workers(_Executor([_Wrapper(r, tp=2, pp=2) for r in range(4)]))
    st = active_plugin._state["status"]
    assert st["workers_confirmed"] is True and [w["pp_rank"] for w in st["workers"]] == [0, 0, 1, 1]
    assert all(w["ok"] and w["patches"] == ["llama.relay"] for w in st["workers"])


@pytest.mark.parametrize(
    ("executor", "needle"),
    [
        (_Executor([_Wrapper(r, tp=2, pp=2) for r in range(2)]), "cover pipeline stages [0]"),
        (
            _Executor([], fail="Worker failed with error 'No module named ppspec_cli'"),
            "could not report its plugin status",
        ),
    ],
)
def test_the_engine_core_refuses_unconfirmed_workers(active_plugin, executor, needle):
    with pytest.raises(active_plugin.PluginRefusal, match="not every worker runs the ppspec plugin") as ei:
        active_plugin.confirm_workers(executor)
    assert needle in str(ei.value)
    assert (
        active_plugin._state["status"]["workers_confirmed"] is False and active_plugin._state["status"]["ok"] is False
    )


def test_a_worker_where_the_plugin_did_not_run_says_so(active_plugin, monkeypatch):
    monkeypatch.setitem(active_plugin._state, "active", False)
    monkeypatch.setenv("VLLM_PLUGINS", "other")
    got = active_plugin.worker_status(_Wrapper(1, tp=1, pp=2))
    assert got["ok"] is False and got["pp_rank"] == 1 and "VLLM_PLUGINS='other'" in got["error"]
