"""Hosts for multi-node tests: Linux network namespaces on this machine, each with its own network
stack, its own host name (a UTS namespace per command) and a stock /etc/hosts, sharing one file
system (as nodes share an NFS home). Root only. Made and torn down by the tests themselves.

Each host gets `eth1` with 198.18.0.(i+1)/24 (RFC 2544 benchmarking space, on links made here
only); two hosts are one veth pair, more hang off a bridge in a namespace of its own. Nothing is
added to this machine's own network namespace. /etc/netns/NS/hosts (bind-mounted over /etc/hosts by
`ip netns exec`) is what a stock Debian/Ubuntu node has: `127.0.1.1 HOSTNAME` for its own name, plus
the other nodes by address (what a cluster's DNS or provisioning adds). So a host's own name
resolves to loopback, as on real nodes.

Also `Slurm`: Debian's slurm-wlm on those hosts (munged, slurmctld on the first host, one slurmd per
host), for tests that submit real batch jobs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SUBNET = "198.18.0"
#: Namespace names: PREFIX<pid>-<i>; a namespace whose pid is gone is a killed test's, removed at setup.
PREFIX = "ppspec-h"
NETNS_ETC = Path("/etc/netns")


def can_make_hosts() -> str | None:
    """None when this process can make namespace hosts, else why not (for the skip message)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces): CI runs as root"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2 / util-linux)"
    return None


def _ip(*args: str, ns: str | None = None) -> None:
    argv = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {p.stderr.strip()}")


def _stale() -> None:
    """Remove the namespaces (and hosts files) of test processes that are gone."""
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=False)
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"^{PREFIX}(\d+)-", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


