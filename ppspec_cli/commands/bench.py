"""`ppspec bench`: does speculation pay at my load? Serve the profile without its drafter and with
each requested num_speculative_tokens (one engine at a time, as `serve` does), drive every
concurrency level with vLLM's benchmark client, check greedy parity, give a verdict."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ppspec_cli.commands.common import progress
from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio
from ppspec_cli.verify.bench import judge
from ppspec_cli.verify.bench import results as res
from ppspec_cli.verify.bench.results import BASELINE, Arm

#: Prompts of the parity pass (one request at a time, per arm).
PARITY_PROMPTS = 16


class _Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


#: Most --repeat: each repeat is one more full pass over the levels.
MAX_REPEAT = 20

#: --sessions: each repeat of every arm in its own engine session, arms interleaved round by round
#: (the machine's drift between sessions lands in the spread the verdict judges), or one session
#: per arm holding all its repeats (fewer engine starts; drift between arms is not in the spread).
PER_REPEAT, PER_ARM = "per-repeat", "per-arm"
SESSIONS = (PER_REPEAT, PER_ARM)


@dataclass(frozen=True)
class Options:
    """`ppspec bench`'s command line (cli.py fills it)."""

    concurrency: str = "1,4,16,32"
    num_prompts: int = 16
    max_tokens: int = 128
    input_len: int = 128
    nst: str | None = None
    out: str | None = None
    json_out: bool = False
    resume: bool = False
    endpoint: str | None = None
    baseline_endpoint: str | None = None
    offline: bool = False
    repeat: int = 2
    allow_mixed: bool = False
    seed: int = 0
    sessions: str = PER_REPEAT


def run(profile: str, o: Options) -> int:
    """Exit code: 0 every run done and parity identical; 1 parity differs, a run is missing, or an
    engine / the load generator failed; 2 usage (and --resume over another host's or version's
    results without --allow-mixed); 128+N interrupted by signal N (finished results kept)."""
    from ppspec_cli.planning.profile import load_profile

    levels = _validate(o)
    prof = load_profile(profile)
    arms = _arms(prof, o.nst, o.endpoint, o.baseline_endpoint)
    if o.endpoint is None:  # bench serves the profile: refused beside a running serve, before anything is written
        from ppspec_cli.verify.bench.beside import refuse_if_busy

        refuse_if_busy(prof)
    fresh = not (Path(o.out) if o.out else default_state_dir(prof.name)).exists()
    out = _state_dir(o.out, prof.name)
    try:
        return _run(profile, o, prof, arms, levels, out, fresh)
    finally:
        out.close()


def _run(profile: str, o: Options, prof, arms: list[Arm], levels: list[int], out, fresh: bool) -> int:
    state = out.path
    per_level = {str(c): res.prompts_at(o.num_prompts, c) for c in levels}
    settings = {
        "concurrency": levels,
        "num_prompts": o.num_prompts,
        "prompts_per_level": per_level,
        "max_tokens": o.max_tokens,
        "input_len": o.input_len,
        "seed": o.seed,
        "repeat": o.repeat,
        "sessions": o.sessions,
        "parity_prompts": min(PARITY_PROMPTS, per_level[str(levels[0])]),
        "parity_source_prompts": per_level[str(levels[0])],
    }
    if not o.resume:
        for name in [a.name for a in arms] + [res.TUNED]:
            out.clear_arm(name)  # by descriptor (verify/bench/outdir.py): no link is followed
    b = _Bench(profile, prof, arms, settings, state, o.offline, None, _identity(o.endpoint is None, prof))
    b.out = out
    if o.resume:
        b.check_kept(o.allow_mixed)
    code = _measure(b)
    doc = b.assemble()
    if code and not b.started and not doc["runs"]:  # stopped before any server answered: nothing to report or resume
        from ppspec_cli.verify.bench.outdir import LOCK_FILE

        out.close()  # the lock released: the directory this run made holds no result
        if fresh and not any(p.is_file() and p.name != LOCK_FILE for p in state.rglob("*")):
            safeio.remove_tree(state, what="the empty results directory")
        progress("nothing was measured: no results written")
        b.show_fatal()
        return code
    _write_outputs(doc, state)
    if o.endpoint is None and doc["runs"]:
        _write_calibration(doc, prof, profile, o.offline, state)
    if o.json_out:
        print(json.dumps(doc, indent=2))
    else:
        from ppspec_cli.io import terminal
        from ppspec_cli.verify.bench.report import print_report

        print_report(doc, terminal.console())
    if code:
        b.show_fatal()  # last, after the report and its warnings: the reason the run stopped
        progress(f"finished results are kept in {state}; continue with the same command and --resume")
        return code
    if not doc["complete"]:
        return 1
    if not doc["parity"]["identical"]:
        progress("parity: the speculative arms' greedy outputs differ from the baseline's (see the report)")
        return 1
    return 0


