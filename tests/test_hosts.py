"""Multi-node defaults on two hosts made of network namespaces (tests/hosts.py), without an engine:
the interface and address each node takes from its route to the head (`serve --dry-run --node-rank
i` on the node), `check` on a node (host name on loopback, head unroutable, ports), the per-node run
directory, and the run-directory lock across hosts sharing a home. The engine runs:
tests/test_multinode_engine.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hosts import Hosts, hosts_or_skip, shared_home

pytestmark = pytest.mark.slow  # runs ppspec on the namespace hosts, in subprocesses

REPO = Path(__file__).resolve().parent.parent
PPSPEC = [sys.executable, "-m", "ppspec_cli.cli"]


@pytest.fixture(scope="module")
def hosts():
    with hosts_or_skip() as h:
        yield h


@pytest.fixture
def home():
    with shared_home() as d:
        yield d


def env_for(home: Path) -> dict:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PPSPEC_", "GLOO_", "NCCL_", "VLLM_HOST"))
    }
    env.update(
        HOME=str(home),
        HF_HUB_OFFLINE="1",
        PYTHONPATH=f"{REPO}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO),
    )
    return env


def profile(home: Path, **launch) -> Path:
    p = home / "two.yaml"
    p.write_text(
        yaml.safe_dump(
            {
                "name": "two",
                "target": {"model": "demo:tiny-llama"},
                "platform": "cpu",
                "topology": {"nodes": 2, "pipeline_parallel": 2},
                "launch": launch,
            }
        )
    )
    return p


def dry(hosts: Hosts, i: int, prof: Path, home: Path, *extra: str) -> dict:
    r = hosts.run(i, [*PPSPEC, "serve", str(prof), "--dry-run", "--json", *extra], env=env_for(home), cwd=home)
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return json.loads(r.stdout)


def test_each_node_takes_its_route_to_the_head(hosts, home):
    """On each host, with the head given by address or by name (a stock /etc/hosts: the head's own
    name is loopback there), `serve --dry-run --node-rank i` shows the interface and address vLLM's
    process groups get, and the node's own run directory; a profile's own setting wins."""
    for head in (hosts.addrs[0], hosts.names[0]):
        prof = profile(home, master_addr=head)
        for i in (0, 1):
            d = dry(hosts, i, prof, home, "--node-rank", str(i))
            (node,) = d["nodes"]
            env = node["env"]
            assert (env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"], env["VLLM_HOST_IP"]) == (
                "eth1",
                "eth1",
                hosts.addrs[i],
            ), (head, i, env)
            assert d["run_dir"] == str(home / ".cache" / "ppspec" / "runs" / "two" / f"{hosts.names[i]}-node{i}")
            assert env["PPSPEC_PLAN_FILE"] == d["run_dir"] + "/plan.json"
    data = yaml.safe_load(prof.read_text())
    data["env"] = {"GLOO_SOCKET_IFNAME": "lo"}
    prof.write_text(yaml.safe_dump(data))
    (node,) = dry(hosts, 1, prof, home, "--node-rank", "1")["nodes"]
    assert node["env"]["GLOO_SOCKET_IFNAME"] == "lo" and node["env"]["VLLM_HOST_IP"] == hosts.addrs[1]
    # the all-nodes dry run cannot know the other hosts' routes: it says where each node shows them
    r = hosts.run(0, [*PPSPEC, "serve", str(prof), "--dry-run"], env=env_for(home), cwd=home)
    assert "GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and VLLM_HOST_IP from its route to the head" in r.stdout
    assert "VLLM_HOST_IP=" not in r.stdout


def test_check_on_a_node(hosts, home):
    """`check` on node B: its host name resolves to loopback (warning), the ports to open (info);
    a head it has no route to (warning); the same profile on a host whose name is not loopback:
    no host-name warning. Without master_addr: a warning (SLURM supplies the head), exit 0."""
    env = env_for(home)

    def codes(i: int, prof: Path) -> dict:
        r = hosts.run(i, [*PPSPEC, "check", str(prof), "--json"], env=env, cwd=home)
        assert r.returncode in (0, 1), r.stderr[-2000:]
        out = json.loads(r.stdout)
        return {
            f["code"]: f for f in out["findings"] + out["here"]["findings"]
        }  # the host's view is the `here` question's

    by = codes(1, profile(home, master_addr=hosts.names[0], master_port=31000))
    assert (
        by["node-hostname-loopback"]["severity"] == "warning" and "(nodeb)" in by["node-hostname-loopback"]["message"]
    )
    assert "127.0.1.1" in by["node-hostname-loopback"]["message"]
    assert "31000" in by["node-ports"]["message"] and "31001" in by["node-ports"]["message"]
    assert "node-head-unroutable" not in by
    by = codes(1, profile(home, master_addr="10.77.0.1"))
    assert (
        by["node-head-unroutable"]["severity"] == "warning"
        and "no route to the head 10.77.0.1" in by["node-head-unroutable"]["message"]
    )
    by = codes(1, profile(home, master_addr="nodez"))
    assert "does not resolve" in by["node-head-unroutable"]["message"]
    r = hosts.run(1, [*PPSPEC, "check", str(profile(home))], env=env, cwd=home)
    assert r.returncode == 0 and "topology-master-addr" in r.stdout, r.stdout[-2000:]
    # serve by hand without a head: refused, with the fix
    r = hosts.run(1, [*PPSPEC, "serve", str(profile(home)), "--node-rank", "1"], env=env, cwd=home)
    assert r.returncode == 1 and "topology-master-addr" in r.stderr + r.stdout


LOCKER = """
import sys, time
from pathlib import Path
from ppspec_cli.running.serve.rundir import lock_run_dir
from ppspec_cli.errors import PpspecError
try:
    lock = lock_run_dir(Path(sys.argv[1]))