class Hosts:
    """`n` hosts nodea, nodeb, ... at 198.18.0.1, .2, ...; `with Hosts(2) as h:` makes and removes them."""

    def __init__(self, n: int = 2):
        self.n = n
        self.names = [f"node{chr(ord('a') + i)}" for i in range(n)]
        self.addrs = [f"{SUBNET}.{i + 1}" for i in range(n)]
        self.ns = [f"{PREFIX}{os.getpid()}-{i}" for i in range(n)]
        self._switch = f"{PREFIX}{os.getpid()}-sw" if n > 2 else None
        self._made: list[str] = []

    def __enter__(self) -> "Hosts":
        _stale()
        try:
            self._make()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def _make(self) -> None:
        for ns in self.ns + ([self._switch] if self._switch else []):
            _ip("netns", "add", ns)
            self._made.append(ns)
        tag = str(os.getpid())[-5:]
        if self._switch is None:
            a, b = f"pa{tag}", f"pb{tag}"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", self.ns[0])
            _ip("link", "set", b, "netns", self.ns[1])
            ends = [a, b]
        else:
            _ip("link", "add", "br0", "type", "bridge", ns=self._switch)
            _ip("link", "set", "br0", "up", ns=self._switch)
            ends = []
            for i in range(self.n):
                h, s = f"h{i}x{tag}", f"s{i}x{tag}"
                _ip("link", "add", h, "type", "veth", "peer", "name", s)
                _ip("link", "set", h, "netns", self.ns[i])
                _ip("link", "set", s, "netns", self._switch)
                _ip("link", "set", s, "master", "br0", ns=self._switch)
                _ip("link", "set", s, "up", ns=self._switch)
                ends.append(h)
        for i, ns in enumerate(self.ns):
            _ip("link", "set", ends[i], "name", "eth1", ns=ns)  # the same name on every host, as clusters have
            _ip("addr", "add", f"{self.addrs[i]}/24", "dev", "eth1", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
            _ip("link", "set", "eth1", "up", ns=ns)
            etc = NETNS_ETC / ns
            etc.mkdir(parents=True, exist_ok=True)
            others = "".join(f"{a} {n}\n" for j, (a, n) in enumerate(zip(self.addrs, self.names)) if j != i)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {self.names[i]}\n{others}")

    def down(self) -> None:
        for ns in self._made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        self._made = []

    def argv(self, i: int, cmd: list[str], mounts: str = "") -> list[str]:
        """`cmd` on host i: its network namespace (and /etc/hosts), a UTS namespace with its host
        name; `mounts`: shell run first in that command's own mount namespace (e.g. cgroup mounts)."""
        script = (mounts + "\n" if mounts else "") + 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "--", "sh", "-c", script, self.names[i], *cmd]

    def run(self, i: int, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 300)
        kw.setdefault("check", False)
        return subprocess.run(self.argv(i, cmd), **kw)

    def popen(self, i: int, cmd: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("start_new_session", True)
        return subprocess.Popen(self.argv(i, cmd), **kw)

    def post_json(self, i: int, url: str, body: dict, timeout: float = 120) -> dict:
        """POST `body` as JSON to `url` from host i (its own network stack); the answer as a dict."""
        code = (
            "import json, sys, urllib.request\n"
            f"req = urllib.request.Request({url!r}, data={json.dumps(body)!r}.encode(), headers={{'Content-Type': "
            "'application/json'})\n"
            f"print(urllib.request.urlopen(req, timeout={timeout!r}).read().decode())\n"
        )
        r = self.run(i, [sys.executable, "-c", code], timeout=timeout + 60)
        assert r.returncode == 0, f"POST {url} from {self.names[i]} failed: {r.stderr[-2000:]}"
        return json.loads(r.stdout)

    def link(self, i: int, up: bool) -> None:
        """Cut (or restore) host i's cable: what a node failure looks like to everyone else."""
        _ip("link", "set", "eth1", "up" if up else "down", ns=self.ns[i])


@contextlib.contextmanager
def hosts_or_skip(n: int = 2) -> Iterator[Hosts]:
    """`n` namespace hosts for a test, or the test skipped with the reason they cannot be made."""
    why = can_make_hosts()
    if why:
        import pytest

        pytest.skip(why)
    with Hosts(n) as h:
        yield h


@contextlib.contextmanager
def shared_home(prefix: str = "ppspec-home-") -> Iterator[Path]:
    """The home every host sees (as an NFS home); short, since run dirs hold vLLM's socket paths."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------------------------- SLURM

SLURM_DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")
#: slurmd initialises its cgroup plugin even with proctrack/linuxproc and task/none, and `ip netns
#: exec` remounts /sys without /sys/fs/cgroup: mount a v1 hierarchy in slurmd's own mount namespace.
CGROUP_MOUNTS = (
    "mount -t tmpfs none /sys/fs/cgroup && for c in freezer cpuset memory devices; do mkdir -p "
    "/sys/fs/cgroup/$c && mount -t cgroup -o $c none /sys/fs/cgroup/$c; done"
)


def can_run_slurm() -> str | None:
    why = can_make_hosts()
    if why:
        return why
    missing = [d for d in SLURM_DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        return (
            f"needs Debian's slurm-wlm and munge (missing: {', '.join(missing)}): apt-get install -y slurm-wlm "
            "munge (dev.sh install-slurm)"
        )
    return None


class Slurm:
    """A real SLURM cluster over `hosts`: munged (one, its socket on the shared file system),
    slurmctld on host 0, a slurmd on every host, all as root with state under `root`."""

    def __init__(self, hosts: Hosts, root: Path, slurmd_timeout_s: int = 10):
        self.hosts, self.root = hosts, root
        self.conf = root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.procs: list[subprocess.Popen] = []
        self.timeout_s = slurmd_timeout_s

    def __enter__(self) -> "Slurm":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        r = self.root
        (r / "munge").mkdir(parents=True)
        (r / "munge").chmod(0o755)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = r / "munge" / "munge.sock"
        self._daemon(
            None,
            [
                "munged",
                "-F",
                "-f",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--log-file={r / 'munge' / 'munged.log'}",
                f"--pid-file={r / 'munge' / 'munged.pid'}",
                f"--seed-file={r / 'munge' / 'seed'}",
            ],
        )
        self._wait(lambda: sock.exists(), 30, "munged's socket")
        (r / "state").mkdir()
        for name in self.hosts.names:
            (r / "spool" / name).mkdir(parents=True)
        ncpu = os.cpu_count() or 1
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={a} CPUs={ncpu} State=UNKNOWN" for n, a in zip(self.hosts.names, self.hosts.addrs)
        )
        self.conf.write_text(
            f"""ClusterName=ppspec
SlurmctldHost={self.hosts.names[0]}({self.hosts.addrs[0]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}/%n
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.%n.pid"}
SlurmctldLogFile={r / "slurmctld.log"}
SlurmdLogFile={r / "slurmd.%n.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SlurmctldPort=6817
SlurmdPort=6818
ReturnToService=2
SlurmdTimeout={self.timeout_s}
MinJobAge=600
KillWait=10
MpiDefault=none
{nodes}
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""
        )
        (r / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\n")
        self._daemon(0, ["slurmctld", "-D", "-f", str(self.conf)])
        for i, name in enumerate(self.hosts.names):
            self._daemon(i, ["slurmd", "-D", "-N", name, "-f", str(self.conf)], mounts=CGROUP_MOUNTS)
        self._wait(lambda: self.node_states() == {n: "idle" for n in self.hosts.names}, 90, "every node idle in sinfo")

    def _daemon(self, host: int | None, argv: list[str], mounts: str = "") -> None:
        log = open(self.root / f"{argv[0]}-{len(self.procs)}.out", "w")  # noqa: SIM115 - closed with the process
        cmd = argv if host is None else self.hosts.argv(host, argv, mounts)
        self.procs.append(
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        )
        log.close()

    def _wait(self, cond, deadline_s: float, what: str) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s:
            if cond():
                return
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise AssertionError(f"a SLURM daemon exited while waiting for {what}: {dead}\n{self.logs()}")
            time.sleep(0.5)
        raise AssertionError(f"timed out after {deadline_s:.0f}s waiting for {what}\n{self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted(self.root.glob("*.log")) + sorted(self.root.glob("*.out")):
            out.append(f"== {f.name}\n" + f.read_text(errors="replace")[-1500:])
        return "\n".join(out)

    def cmd(self, argv: list[str], host: int = 0, **kw) -> subprocess.CompletedProcess:
        """A SLURM client command on a host (as a user on that node would run it)."""
        kw.setdefault("env", self.env)
        return self.hosts.run(host, argv, **kw)

    def node_states(self) -> dict[str, str]:
        p = self.cmd(["sinfo", "-h", "-N", "-o", "%N %T"], timeout=30)
        return (
            dict(line.split()[:2] for line in p.stdout.splitlines() if len(line.split()) >= 2)
            if p.returncode == 0
            else {}
        )

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict (JobState, ExitCode, NodeList, Reason ...)."""
        p = self.cmd(["scontrol", "show", "job", "-o", job_id], timeout=30)
        return dict(kv.split("=", 1) for kv in p.stdout.split() if "=" in kv)

    def node(self, name: str) -> dict[str, str]:
        p = self.cmd(["scontrol", "show", "node", "-o", name], timeout=30)
        return dict(kv.split("=", 1) for kv in p.stdout.split() if "=" in kv)

    def stop(self) -> None:
        self._kill_steps()
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        self.procs = []
        self._kill_steps()

    def _kill_steps(self) -> None:
        """slurmstepd daemonizes (it is nobody's child here); one whose node was cut off outlives its
        slurmd. Ours carry this cluster's SLURM_CONF in their environment block (which slurmstepd
        partly overwrites with its process title: searched as bytes, not parsed)."""
        mark = f"SLURM_CONF={self.conf}\0".encode()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().strip() == "slurmstepd" and mark in (d / "environ").read_bytes()[: 1 << 20]:
                    os.kill(int(d.name), signal.SIGKILL)