def _validate(o: Options) -> list[int]:
    """Usage errors (exit 2) before anything starts; the concurrency levels."""
    levels = res.parse_int_list(o.concurrency, "--concurrency", 1, res.MAX_CONCURRENCY)
    if (o.endpoint is None) != (o.baseline_endpoint is None):
        raise PpspecError(
            "--endpoint and --baseline-endpoint go together",
            where="--endpoint",
            fix="give both (the speculative server and the one without speculation), or neither to let bench serve the profile",
        )
    if not 1 <= o.max_tokens <= 1 << 16 or not 1 <= o.input_len <= 1 << 20:
        raise PpspecError(
            "--max-tokens must be in 1..65536 and --input-len in 1..1048576",
            where="--max-tokens / --input-len",
            fix="e.g. --max-tokens 128 --input-len 128",
        )
    if not 1 <= o.num_prompts <= MAX_NUM_PROMPTS:
        raise PpspecError(
            f"--num-prompts must be in 1..{MAX_NUM_PROMPTS}", where="--num-prompts", fix="e.g. --num-prompts 64"
        )
    if o.sessions not in SESSIONS:
        raise PpspecError(
            f"--sessions must be {' or '.join(SESSIONS)}, not {o.sessions[:40]!r}",
            where="--sessions",
            fix=f"--sessions {PER_REPEAT} (the default: drift between engine sessions is in the spread) or --sessions {PER_ARM} (fewer engine starts)",
        )
    if not 1 <= o.repeat <= MAX_REPEAT:
        raise PpspecError(
            f"--repeat must be in 1..{MAX_REPEAT}",
            where="--repeat",
            fix="e.g. --repeat 3 (2 or more: one repeat has no spread to judge)",
        )
    return levels


def _identity(served: bool, prof=None) -> dict:
    """This run's identity, recorded in every result it measures (and checked on --resume)."""
    import uuid

    from ppspec_cli import __version__
    from ppspec_cli.io.netinfo import host_name
    from ppspec_cli.knowledge.engine import installed_vllm

    v = installed_vllm()
    return {
        "run_id": uuid.uuid4().hex[:12],
        "host": host_name(),
        "ppspec_version": __version__,
        "vllm_version": v.version if v else None,
        "profile_digest": res.profile_digest(prof) if prof is not None else None,
        "served": served,
    }


