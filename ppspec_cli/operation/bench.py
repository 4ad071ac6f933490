"""Serving bench's sessions: each one an Operation on the arm's profile (the profile without its
drafter, or with another num_speculative_tokens or schedule), gathered, judged and acted on as
`serve` does, started with the load generator as its workload (running/serve/start.py). What the
sessions are and what their results say is verify/bench/session.py's."""

from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Callable

from ppspec_cli.errors import EXIT_OK, EXIT_SIGNAL, PpspecError
from ppspec_cli.io import safeio
from ppspec_cli.operation import Operation, PlacementArgs, run
from ppspec_cli.operation.outcome import Outcome
from ppspec_cli.verify.bench import results as res
from ppspec_cli.verify.bench.results import Arm
from ppspec_cli.verify.bench.session import PER_REPEAT, Session, arm_line, parity_key


class Driver:
    """Serves a Session's arms one engine at a time. `refused(outcome)` renders a refused launch and
    gives its exit code (the command's renderer), `failed(error)` renders why a session failed;
    both are shown after the report (`show_fatal`), never before its warnings. `offline` and
    `health_timeout` are serve's. One load-generator process serves every session (vLLM's client
    is imported once per run); a new one starts only after the last failed or was stopped."""

    def __init__(
        self,
        session: Session,
        refused: Callable[[Outcome], int],
        progress: Callable[[str], None],
        offline: bool = False,
        health_timeout: float | None = None,
        failed: Callable[[PpspecError], None] | None = None,
    ):
        self.s, self.refused, self.progress = session, refused, progress
        self.failed = failed if failed is not None else (lambda e: progress(e.render()))
        self.offline, self.health_timeout = offline, health_timeout
        session.progress = progress
        self.started = False  # a session reached its workload (a server answered): there is something to report
        self.fatal: Callable[[], Any] | None = None  # why the run stopped, shown last
        self.lg: Any = None  # the load generator every session shares (_loadgen)

    def show_fatal(self) -> None:
        if self.fatal is not None:
            self.fatal()

    def fail(self, e: PpspecError) -> None:
        """A session's failure: recorded in the report's warnings, shown after the report."""
        self.s.failures.append(e.what)
        self.fatal = lambda: self.failed(e)

    def close(self) -> None:
        """The load generator stopped, whatever happened."""
        if self.lg is not None:
            self.lg.close()

    def _loadgen(self, job: dict) -> Any:
        """The run's load generator (harness.LoadGen): one process for every session, a new one only
        after the last failed or was stopped. Its log: OUT/loadgen.log."""
        from ppspec_cli.verify.bench.harness import LoadGen

        if self.lg is None or not self.lg.alive:
            env = {"HF_HUB_OFFLINE": "1"} if self.offline or os.path.isdir(job["tokenizer"]) else {}
            self.lg = LoadGen(self.s.state / "loadgen.log", env)
        return self.lg

    def measure_all(self) -> int:
        """The static arms, then (serving the profile) the tuned arm: the schedule their grid proposes."""
        s = self.s
        with_tuned = all(a.endpoint is None for a in s.arms)
        names = [a.name for a in s.arms] + ([res.TUNED] if with_tuned else [])
        plan = s.sessions(s.arms)
        for a in s.arms:
            if not any(x[0] is a for x in plan):
                self.progress(f"{s.tag(a, names, None)}: measured earlier (kept, --resume)")
        code = self._run_sessions(plan, names, tuned_runs=len(s.levels) * s.settings["repeat"] if with_tuned else 0)
        if code:
            return code
        if not with_tuned:
            s.warnings.append("with --endpoint bench serves nothing: the schedule is proposed, not measured")
            return EXIT_OK
        tuned = s.tuned_arm()
        if tuned is None:
            return EXIT_OK
        s.arms.append(tuned)
        plan = s.sessions([tuned])
        if not plan:
            self.progress(f"{s.tag(tuned, names, None)}: measured earlier (kept, --resume)")
        return self._run_sessions(plan, names, tuned_runs=0)

    def _run_sessions(self, plan, names: list[str], tuned_runs: int) -> int:
        """Each planned session in turn (ETA: the runs and engine starts still ahead, the tuned
        arm's counted as a full set while it is not yet derived)."""
        s = self.s
        per_repeat = s.settings.get("sessions", PER_REPEAT) == PER_REPEAT
        tuned_sessions = (s.settings["repeat"] if per_repeat else 1) if tuned_runs else 0
        for i, (arm, runs, need_parity) in enumerate(plan):
            later = plan[i + 1 :]
            code = self.measure_arm(
                arm,
                s.tag(arm, names, runs),
                runs,
                need_parity,
                len(later) + tuned_sessions,
                sum(len(x[1]) for x in later) + tuned_runs,
            )
            if code:
                return code
        return EXIT_OK

    def _prepare(self, arm: Arm) -> Outcome | None:
        """The arm's Outcome (gather -> judge -> act on its profile), or None for a measured endpoint."""
        if arm.endpoint is not None:
            return None
        op = Operation(
            "bench",
            self.s.profile_path,
            PlacementArgs(launching=True),
            offline=self.offline,
            profile=self.s.variant(arm),
        )
        return run(op, self.progress)

    def measure_arm(
        self, arm: Arm, tag: str, runs: list[tuple[int, int]], need_parity: bool, arms_left: int, later_runs: int
    ) -> int:
        from ppspec_cli.verify.bench.harness import Stopped

        s = self.s
        d = s.make_arm_dir(arm)
        levels = ",".join(map(str, sorted({c for c, _r in runs}))) or "-"
        self.progress(f"{tag}: {arm_line(arm)}; {len(runs)} run(s) of c={levels}")
        prepared = self._prepare(arm)
        if prepared is not None and prepared.refused:
            refused = prepared
            self.fatal = lambda: self.refused(refused)
            return refused.exit_code
        job = s.job(arm, prepared, runs, need_parity)
        lg = self._loadgen(job)  # the first one imports vLLM while the engine starts
        on_event = functools.partial(
            s.on_event, tag, runs, [0], time.monotonic(), prepared is not None, later_runs, arms_left
        )
        timeout = 300.0 + 0.5 * max(s.settings["prompts_per_level"].values()) * s.settings["max_tokens"]

        def workload(stop) -> None:
            self.started = True
            try:
                lg.run(job, stop, on_event, timeout)
            except Stopped:
                return
            if need_parity and (d / "parity.json").is_file():
                doc = res.load_record(d / "parity.json") or {}
                doc["settings"] = parity_key(s.settings, arm)
                safeio.write_text(d / "parity.json", json.dumps(doc, indent=1), what="bench parity outputs")

        idle = False  # the load generator finished its job and waits for the next session's
        try:
            if prepared is None:
                try:
                    workload(lambda: False)
                except PpspecError as e:
                    s.failures.append(f"{arm.name}: {e.what}")
                    raise
                idle = True
                return EXIT_OK
            from ppspec_cli.running.serve.start import start

            r = start(
                prepared, progress=self.progress, health_timeout=self.health_timeout, workload=workload, stream=False
            )
            idle = r.exit_code == EXIT_OK
        finally:
            if not idle or not lg.alive:  # stopped, failed or mid-job: a later session starts a fresh one
                lg.close()
        return self._ended(arm, tag, r)

    def _ended(self, arm: Arm, tag: str, r) -> int:
        """The session's engine ended: a failure is recorded (a signal only reported)."""
        if r.exit_code == EXIT_OK:
            return EXIT_OK
        if r.error is not None and not isinstance(r.error, PpspecError):
            raise r.error
        if r.exit_code < EXIT_SIGNAL:
            err = PpspecError(f"{arm.name}: {r.reason}", exit_code=r.exit_code)
            self.fatal = lambda: self.failed(err)
            self.s.failures.append(f"{arm.name}: {r.reason.splitlines()[0] if r.reason else 'failed'}")
        else:
            self.progress(f"{tag}: {r.reason}")
        return r.exit_code
