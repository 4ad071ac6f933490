"""`ppspec bench` without an engine: the verdict, parity between arms, what --resume keeps, the
report and plots, usage errors. The real run on the CPU demo is tests/test_bench_engine.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio
from ppspec_cli.verify.bench import report, results
from ppspec_cli.verify.bench.results import Arm

REPO = Path(__file__).resolve().parent.parent
ARMS = [Arm("baseline", False, None), Arm("spec-k1", True, 1), Arm("spec-k3", True, 3)]


def _run(arm: str, c: int, tps: float, tpot: float = 10.0, texts=None, k=None) -> dict:
    spec = arm != "baseline"
    return {
        "arm": arm, "concurrency": c, "speculation": spec, "num_speculative_tokens": k if spec else None,
        "num_prompts": 8, "max_tokens": 16, "input_len": 32, "completed": 8, "failed": 0,
        "output_tokens_per_s": tps, "request_throughput": tps / 16, "tpot_ms": {"mean": tpot, "p50": tpot, "p99": tpot * 2},
        "itl_ms": {"mean": tpot, "p50": tpot, "p99": tpot}, "ttft_ms": {"mean": 20.0, "p50": 20.0, "p99": 30.0},
        "acceptance_length": 1.8 if spec else None, "acceptance_rate": 0.4 if spec else None,
        "per_position_acceptance": [0.6, 0.2] if spec else None, "generated_texts": texts or ["a", "b"],
    }


def _runs(table: dict[int, tuple[float, float, float]]) -> list[dict]:
    out = []
    for c, (b, k1, k3) in table.items():
        out += [_run("baseline", c, b), _run("spec-k1", c, k1, k=1), _run("spec-k3", c, k3, k=3)]
    return out


def test_verdict_finds_the_crossover_and_the_best_k_per_level():
    runs = _runs({1: (100, 130, 150), 4: (300, 330, 310), 16: (800, 700, 600), 32: (1000, 900, 800)})
    sp = results.speedups(ARMS, runs, [1, 4, 16, 32])
    assert [round(s["speedup"], 2) for s in sp] == [1.5, 1.1, 0.88, 0.9]
    assert [s["best_num_speculative_tokens"] for s in sp] == [3, 1, 1, 1]
    rec = results.recommendation(sp, profile_k=3, arms=ARMS)
    assert rec["speculate"] is True and rec["crossover_concurrency"] == 4
    # k=3 and k=1 each win one paying level: the better geometric-mean speed-up there (k=3: 1.5 x 1.03) wins
    assert rec["num_speculative_tokens"] == 3
    assert rec["profile_change"] == "keep drafter.num_speculative_tokens: 3"
    assert "above c=4 without `drafter:`" in rec["summary"]


def test_verdict_names_a_dip_below_the_crossover():
    runs = _runs({1: (100, 130, 120), 4: (300, 290, 280), 16: (800, 850, 820)})
    rec = results.recommendation(results.speedups(ARMS, runs, [1, 4, 16]), 1, ARMS)
    assert rec["crossover_concurrency"] == 16
    assert "but not at c=4" in rec["summary"]


def test_verdict_never_pays_says_drop_the_drafter():
    runs = _runs({1: (100, 90, 80), 4: (300, 200, 100)})
    rec = results.recommendation(results.speedups(ARMS, runs, [1, 4]), 2, ARMS)
    assert rec["speculate"] is False and rec["crossover_concurrency"] is None
    assert "drafter" in rec["profile_change"]


def test_verdict_pays_everywhere_names_a_new_k():
    runs = _runs({1: (100, 150, 120), 4: (300, 360, 320)})
    rec = results.recommendation(results.speedups(ARMS, runs, [1, 4]), 3, ARMS)
    assert rec["crossover_concurrency"] == 4 == rec["highest_measured"]
    assert rec["profile_change"] == "drafter.num_speculative_tokens: 1"


def _par(arm, ids):
    return {"arm": arm, "outputs": [{"index": i, "token_ids": t, "text": "x"} for i, t in enumerate(ids)]}


def test_parity_compares_token_ids_and_names_the_first_difference():
    runs = _runs({1: (1, 1, 1)})
    docs = {"baseline": _par("baseline", [[1, 2, 3], [4, 5, 6]]), "spec-k1": _par("spec-k1", [[1, 2, 3], [4, 5, 6]]), "spec-k3": _par("spec-k3", [[1, 2, 3], [4, 9, 6]])}
    p = results.parity(ARMS, docs, runs)
    assert p["identical"] is False
    k1, k3 = p["checks"]
    assert k1["identical"] and k1["pass"] == "tokens"
    assert not k3["identical"] and k3["first_difference"] == {"prompt": 1, "token": 1}
    docs["spec-k3"] = docs["spec-k1"]
    assert results.parity(ARMS, docs, runs)["identical"] is True


def test_parity_also_compares_the_load_runs_and_a_missing_pass_is_not_identical():
    runs = _runs({1: (1, 1, 1)})
    runs[1]["generated_texts"] = ["a", "DIFFERENT"]
    same = _par("x", [[1]])
    p = results.parity(ARMS, {"baseline": same, "spec-k1": same, "spec-k3": same}, runs)
    assert p["identical"] is False
    assert [x["first_difference"] for x in p["load_runs"] if not x["identical"]] == [1]
    p = results.parity(ARMS, {"baseline": same, "spec-k1": same, "spec-k3": None}, _runs({1: (1, 1, 1)}))
    assert p["identical"] is False and p["missing"] == ["spec-k3"]


def test_int_lists():
    assert results.parse_int_list("4,1, 16,4", "--concurrency", 1, 64) == [1, 4, 16]
    for bad in ("", "0", "1,x", "-1", "1e3", "65"):
        with pytest.raises(PpspecError):
            results.parse_int_list(bad, "--concurrency", 1, 64)


def test_resume_keeps_only_levels_measured_with_the_same_settings(tmp_path):
    from ppspec_cli.commands.bench import _Bench

    settings = {"concurrency": [1, 4], "num_prompts": 8, "max_tokens": 16, "input_len": 32, "seed": 0, "parity_prompts": 8}
    b = _Bench("p.yaml", None, ARMS[:2], [1, 4], settings, tmp_path, False, None)
    d = b.arm_dir(ARMS[0])
    d.mkdir(parents=True)
    safeio.write_text(d / "c1.json", json.dumps(_run("baseline", 1, 100)))
    safeio.write_text(d / "c4.json", json.dumps({**_run("baseline", 4, 100), "max_tokens": 99}))  # other settings
    assert b.todo(ARMS[0]) == ([4], True)
    safeio.write_text(d / "parity.json", json.dumps({"outputs": [], "settings": {k: settings[k] for k in ("num_prompts", "max_tokens", "input_len", "seed", "parity_prompts")}}))
    assert b.todo(ARMS[0]) == ([4], False)
    assert b.todo(ARMS[1]) == ([1, 4], True)
    (d / "c1.json").write_text("{not json")
    with pytest.raises(PpspecError) as e:  # issue 32: a saved record that is not of its shape is refused, the file named
        b.todo(ARMS[0])
    assert e.value.where.endswith("c1.json")


def _doc(runs):
    sp = results.speedups(ARMS, runs, [1, 4])
    return {
        "profile": "demo", "settings": {"concurrency": [1, 4], "num_prompts": 8, "max_tokens": 16, "input_len": 32, "seed": 0},
        "arms": [a.to_json() for a in ARMS], "runs": runs, "speedup": sp, "parity": {"identical": True, "checks": [], "load_runs": [], "missing": []},
        "recommendation": results.recommendation(sp, 1, ARMS), "warnings": [], "load_generator": "vllm bench serve",
    }


def test_report_and_plots(tmp_path):
    pytest.importorskip("matplotlib", reason="the `bench` extra (matplotlib) draws the plots")
    doc = _doc(_runs({1: (100, 130, 150), 4: (300, 250, 200)}))
    made, why = report.plots(doc, tmp_path)
    assert why is None and sorted(p.name for p in made) == ["bench.png", "tokens_per_s.png", "tpot.png"]
    for p in made:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = report.markdown({**doc, "plots": [str(p) for p in made]})
    assert "| 1 | spec-k3 | 150.0 |" in md and "1.50x" in md and "![bench](bench.png)" in md
    assert "crossover: speculation still pays at c=1" in md


def test_write_bytes_writes_binary_and_refuses_what_write_text_refuses(tmp_path):
    p = tmp_path / "x.png"
    safeio.write_bytes(p, b"\x89PNG\x00\xff")
    assert p.read_bytes() == b"\x89PNG\x00\xff"
    with pytest.raises(PpspecError, match="a directory"):
        safeio.write_bytes(tmp_path, b"x")
    assert not [f for f in tmp_path.iterdir() if f.name.endswith(".ppspec-tmp")]


def _cli(*args, cwd=REPO):
    import os

    return subprocess.run([sys.executable, "-m", "ppspec_cli.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.slow
def test_usage_errors_exit_2(tmp_path):
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--endpoint", "http://127.0.0.1:1")
    assert r.returncode == 2 and "--baseline-endpoint" in r.stderr
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--concurrency", "1,zero")
    assert r.returncode == 2 and "--concurrency" in r.stderr
    nodrafter = tmp_path / "p.yaml"
    import yaml

    data = yaml.safe_load((REPO / "profiles/tiny_cpu_demo.yaml").read_text())
    data.pop("drafter")
    nodrafter.write_text(yaml.safe_dump(data))
    r = _cli("bench", str(nodrafter), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "names no drafter" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture
def fake_servers(tmp_path):
    """Two stand-in servers (tests/fake_openai.py): the speculative one and the baseline."""
    from enginehelpers import free_port

    procs = []

    def start(*flags):
        port = free_port()
        p = subprocess.Popen([sys.executable, str(REPO / "tests" / "fake_openai.py"), str(port), *flags], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "ready"
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_endpoint_mode_measures_two_running_servers_and_parity_fails_on_a_divergence(tmp_path, fake_servers):
    base = fake_servers()
    args = ["bench", "profiles/tiny_cpu_demo.yaml", "--concurrency", "1,2", "--num-prompts", "6", "--max-tokens", "8", "--input-len", "16", "--json", "--baseline-endpoint", base]
    r = _cli(*args, "--endpoint", fake_servers("--spec"), "--out", str(tmp_path / "ok"))
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert sorted((x["arm"], x["concurrency"]) for x in doc["runs"]) == [("baseline", 1), ("baseline", 2), ("spec-k2", 1), ("spec-k2", 2)]
    spec = [x for x in doc["runs"] if x["speculation"]]
    # the stand-in's counters: N/2 drafts of 2 tokens per request, the first accepted; the client's test request stays outside
    assert all(x["acceptance_length"] == 2.0 and x["per_position_acceptance"] == [1.0, 0.0] and x["spec_decode"]["drafts"] == 6 * 4 for x in spec)
    assert all(x["output_tokens"] == 6 * 8 and x["completed"] == 6 for x in doc["runs"])
    assert doc["parity"]["identical"] is True and doc["parity"]["checks"][0]["prompts"] == 6
    assert doc["recommendation"]["profile_change"]
    assert (tmp_path / "ok" / "report.md").is_file() and (tmp_path / "ok" / "arms" / "spec-k2" / "c2.vllm.json").is_file()

    r = _cli(*args, "--endpoint", fake_servers("--spec", "--diverge"), "--out", str(tmp_path / "bad"))
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["parity"]["identical"] is False
    diff = doc["parity"]["checks"][0]["first_difference"]
    assert diff["token"] == 3 and doc["parity"]["checks"][0]["pass"] == "tokens"
    assert "parity" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_ctrl_c_stops_the_load_generator_and_keeps_the_report(tmp_path, fake_servers):
    import os
    import signal
    import time

    from enginehelpers import alive, descendants

    out = tmp_path / "out"
    p = subprocess.Popen(
        [sys.executable, "-m", "ppspec_cli.cli", "bench", "profiles/tiny_cpu_demo.yaml", "--concurrency", "1", "--num-prompts", "2", "--max-tokens", "4",
         "--endpoint", fake_servers("--spec"), "--baseline-endpoint", fake_servers(), "--out", str(out)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        seen |= descendants(p.pid)
        if seen:  # the load generator (importing vLLM)
            time.sleep(1)
            break
        time.sleep(0.1)
    assert seen, "bench started no load generator"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-2000:]
    assert "--resume" in err and "Traceback" not in err
    assert [pid for pid in seen if alive(pid)] == []
    doc = json.loads((out / "bench.json").read_text())
    assert doc["complete"] is False and doc["runs"] == []


@pytest.mark.slow
def test_a_dead_endpoint_is_one_clear_error_and_the_finished_levels_are_kept(tmp_path, fake_servers):
    """Issue 29 item 3: a measurement that fails (here the speculative server is not there) ends with
    one error and the documented exit code, not AttributeError/exit 3; the baseline's levels stay."""
    from enginehelpers import free_port

    out = tmp_path / "out"
    dead = f"http://127.0.0.1:{free_port()}"
    r = _cli("bench", "profiles/tiny_cpu_demo.yaml", "--concurrency", "1", "--num-prompts", "2", "--max-tokens", "4", "--input-len", "16",
             "--endpoint", dead, "--baseline-endpoint", fake_servers(), "--out", str(out), "--json")
    assert r.returncode == 1, (r.returncode, r.stderr[-3000:])
    assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr and "unexpected" not in r.stderr
    assert r.stderr.count("error:") >= 1 and dead.split("//")[1] in r.stderr
    doc = json.loads((out / "bench.json").read_text())
    assert [(x["arm"], x["concurrency"]) for x in doc["runs"]] == [("baseline", 1)]
    assert doc["complete"] is False