def _arms(prof, nst: str | None, endpoint: str | None, baseline_endpoint: str | None) -> list[Arm]:
    """baseline (no drafter) first, then one arm per num_speculative_tokens."""
    from ppspec_cli.io import redact
    from ppspec_cli.verify.client import normalize_endpoint

    for url in (
        endpoint,
        baseline_endpoint,
    ):  # a `user:password@` endpoint never lands in bench.json, report.md or the terminal
        redact.register_url(url)
    for url in (endpoint, baseline_endpoint):  # checked before anything runs, even when every arm is resumed
        if url is not None:
            normalize_endpoint(url)
    if prof.drafter is None:
        raise PpspecError(
            f"profile {prof.name} names no drafter: there is no speculation to measure",
            where="drafter",
            fix="bench a profile with a `drafter:` section (bench serves it once without the drafter itself)",
        )
    if endpoint is None and (prof.disaggregated or prof.topology.nodes > 1):
        raise PpspecError(
            "bench starts one single-node engine at a time; this profile runs "
            + ("two engines (roles)" if prof.disaggregated else f"{prof.topology.nodes} nodes"),
            where="topology",
            fix="start both servers yourself (with and without the drafter) and pass --endpoint URL --baseline-endpoint URL",
        )
    ks = res.parse_int_list(nst, "--num-speculative-tokens", 1, 64) if nst else [prof.drafter.num_speculative_tokens]
    if endpoint is None:
        return [Arm(BASELINE, False, None)] + [Arm(res.spec_arm_name(k), True, k) for k in ks]
    if len(ks) > 1:
        raise PpspecError(
            "with --endpoint, the speculative server runs one num_speculative_tokens",
            where="--num-speculative-tokens",
            fix="give one value (the server's), or let bench serve the profile",
        )
    return [Arm(BASELINE, False, None, baseline_endpoint), Arm(res.spec_arm_name(ks[0]), True, ks[0], endpoint)]


#: The most prompts one bench level sends: over the ~94 thousand conversations of ShareGPT V3, the
#: largest prompt set vLLM's benchmark client ships a loader for.
MAX_NUM_PROMPTS = 1 << 17


def default_state_dir(name: str) -> Path:
    """~/.cache/ppspec/runs/NAME-bench: bench's results without --out."""
    from ppspec_cli.running.launch import default_run_dir

    return default_run_dir(name).parent / f"{name}-bench"


def _state_dir(out: str | None, name: str):
    """--out DIR, else default_state_dir(NAME): the results and the --resume state, claimed and locked
    (verify/bench/outdir.py: yours alone, one bench at a time, walked by descriptor)."""
    from ppspec_cli.verify.bench.outdir import OutDir

    return OutDir.claim(Path(out) if out else default_state_dir(name))


def _measure(b: "_Bench") -> int:
    """Every arm in turn; a stop signal outside an engine's supervisor (which handles its own)
    ends the run with 128+N, a refused launch or failed load generator with its exit code."""

    def _raise(signum, _frame):
        raise _Interrupted(signum)

    old = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return b.measure_all()
    except _Interrupted as e:
        progress(f"interrupted by {signal.Signals(e.signum).name}: every engine is stopped")
        return 128 + e.signum
    except PpspecError as e:  # a launch refused, a load generator failed: keep what is measured
        from ppspec_cli.commands.common import print_error

        b.failures.append(e.what)
        b.fatal = lambda err=e: print_error(err)
        return e.exit_code
    finally:
        b.close()  # the load generator, whatever happened
        for s, h in old.items():
            signal.signal(s, h)


def _write_outputs(doc: dict, state: Path) -> None:
    from ppspec_cli.verify.bench import report

    made, why = report.plots(doc, state) if doc["runs"] else ([], "no plots: nothing was measured")
    doc["plots"] = [str(p) for p in made]
    if why:
        doc["warnings"].append(why)
    safeio.write_text(state / "bench.json", json.dumps(doc, indent=2) + "\n", what="bench report")
    safeio.write_text(state / "report.md", report.markdown(doc), what="bench report")
    progress(f"wrote {state / 'bench.json'}, {state / 'report.md'}" + (f" and {len(made)} plot(s)" if made else ""))