except PpspecError as e:
    print("REFUSED", e.what, "| fix:", e.fix, flush=True)
    sys.exit(1)
print("LOCKED", flush=True)
if sys.argv[2] == "hold":
    time.sleep(600)
lock.close()
"""


def test_run_dir_lock_across_hosts(hosts, home):
    """One run directory in the shared home: held on host A, host B is refused with host A named
    (its pid is "there", never taken for one of B's); the record is host + boot id + pid. After host
    A's holder is SIGKILLed (record left, lock gone), host B still refuses (a foreign record cannot
    be checked from B), while host A itself takes it over (same host and boot, the pid is dead)."""
    env = env_for(home)
    d = home / "shared-run"
    holder = hosts.popen(0, [sys.executable, "-c", LOCKER, str(d), "hold"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "LOCKED"
        rec = json.loads((d / "serve.lock").read_text())
        assert rec["host"] == "nodea" and rec["pid"] == holder.pid and rec["boot_id"]
        r = hosts.run(1, [sys.executable, "-c", LOCKER, str(d), "once"], env=env)
        assert (
            r.returncode == 1
            and f"`ppspec serve` on host nodea (pid {holder.pid} there, not on this host nodeb) is using the run "
            "directory"
            in r.stdout
        ), r.stdout + r.stderr
        r = hosts.run(0, [sys.executable, "-c", LOCKER, str(d), "once"], env=env)
        assert r.returncode == 1 and f"another `ppspec serve` (pid {holder.pid} on this host) is using" in r.stdout, (
            r.stdout
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # the kernel dropped the lock with the process; the record stays
    assert json.loads((d / "serve.lock").read_text())["pid"] == holder.pid
    r = hosts.run(1, [sys.executable, "-c", LOCKER, str(d), "once"], env=env)
    assert (
        r.returncode == 1 and "its record is from another host" in r.stdout and f"remove {d / 'serve.lock'}" in r.stdout
    ), r.stdout
    r = hosts.run(0, [sys.executable, "-c", LOCKER, str(d), "once"], env=env)
    assert r.returncode == 0 and "LOCKED" in r.stdout, r.stdout + r.stderr
    assert (d / "serve.lock").read_text() == "", "released: the record is cleared"
    r = hosts.run(1, [sys.executable, "-c", LOCKER, str(d), "once"], env=env)
    assert r.returncode == 0, r.stdout
