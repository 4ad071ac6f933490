"""The GPU scripts' three problems of issue 45, without a network or a GPU:
- a pin the registry cannot meet is overridden, and the override is recorded (benchmarks/gpu_wheels_select.py,
  and gpu_wheels.sh's plan over a prepared report);
- the reverse check: a device package kept by the forward check but broken by the carried set travels too
  (vLLM 0.34.0 carries huggingface-hub 2.x; the device's transformers 5.17.0 asks < 2.0);
- gpu_bench_pp1.sh passes --sessions and sizes its stages from it.
The package metadata below is copied from the real wheels' METADATA (vLLM 0.34.0, transformers 5.17.0 and
5.22.2, huggingface-hub 2.4.0), cut to the lines that matter."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SELECT = REPO / "benchmarks" / "gpu_wheels_select.py"
WHEELS = REPO / "benchmarks" / "gpu_wheels.sh"
BENCH = REPO / "benchmarks" / "gpu_bench_pp1.sh"


def _mod():
    spec = importlib.util.spec_from_file_location("gpu_wheels_select", SELECT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


sel = _mod()

VLLM_REQS = [
    "flashinfer-python==0.7.3",
    "transformers<6,>=4.56.0",
    "huggingface-hub>=2.0.0",
    "torch==2.14.0",
    "numpy",
    "tensorizer==2.10.1; extra == 'tensorizer'",
    "pywin32; sys_platform == 'win32'",
]


def _item(name, version, requires=(), url=None):
    return {
        "metadata": {"name": name, "version": version, "requires_dist": list(requires)},
        "download_info": {"url": url or f"https://files.example/{name}-{version}-py3-none-any.whl"},
    }


def _report(tmp: Path, items, name="report.json", **extra) -> Path:
    p = tmp / name
    p.write_text(json.dumps({"version": "1", "install": items, **extra}))
    return p


def _items():
    return [
        _item("vllm", "0.34.0", VLLM_REQS),
        _item("flashinfer-python", "0.7.2.post1", ["torch"]),
        _item("transformers", "5.22.2", ["huggingface-hub<3.0,>=2.0.0", "numpy>=1.17"]),
        _item("huggingface-hub", "2.4.0"),
        _item("torch", "2.14.0"),
        _item("numpy", "2.5.2"),
        _item("peft", "0.18.0", ["transformers"]),
    ]


DEVICE = {"transformers": "5.17.0", "huggingface-hub": "1.33.0", "numpy": "2.5.2", "torch": "2.11.0", "peft": "0.17.1"}
DEVICE_META = {
    # the device's transformers 5.17.0 (its METADATA): huggingface-hub>=1.3.0,<2.0
    "transformers": {"name": "transformers", "version": "5.17.0", "requires_dist": ["huggingface-hub<2.0,>=1.3.0"]},
    "peft": {"name": "peft", "version": "0.17.1", "requires_dist": ["transformers<5.20"]},
    "numpy": {"name": "numpy", "version": "2.5.2", "requires_dist": []},
}


def test_requirements_replace_the_overridden_pin_and_drop_extras_and_other_platforms():
    lines, notes = sel.requirement_lines(_items()[0], {"flashinfer-python": "0.7.2.post1"})
    assert "flashinfer-python==0.7.2.post1" in lines and not any("0.7.3" in x for x in lines)
    assert "torch==2.14.0" in lines and "huggingface-hub>=2.0.0" in lines
    assert not any(x.startswith(("tensorizer", "pywin32")) for x in lines)
    assert notes == [
        {"name": "flashinfer-python", "asked_by": "vllm 0.34.0", "asked": "==0.7.3", "used": "0.7.2.post1"}
    ]


def test_an_override_vllm_does_not_ask_for_is_refused():
    with pytest.raises(SystemExit, match="does not ask for them"):
        sel.requirement_lines(_items()[0], {"flashinfer-cubin": "0.7.4"})
    with pytest.raises(SystemExit, match="not NAME==VERSION"):
        sel.parse_overrides(["flashinfer-python>=0.7"])


def test_merge_records_the_override(tmp_path):
    v = _report(tmp_path, _items()[:1], "vllm.json")
    rest = _report(tmp_path, _items()[1:], "rest.json")
    doc = sel.merge(str(v), str(rest), {"flashinfer-python": "0.7.2.post1"})
    assert [norm["metadata"]["name"] for norm in doc["install"]][:2] == ["vllm", "flashinfer-python"]
    assert doc["ppspec_overrides"][0]["asked"] == "==0.7.3"


def _selection(device=DEVICE, overrides=None, forced=None):
    return sel.Selection(
        _items(), "lean", dict(device), [], forced or {}, overrides or {"flashinfer-python": "0.7.2.post1"}
    )


def test_reverse_check_carries_what_the_carried_set_breaks():
    s = _selection()
    # forward: the device's huggingface-hub 1.33 fails vLLM's >= 2.0 and travels; transformers 5.17.0
    # meets vLLM's own >= 4.56 and would stay: the old selection stopped here
    assert s.carried["huggingface-hub"] == "2.4.0" and s.kept["transformers"] == "5.17.0"
    assert set(s.candidates()) == {"transformers==5.17.0", "numpy==2.5.2", "peft==0.17.1"}
    s.reverse(DEVICE_META)
    assert s.carried["transformers"] == "5.22.2" and "transformers" not in s.kept
    # ...and carrying transformers 5.22.2 breaks the device's peft (< 5.20): the fixpoint carries it too
    assert s.carried["peft"] == "0.18.0"
    assert s.kept == {"numpy": "2.5.2"}
    assert any("transformers 5.17.0 asks huggingface-hub<2.0,>=1.3.0" in n for n in s.notes)


def test_reverse_check_without_metadata_says_what_it_could_not_check():
    s = _selection()
    s.reverse({})
    assert "transformers" in s.kept
    assert any("not checked" in n and "transformers" in n for n in s.notes)


def test_the_override_replaces_the_pin_in_the_forward_check():
    # a device that already has the override's version keeps it (vLLM's ==0.7.3 no longer applies)
    s = _selection(device={**DEVICE, "flashinfer-python": "0.7.2.post1"})
    assert s.kept.get("flashinfer-python") == "0.7.2.post1"
    s = _selection(device={**DEVICE, "flashinfer-python": "0.7.2.post1"}, overrides={"flashinfer-python": "0.7.4"})
    assert "flashinfer-python" in s.carried


def test_manifest_lists_overrides_notes_and_both_sides():
    s = _selection()
    s.reverse(DEVICE_META)
    text = sel.manifest(s, {"ppspec_overrides": sel.requirement_lines(_items()[0], s.overrides)[1]}, "lean")
    assert "override: flashinfer-python==0.7.2.post1 (vllm 0.34.0 asks flashinfer-python==0.7.3)" in text
    assert "carried: transformers==5.22.2" in text and "device: numpy==2.5.2" in text
    assert "note: reverse check: the device's transformers 5.17.0" in text


def _env_with_python(**kw) -> dict:
    # the scripts call `python3`: this interpreter (it has `packaging`) first on PATH
    bindir = Path(sys.executable).parent
    return dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", **kw)


def test_plan_with_an_override_reads_the_report_resolved_with_it(tmp_path):
    """gpu_wheels.sh's glue: the overridden report is found under its own name, the device packages'
    metadata is read for the reverse check, and the manifest records the override."""
    cache = tmp_path / "cache"
    cache.mkdir()
    ov = "flashinfer-python==0.7.2.post1"
    tag = hashlib.sha256((ov + "\n").encode()).hexdigest()[:8]
    _report(cache, _items(), f"report-0.34.0-ov{tag}.json", ppspec_overrides=[{"name": "flashinfer-python",
            "asked_by": "vllm 0.34.0", "asked": "==0.7.3", "used": "0.7.2.post1"}])  # fmt: skip
    meta = [{"metadata": m, "download_info": {"url": "x"}} for m in DEVICE_META.values()]
    cands = "\n".join(sorted(f"{n}=={v}" for n, v in DEVICE.items() if n in ("transformers", "numpy", "peft")))
    _report(cache, meta, f"device-meta-{hashlib.sha256((cands + chr(10)).encode()).hexdigest()[:12]}.json")
    device = tmp_path / "device.json"
    device.write_text(json.dumps([{"name": n, "version": v} for n, v in DEVICE.items()]))
    r = subprocess.run(
        ["bash", str(WHEELS), "plan", "--tier", "lean", "--device-pip-list", str(device), "--override", ov],
        env=_env_with_python(VLLM_VERSION="0.34.0", GPU_WHEELS_CACHE=str(cache), FORCE_CARRY=""),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    carried = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
    assert carried.get("transformers") == "5.22.2" and carried.get("flashinfer-python") == "0.7.2.post1"
    assert "numpy" not in carried
    assert "reverse check: the device's transformers 5.17.0" in r.stderr
    assert "override: flashinfer-python==0.7.2.post1" in (cache / "MANIFEST.txt").read_text()


def test_a_pin_the_registry_lacks_gets_the_override_hint(tmp_path):
    err = tmp_path / "err"
    err.write_text("ERROR: No matching distribution found for flashinfer-python==0.7.3\n")
    script = f"source <(sed -n '/^resolve_failed()/,/^}}/p' {WHEELS}); VLLM_VERSION=0.34.0; resolve_failed {err}"
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert (
        "--override flashinfer-python==VERSION" in r.stderr and "registry has no flashinfer-python==0.7.3" in r.stderr
    )


# --- gpu_bench_pp1.sh ------------------------------------------------------------------------------


def _bench_site(tmp: Path, ppspec_body: str) -> Path:
    site = tmp / "site"
    (site / "bin").mkdir(parents=True)
    stubs = {
        "nvidia-smi": "echo 'NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04'",
        # the demo-model build (`python3 -c`) is skipped; anything else runs on this interpreter
        "python3": f'[ "$1" = -c ] && exit 0\nexec {sys.executable} "$@"',
        "ppspec": f'echo "$@" >> "{tmp}/ppspec-calls"\n{ppspec_body}',
    }
    for name, body in stubs.items():
        (site / "bin" / name).write_text("#!/usr/bin/env bash\n" + body + "\n")
        (site / "bin" / name).chmod(0o755)
    (site / ".ppspec-manifest.txt").write_text("override: flashinfer-python==0.7.2.post1 (vllm 0.34.0 asks ==0.7.3)\n")
    return site


def _run_bench(tmp: Path, site: Path, left_s: int, **env) -> subprocess.CompletedProcess:
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    e = dict(
        os.environ,
        DEVICE_SITE=str(site),
        WORK=str(tmp / "work"),
        OUT=str(out),
        END=str(int(time.time()) + left_s),
        **env,
    )
    return subprocess.run(
        ["bash", str(BENCH), "profile.yaml"], env=e, capture_output=True, text=True, timeout=120, cwd=tmp
    )


def _calls(tmp: Path) -> list[str]:
    p = tmp / "ppspec-calls"
    return p.read_text().splitlines() if p.exists() else []


def test_bench_script_passes_sessions_and_its_settings(tmp_path):
    site = _bench_site(tmp_path, "exit 0")
    r = _run_bench(tmp_path, site, 3000, STAGES="1 1,2", PROMPTS="32")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bench: complete" in r.stdout
    calls = _calls(tmp_path)
    assert len(calls) == 2
    for c, ks in zip(calls, ("1", "1,2")):
        assert f"--num-speculative-tokens {ks} " in c
        assert "--sessions per-arm" in c and "--repeat 3" in c and "--num-prompts 32" in c and "--resume" in c
    rest = tmp_path / "out" / "bench-8b-pp1" / "rest.tgz"
    names = subprocess.run(["tar", "-tzf", str(rest)], capture_output=True, text=True).stdout
    assert "wheels-manifest.txt" in names


@pytest.mark.parametrize(
    ("sessions", "left", "runs"),
    [
        ("per-arm", 400, True),  # one arm: one start + its runs, ~260 s
        ("per-repeat", 400, False),  # one arm: 3 sessions of ~200 s each
        ("per-repeat", 700, True),
    ],
)
def test_bench_script_sizes_a_stage_from_its_sessions(tmp_path, sessions, left, runs):
    site = _bench_site(tmp_path, "exit 0")
    r = _run_bench(tmp_path, site, left, STAGES="1", SESSIONS=sessions)
    assert bool(_calls(tmp_path)) is runs, r.stdout
    if not runs:
        assert r.returncode == 3
        assert f"needs ~600 s per arm ({sessions} sessions)" in r.stdout
    else:
        assert f"--sessions {sessions}" in _calls(tmp_path)[0]


def test_bench_script_refuses_an_unknown_sessions_mode(tmp_path):
    r = _run_bench(tmp_path, _bench_site(tmp_path, "exit 0"), 3000, SESSIONS="per-level")
    assert r.returncode == 2 and not _calls(tmp_path)


def test_bench_script_keeps_every_engine_log_and_its_memory_lines(tmp_path):
    """Each engine writes RUN_DIR/engine.log anew; the script keeps one copy per engine and collects
    vLLM's memory lines (the two fake engines wait until the watcher has copied their log)."""
    runs = tmp_path / "work" / "cache" / "runs" / "p"
    logs = tmp_path / "work" / "bench-8b-pp1" / "logs"
    body = f"""
mkdir -p {runs}
for i in 1 2; do
  rm -f {runs}/engine.log
  {{
    printf 'INFO 12-07 (EngineCore pid=%s)\\n' $i
    printf 'INFO 12-07 [gpu_model_runner.py:1] Model loading took 16.1 GiB memory and 9.2 seconds\\n'
    printf 'INFO [kv_cache_utils.py:2] GPU KV cache size: %s tokens\\n' $((i * 1000))
  }} > {runs}/engine.log
  for _ in $(seq 300); do grep -qs "$((i * 1000)) tokens" {logs}/engine-$i.log && break; sleep 0.1; done
done
"""
    site = _bench_site(tmp_path, body)
    r = _run_bench(tmp_path, site, 3000, STAGES="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (logs / "engine-1.log").read_text().count("1000 tokens") == 1
    assert "2000 tokens" in (logs / "engine-2.log").read_text()
    mem = (tmp_path / "out" / "bench-8b-pp1" / "memory.txt").read_text()
    assert mem.count("Model loading took 16.1 GiB") == 2 and "GPU KV cache size: 2000 tokens" in mem


# --- gpu_serve_verify.sh -----------------------------------------------------------------------------

_FAKE_SERVE = """
case "$1" in
  serve)
    rd=$(echo "$@" | sed 's/.*--run-dir \\([^ ]*\\).*/\\1/')
    {
      printf 'INFO [gpu_model_runner.py:1] Model loading took 15.2 GiB memory and 8 seconds\\n'
      printf 'INFO [gpu_worker.py:2] Available KV cache memory: 40.1 GiB\\n'
      printf 'INFO [kv_cache_utils.py:3] GPU KV cache size: 328,000 tokens, Maximum concurrency for 512 tokens '
      printf 'per request: 640.00x\\n'
    } > "$rd/engine.log"
    echo "ppspec: serving at http://127.0.0.1:8000 (OpenAI API) - ready in 1s"
    trap 'echo stopped >> "$rd/stopped"; exit 143' TERM
    while sleep 0.1; do :; done ;;
  verify) echo "PASS  drafter sanity"; exit 0 ;;
esac
"""


@pytest.mark.parametrize("stop_at", ["verify", "kv"])
def test_serve_verify_sets_the_utilization_collects_memory_and_stops_the_engine(tmp_path, stop_at):
    site = _bench_site(tmp_path, _FAKE_SERVE)
    prof = tmp_path / "profile.yaml"
    prof.write_text(
        "name: x\nengine:\n  gpu-memory-utilization: 0.85\ndrafter:\n  method: eagle3\n  model: d\n  "
        "num_speculative_tokens: 2\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_serve_verify.sh"), str(prof)],
        env=_env_with_python(
            DEVICE_SITE=str(site), WORK=str(tmp_path / "work"), OUT=str(out), UTIL="0.6", NST="1", STOP_AT=stop_at
        ),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    d = tmp_path / "work" / "serve-verify-u0.6-k1"
    served = (d / "profile.yaml").read_text()
    assert "gpu-memory-utilization: 0.6" in served and "num_speculative_tokens: 1" in served
    assert (d / "run" / "stopped").read_text() == "stopped\n"  # SIGTERM reached the engine's supervisor
    mem = (out / "serve-verify-u0.6-k1" / "memory.txt").read_text()
    assert "Available KV cache memory: 40.1 GiB" in mem and "GPU KV cache size: 328,000 tokens" in mem
    assert ("PASS  drafter sanity" in r.stdout) is (stop_at == "verify")
