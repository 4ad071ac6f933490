"""The parent side of the load generator (loadgen.py): start it, hand it a job, follow its events
with deadlines, stop its whole process group whatever happens."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.io import safeio, spawn

#: Longest event line read from the load generator.
MAX_EVENT_BYTES = 1 << 16
#: Seconds the load generator may take to import vLLM and say `ready`.
READY_TIMEOUT_S = 300.0


class Stopped(Exception):
    """The measurement was asked to stop (a signal, the engine's death)."""


class LoadGen:
    """One load-generator process for a bench run: started with the first engine session, so its
    vLLM import overlaps that engine's start-up, then handed one job per session (vLLM's client is
    imported once per run). `alive` is false once it failed or was stopped: start another."""

    def __init__(self, log_path: Path, env: dict | None = None):
        from ppspec_cli.running.serve import die_with_parent

        self.log_path = log_path
        safeio.make_dirs(log_path.parent, what="the bench output directory")
        self._log = safeio.open_log(log_path, what="the load generator's log")  # never truncates through a planted link
        e = {"PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = spawn.popen(
            spawn.python_argv(
                "-m", "ppspec_cli.verify.bench.loadgen"
            ),  # -P: a module planted in the working directory never runs
            stdin=spawn.PIPE,
            stdout=spawn.PIPE,
            stderr=self._log,
            env=spawn.child_env(e),
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl + getppid only
        )
        self.events: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        self.import_s: float | None = None
        self.ready = False
        self.alive = True

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline(MAX_EVENT_BYTES)
            if not line:
                break
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # not ours (a stray print before the redirect)
            if isinstance(ev, dict) and isinstance(ev.get("event"), str):
                self.events.put(ev)
        self.events.put({"event": "exit"})

    def _next(self, deadline: float, stop: Callable[[], bool], what: str) -> dict:
        while True:
            if stop():
                raise Stopped()
            left = deadline - time.monotonic()
            if left <= 0:
                raise PpspecError(
                    f"the load generator did not finish {what} in time",
                    where="ppspec bench (vLLM's benchmark client)",
                    fix=f"check its log {self.log_path}; use smaller --num-prompts / --max-tokens",
                    exit_code=EXIT_REFUSED,
                )
            try:
                return self.events.get(timeout=min(0.3, left))
            except queue.Empty:
                continue

    def _fail(self, ev: dict) -> PpspecError:
        if ev.get("event") == "error":
            msg = str(ev.get("message", "?"))
        else:
            self.proc.poll()
            msg = f"the load generator exited (code {self.proc.returncode}) before it finished"
        return PpspecError(
            msg,
            where="ppspec bench (vLLM's benchmark client)",
            fix=f"see its log {self.log_path}",
            exit_code=EXIT_REFUSED,
        )

    def run(
        self, job: dict, stop: Callable[[], bool], on_event: Callable[[dict], None], level_timeout_s: float
    ) -> None:
        """Wait for `ready` (the first job), send the job, pass every event on until `done`. Any
        other end (an error, a stop, a timeout) leaves the process not `alive`."""
        try:
            self._run(job, stop, on_event, level_timeout_s)
        except BaseException:
            self.alive = False
            raise

    def _run(
        self, job: dict, stop: Callable[[], bool], on_event: Callable[[dict], None], level_timeout_s: float
    ) -> None:
        if not self.ready:
            t0 = time.monotonic()
            ev = self._next(t0 + READY_TIMEOUT_S, stop, "importing vLLM's benchmark client")
            if ev["event"] != "ready":
                raise self._fail(ev)
            self.import_s = ev.get("import_s")
            self.ready = True
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + level_timeout_s
        while True:
            ev = self._next(deadline, stop, "its current step")
            if ev["event"] in ("error", "exit"):
                raise self._fail(ev)
            on_event(ev)
            if ev["event"] == "done":
                return
            deadline = time.monotonic() + level_timeout_s  # each step has its own deadline

    def close(self) -> None:
        """Stop the process group (SIGTERM, SIGKILL after 5 s) and reap it; idempotent. Stop
        signals wait until it is done (a second Ctrl-C must not leave the load generator running)."""
        stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        main = threading.current_thread() is threading.main_thread()
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            self._close()
        finally:
            if main:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)

    def _close(self) -> None:
        self.alive = False
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        pgid = self.proc.pid
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.proc.poll()
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                continue
            break
        try:
            self.proc.wait(timeout=5)
        except spawn.TimeoutExpired:
            pass
        self._reader.join(timeout=2)
        self._log.close()