def _write_calibration(doc: dict, prof, profile_path: str, offline: bool, state: Path) -> None:
    """OUT/calibration.json: the predictor's costs fitted on this run (docs/predict.md), for
    `ppspec plan PROFILE --predict --calibration OUT/calibration.json` on the same hardware and shape."""
    from ppspec_cli.planning.predict_inputs import bench_calibration
    from ppspec_cli.planning.resolve import resolve

    cal, note = bench_calibration(
        doc, resolve(prof, profile_path=profile_path, offline=offline, read_headers=False), str(state / "bench.json")
    )
    if cal is not None:
        safeio.write_text(state / "calibration.json", json.dumps(cal, indent=2) + "\n", what="bench calibration")
        note += f": {state / 'calibration.json'} (`ppspec plan PROFILE --predict --calibration` reads it)"
    progress(note)


class _Bench:
    def __init__(self, profile_path, prof, arms, settings, state: Path, offline, health_timeout, identity: dict):
        self.profile_path, self.prof, self.arms, self.levels = profile_path, prof, list(arms), settings["concurrency"]
        self.settings, self.state, self.offline, self.health_timeout = settings, state, offline, health_timeout
        self.identity = identity
        self.digest = identity.get("profile_digest")
        self.out = None  # the claimed --out (verify/bench/outdir.OutDir), set by run()
        self.level_times: list[float] = []
        self.start_times: list[float] = []
        self.failures: list[str] = []
        self.warnings: list[str] = []
        self.t0 = time.monotonic()
        self.started = False  # a session reached its workload (a server answered): there is something to report
        self.fatal = None  # prints why the run stopped: shown after the report, never before its warnings
        self.lg = None  # the load generator every session shares (_loadgen)

    def show_fatal(self) -> None:
        if self.fatal is not None:
            self.fatal()

    def arm_dir(self, arm: Arm) -> Path:
        return self.state / "arms" / arm.name

    def _kept(self, arm: Arm, c: int, r: int) -> dict | None:
        rec = res.kept_record(self.arm_dir(arm) / res.record_name(c, r), arm, self.digest, c, r)
        return rec if res.level_done(rec, self.settings, arm) else None

    def todo(self, arm: Arm) -> tuple[list[tuple[int, int]], bool]:
        """The (concurrency, repeat) runs still to measure, repeats outermost (so drift spreads over
        the levels), and whether the parity pass is still to do."""
        runs = [(c, r) for r in range(self.settings["repeat"]) for c in self.levels if self._kept(arm, c, r) is None]
        par = res.kept_record(self.arm_dir(arm) / "parity.json", arm, self.digest)
        need_parity = par is None or par.get("settings") != _parity_key(self.settings, arm)
        return runs, need_parity

    def check_kept(self, allow_mixed: bool) -> None:
        """--resume: results measured on another host or with other ppspec/vLLM versions are refused
        (or, with --allow-mixed, kept with a warning)."""
        kept = [
            rec
            for arm in self.arms + [Arm(res.TUNED, True, None)]
            for c in self.levels
            for r in range(self.settings["repeat"])
            if (rec := res.kept_record(self.arm_dir(arm) / res.record_name(c, r), arm, self.digest, c, r)) is not None
        ]
        lines = res.foreign(kept, self.identity)
        if not lines:
            return
        if allow_mixed:
            self.warnings += [f"kept results from another run (--allow-mixed): {line}" for line in lines]
            return
        raise PpspecError(
            f"{self.state} holds results from another machine or version: " + "; ".join(lines[:3]),
            where="--resume",
            fix="measure afresh (drop --resume, or another --out), or pass --allow-mixed to combine them anyway",
        )

    def _eta(self, levels_left: int, arms_left: int) -> str:
        if not self.level_times:
            return ""
        per = sum(self.level_times) / len(self.level_times)
        start = sum(self.start_times) / len(self.start_times) if self.start_times else 30.0
        s = per * levels_left + start * arms_left
        return f", ETA ~{int(s // 60)}m{int(s % 60):02d}s"

    def sessions(self, arms: list[Arm]) -> list[tuple[Arm, list[tuple[int, int]], bool]]:
        """The engine sessions still to run for these arms, in order: (arm, its (concurrency, repeat)
        runs, whether its parity pass runs there). per-repeat: round r serves every arm once for
        repeat r (arms interleaved, so drift between sessions spreads over every arm's samples);
        an arm's parity pass joins its first session. per-arm: one session per arm."""
        todo = {a.name: self.todo(a) for a in arms}
        if self.settings.get("sessions", PER_REPEAT) == PER_ARM:
            return [(a, *todo[a.name]) for a in arms if todo[a.name][0] or todo[a.name][1]]
        parity = {a.name: todo[a.name][1] for a in arms}
        out = []
        for r in range(self.settings["repeat"]):
            for a in arms:
                runs = [x for x in todo[a.name][0] if x[1] == r]
                if runs:
                    out.append((a, runs, parity[a.name]))
                    parity[a.name] = False
        return out + [(a, [], True) for a in arms if parity[a.name]]

    def measure_all(self) -> int:
        """The static arms, then (serving the profile) the tuned arm: the schedule their grid proposes."""
        with_tuned = all(a.endpoint is None for a in self.arms)
        names = [a.name for a in self.arms] + ([res.TUNED] if with_tuned else [])
        plan = self.sessions(self.arms)
        for a in self.arms:
            if not any(x[0] is a for x in plan):
                progress(f"{self._tag(a, names, None)}: measured earlier (kept, --resume)")
        code = self._run_sessions(
            plan, names, tuned_runs=len(self.levels) * self.settings["repeat"] if with_tuned else 0
        )
        if code:
            return code
        if not with_tuned:
            self.warnings.append("with --endpoint bench serves nothing: the schedule is proposed, not measured")
            return 0
        tuned = self.tuned_arm()
        if tuned is None:
            return 0
        self.arms.append(tuned)
        plan = self.sessions([tuned])
        if not plan:
            progress(f"{self._tag(tuned, names, None)}: measured earlier (kept, --resume)")
        return self._run_sessions(plan, names, tuned_runs=0)

    def _tag(self, arm: Arm, names: list[str], runs: list[tuple[int, int]] | None) -> str:
        tag = f"arm {names.index(arm.name) + 1}/{len(names)} {arm.name}"
        reps = sorted({r for _c, r in runs or []})
        if self.settings.get("sessions", PER_REPEAT) == PER_REPEAT and len(reps) == 1 and self.settings["repeat"] > 1:
            tag += f" repeat {reps[0] + 1}/{self.settings['repeat']}"
        return tag

    def _run_sessions(self, plan, names: list[str], tuned_runs: int) -> int:
        """Each planned session in turn (ETA: the runs and engine starts still ahead, the tuned
        arm's counted as a full set while it is not yet derived)."""
        tuned_sessions = (
            (self.settings["repeat"] if self.settings.get("sessions", PER_REPEAT) == PER_REPEAT else 1)
            if tuned_runs
            else 0
        )
        for i, (arm, runs, need_parity) in enumerate(plan):
            later = plan[i + 1 :]
            code = self.measure_arm(
                arm,
                self._tag(arm, names, runs),
                runs,
                need_parity,
                len(later) + tuned_sessions,
                sum(len(x[1]) for x in later) + tuned_runs,
            )
            if code:
                return code
        return 0

    def grid(self) -> dict[tuple[str, int], list[float]]:
        """(arm, concurrency) -> output tokens/s of each kept repeat."""
        out: dict[tuple[str, int], list[float]] = {}
        for arm in self.arms:
            for c in self.levels:
                xs = [
                    rec["output_tokens_per_s"]
                    for r in range(self.settings["repeat"])
                    if (rec := self._kept(arm, c, r)) is not None
                    and isinstance(rec.get("output_tokens_per_s"), (int, float))
                ]
                if xs:
                    out[(arm.name, c)] = xs
        return out

    def _static(self) -> list[tuple[str, int]]:
        return [(a.name, a.num_speculative_tokens or 0) for a in self.arms if a.name != res.TUNED]

    def tuned_arm(self) -> Arm | None:
        """The schedule the static arms' grid proposes (judge.per_level, planning/schedule.derive)."""
        grid = self.grid()
        if not all(judge.complete(grid, a, self.levels) for a, _k in self._static()):
            return None
        sch = judge.proposed_schedule(judge.per_level(grid, self._static(), self.levels))
        if not sch:
            return None
        k = max(e[2] for e in sch) or max(k for _a, k in self._static())
        return Arm(res.TUNED, True, k, None, tuple(tuple(e) for e in sch))

    def _variant(self, arm: Arm):
        p = self.prof
        if not arm.speculation:
            return p.model_copy(update={"drafter": None})
        return p.model_copy(
            update={
                "drafter": p.drafter.model_copy(
                    update={"num_speculative_tokens": arm.num_speculative_tokens, "schedule": arm.schedule_list()}
                )
            }
        )

    def measure_arm(
        self, arm: Arm, tag: str, runs: list[tuple[int, int]], need_parity: bool, arms_left: int, later_runs: int
    ) -> int:
        from ppspec_cli.verify.bench.harness import Stopped

        d = self.out.make_arm(arm.name) if self.out is not None else self.arm_dir(arm)
        what = (
            "without its drafter"
            if not arm.speculation
            else (
                f"with the schedule {arm.schedule_list()}"
                if arm.schedule
                else f"with num_speculative_tokens {arm.num_speculative_tokens}"
            )
        )
        progress(
            f"{tag}: "
            + ("measuring " + arm.endpoint if arm.endpoint else "serving the profile " + what)
            + f"; {len(runs)} run(s) of c={','.join(map(str, sorted({c for c, _r in runs}))) or '-'}"
        )
        prepared = None
        prepare, launch = _serve()
        if arm.endpoint is None:
            from ppspec_cli.commands.render import render_refusal
            from ppspec_cli.preflight.pipeline import Refused

            prepared = prepare(
                self._variant(arm),
                self.profile_path,
                progress=progress,
                offline=self.offline,
                health_timeout=self.health_timeout,
            )
            if isinstance(prepared, Refused):
                self.fatal = lambda: render_refusal(prepared)
                return prepared.verdict.exit_code
        d.mkdir(parents=True, exist_ok=True)
        job = self._job(arm, prepared, runs, need_parity)
        lg = self._loadgen(job)  # the first one imports vLLM while the engine starts
        t_start = time.monotonic()
        done = [0]

        def on_event(ev: dict) -> None:
            e = ev["event"]
            if e == "warmup":
                if prepared is not None:
                    self.start_times.append(time.monotonic() - t_start)
                progress(f"{tag}: warm-up")
            elif e == "level":
                progress(
                    f"{tag}: c={ev['concurrency']} repeat {ev.get('repeat', 0) + 1} ({done[0] + 1}/{len(runs)}){self._eta(len(runs) - done[0] + later_runs, arms_left)}"
                )
            elif e == "level_done":
                done[0] += 1
                self.level_times.append(float(ev.get("seconds") or 0))
                rec = res.load_record(Path(ev["file"])) or {}
                acc = rec.get("acceptance_length")
                progress(
                    f"{tag}: c={ev['concurrency']} done in {ev.get('seconds')}s: {rec.get('output_tokens_per_s') or 0:.1f} output tok/s"
                    + (f", acceptance length {acc:.2f}" if isinstance(acc, (int, float)) else "")
                )
            elif e == "parity":
                progress(f"{tag}: parity pass ({self.settings['parity_prompts']} prompts, one at a time)")

        timeout = 300.0 + 0.5 * max(self.settings["prompts_per_level"].values()) * self.settings["max_tokens"]

        def workload(stop) -> None:
            self.started = True
            try:
                lg.run(job, stop, on_event, timeout)
            except Stopped:
                return
            if need_parity and (d / "parity.json").is_file():
                doc = res.load_record(d / "parity.json") or {}
                doc["settings"] = _parity_key(self.settings, arm)
                safeio.write_text(d / "parity.json", json.dumps(doc, indent=1), what="bench parity outputs")

        idle = False  # the load generator finished its job and waits for the next session's
        try:
            if prepared is None:
                try:
                    workload(lambda: False)
                except PpspecError as e:
                    self.failures.append(f"{arm.name}: {e.what}")
                    raise
                idle = True
                return 0
            r = launch(prepared, progress=progress, workload=workload, stream=False)
            idle = r.exit_code == 0
        finally:
            if not idle or not lg.alive:  # stopped, failed or mid-job: a later session starts a fresh one
                lg.close()
        if r.exit_code != 0:
            if r.error is not None and not isinstance(r.error, PpspecError):
                raise r.error
            if r.exit_code < 128:
                from ppspec_cli.commands.common import print_error

                err = PpspecError(f"{arm.name}: {r.reason}", exit_code=r.exit_code)
                self.fatal = lambda: print_error(err)
                self.failures.append(f"{arm.name}: {r.reason.splitlines()[0] if r.reason else 'failed'}")
            else:
                progress(f"{tag}: {r.reason}")
            return r.exit_code
        return 0

    def _loadgen(self, job: dict):
        """The run's load generator (harness.LoadGen): one process for every session, a new one only
        after the last failed or was stopped. Its log: OUT/loadgen.log."""
        from ppspec_cli.verify.bench.harness import LoadGen

        if self.lg is None or not self.lg.alive:
            env = {"HF_HUB_OFFLINE": "1"} if self.offline or os.path.isdir(job["tokenizer"]) else {}
            self.lg = LoadGen(self.state / "loadgen.log", env)
        return self.lg

    def close(self) -> None:
        if self.lg is not None:
            self.lg.close()

    def _job(self, arm: Arm, prepared, runs: list[tuple[int, int]], need_parity: bool) -> dict:
        from ppspec_cli.verify.client import normalize_endpoint

        p = self.prof
        base = normalize_endpoint(arm.endpoint if arm.endpoint is not None else prepared.spec.url)
        identity = {k: v for k, v in self.identity.items() if k != "served"}
        return {
            "base_url": base,
            "model": p.server.served_model_name or p.name,
            "tokenizer": _tokenizer(p, prepared),
            "runs": [list(x) for x in runs],
            "prompts_per_level": self.settings["prompts_per_level"],
            "max_tokens": self.settings["max_tokens"],
            "input_len": self.settings["input_len"],
            "seed": self.settings["seed"],
            "out_dir": str(self.arm_dir(arm)),
            "arm": arm.name,
            "speculation": arm.speculation,
            "num_speculative_tokens": arm.num_speculative_tokens,
            "schedule": arm.schedule_list(),
            "parity_prompts": self.settings["parity_prompts"] if need_parity else 0,
            "parity_source_prompts": self.settings["parity_source_prompts"],
            "api_key_env": p.server.api_key_env,
            "warmup": bool(runs),
            "identity": identity,
            "served": self.identity.get("served", True),
        }

    def assemble(self) -> dict:
        """bench.json: the runs (median and samples), the judged levels, parity, the recommendation."""
        samples, runs, parity_docs = [], [], {}
        for arm in self.arms:
            for c in self.levels:
                recs = [rec for r in range(self.settings["repeat"]) if (rec := self._kept(arm, c, r)) is not None]
                samples += recs
                if recs:
                    runs.append(res.aggregate(recs))
            parity_docs[arm.name] = res.kept_record(self.arm_dir(arm) / "parity.json", arm, self.digest)
        grid = self.grid()
        static = self._static()
        levels_doc = judge.per_level(grid, static, self.levels)
        d = self.prof.drafter
        incumbent = (
            res.spec_arm_name(d.num_speculative_tokens)
            if d.schedule is None and any(a == res.spec_arm_name(d.num_speculative_tokens) for a, _k in static)
            else None
        )
        tuned = next((a for a in self.arms if a.name == res.TUNED), None)
        choice = judge.choose(grid, static, self.levels, incumbent, tuned.name if tuned else None)
        drift = judge.drift_check(grid, self.levels, tuned.schedule_list() if tuned else None, static)
        recommended = None if drift else (res.TUNED if choice["schedule"] else choice["static"])
        if recommended is not None:
            for lv, env in zip(
                levels_doc, judge.envelope(grid, self.levels, recommended, incumbent, [a.name for a in self.arms])
            ):
                lv["best_arm"] = env["best_arm"]
                lv["envelope"] = env
        missing = [
            f"{a.name} c={c} repeat {r + 1}"
            for a in self.arms
            for c in self.levels
            for r in range(self.settings["repeat"])
            if self._kept(a, c, r) is None
        ]
        warnings = [
            f"{r['arm']} c={r['concurrency']}: {w}" for r in runs for w in dict.fromkeys(r.get("warnings") or [])
        ]
        warnings += [
            f"{r['arm']} c={r['concurrency']}: {r['failed']} request(s) failed" for r in runs if r.get("failed")
        ]
        devices = sorted({str(x.get("device")) for x in samples if x.get("device")})
        if len(devices) > 1:
            warnings.append("results from different devices: " + ", ".join(devices))
        if missing:
            warnings.append(
                "not measured: "
                + ", ".join(missing[:12])
                + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
            )
        warnings += drift
        warnings += self.warnings + self.failures
        ident = {k: v for k, v in self.identity.items() if k != "served"}
        return {
            "schema": res.SCHEMA,
            **ident,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "device": devices[0] if len(devices) == 1 else (devices or None),
            "profile": self.prof.name,
            "profile_path": os.path.abspath(self.profile_path),
            "profile_num_speculative_tokens": d.num_speculative_tokens,
            "settings": self.settings,
            "arms": [a.to_json() for a in self.arms],
            "load_generator": runs[0]["load_generator"] if runs else "vllm bench serve",
            "runs": [res.public_run(r) for r in runs],
            "levels": levels_doc,
            "parity": res.parity(self.arms, parity_docs, samples),
            "recommendation": res.recommendation(
                levels_doc, choice, self.arms, d.num_speculative_tokens, judge.proposed_schedule(levels_doc), drift
            ),
            "complete": not missing and not any(r.get("failed") for r in runs),
            "warnings": warnings,
        }


def _parity_key(settings: dict, arm: Arm | None = None) -> dict:
    key = {k: settings[k] for k in ("max_tokens", "input_len", "seed", "parity_prompts", "parity_source_prompts")}
    if arm is not None and arm.schedule:
        key["schedule"] = arm.schedule_list()
    return key


def _serve():
    """`serve`'s two steps bench runs each arm through (prepare: check, adapter pack, plugin; launch:
    the supervised engine), from the pipeline below the commands: the one place bench reaches them."""
    from ppspec_cli.preflight.pipeline import launch, prepare

    return prepare, launch


def _tokenizer(p, prepared) -> str:
    """The target's tokenizer: the local checkpoint the engine loads (a `demo:` model's built
    folder), else the hub id (read from the HF cache; vLLM's client loads it)."""
    ref = p.target.model
    if ref.startswith("demo:"):
        from ppspec_cli import demo

        return demo.resolve_model_ref(ref)
    if prepared is not None:
        ck = getattr(prepared.r, "target", None)
        if ck is not None and getattr(ck, "source", None) == "local" and getattr(ck, "location", None):
            return os.path.abspath(ck.location)
    return ref
