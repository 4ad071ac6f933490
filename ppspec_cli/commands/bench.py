"""`ppspec bench`: does speculation pay at my load? Serve the profile without its drafter and with
each requested num_speculative_tokens (one engine at a time, as `serve` does), drive every
concurrency level with vLLM's benchmark client, check greedy parity, give a verdict."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

from ppspec_cli.commands.common import print_error, progress
from ppspec_cli.commands.render import render_refusal
from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, PpspecError, exit_for_signal
from ppspec_cli.io import safeio
from ppspec_cli.operation.bench import Driver
from ppspec_cli.verify.bench import results as res
from ppspec_cli.verify.bench import session
from ppspec_cli.verify.bench.outdir import LOCK_FILE, OutDir
from ppspec_cli.verify.bench.session import PER_ARM, PER_REPEAT, SESSIONS, Session

#: Prompts of the parity pass (one request at a time, per arm).
PARITY_PROMPTS = 16


class _Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


#: Most --repeat: each repeat is one more full pass over the levels.
MAX_REPEAT = 20


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
    arms = session.arms_for(prof, o.nst, o.endpoint, o.baseline_endpoint)
    if o.endpoint is None:  # bench serves the profile: refused beside a running serve, before anything is written
        from ppspec_cli.verify.bench.beside import refuse_if_busy

        refuse_if_busy(prof)
    fresh = not (Path(o.out) if o.out else session.default_state_dir(prof.name)).exists()
    out = session.state_dir(o.out, prof.name)
    try:
        return _run(profile, o, prof, arms, levels, out, fresh)
    finally:
        out.close()


def _settings(o: Options, levels: list[int]) -> dict:
    per_level = {str(c): res.prompts_at(o.num_prompts, c) for c in levels}
    return {
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


def _run(profile: str, o: Options, prof, arms: list, levels: list[int], out: OutDir, fresh: bool) -> int:
    state = out.path
    if not o.resume:
        for name in [a.name for a in arms] + [res.TUNED]:
            out.clear_arm(name)  # by descriptor (verify/bench/outdir.py): no link is followed
    b = Session(profile, prof, arms, _settings(o, levels), state, session.identity(o.endpoint is None, prof), out)
    if o.resume:
        b.check_kept(o.allow_mixed)
    driver = Driver(b, render_refusal, progress, offline=o.offline, failed=print_error)
    code = _measure(driver)
    doc = b.assemble()
    if code and not driver.started and not doc["runs"]:  # stopped before any server answered: nothing to report
        out.close()  # the lock released: the directory this run made holds no result
        if fresh and not any(p.is_file() and p.name != LOCK_FILE for p in state.rglob("*")):
            safeio.remove_tree(state, what="the empty results directory")
        progress("nothing was measured: no results written")
        driver.show_fatal()
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
        driver.show_fatal()  # last, after the report and its warnings: the reason the run stopped
        progress(f"finished results are kept in {state}; continue with the same command and --resume")
        return code
    if not doc["complete"]:
        return EXIT_REFUSED
    if not doc["parity"]["identical"]:
        progress("parity: the speculative arms' greedy outputs differ from the baseline's (see the report)")
        return EXIT_REFUSED
    return EXIT_OK


def _validate(o: Options) -> list[int]:
    """Usage errors (exit 2) before anything starts; the concurrency levels."""
    levels = res.parse_int_list(o.concurrency, "--concurrency", 1, res.MAX_CONCURRENCY)
    if (o.endpoint is None) != (o.baseline_endpoint is None):
        raise PpspecError(
            "--endpoint and --baseline-endpoint go together",
            where="--endpoint",
            fix="give both (the speculative server and the one without speculation), or neither to let bench serve "
            "the profile",
        )
    if not 1 <= o.max_tokens <= 1 << 16 or not 1 <= o.input_len <= 1 << 20:
        raise PpspecError(
            "--max-tokens must be in 1..65536 and --input-len in 1..1048576",
            where="--max-tokens / --input-len",
            fix="e.g. --max-tokens 128 --input-len 128",
        )
    if not 1 <= o.num_prompts <= session.MAX_NUM_PROMPTS:
        raise PpspecError(
            f"--num-prompts must be in 1..{session.MAX_NUM_PROMPTS}", where="--num-prompts", fix="e.g. --num-prompts 64"
        )
    if o.sessions not in SESSIONS:
        raise PpspecError(
            f"--sessions must be {' or '.join(SESSIONS)}, not {o.sessions[:40]!r}",
            where="--sessions",
            fix=f"--sessions {PER_REPEAT} (the default: drift between engine sessions is in the spread) or "
            f"--sessions {PER_ARM} (fewer engine starts)",
        )
    if not 1 <= o.repeat <= MAX_REPEAT:
        raise PpspecError(
            f"--repeat must be in 1..{MAX_REPEAT}",
            where="--repeat",
            fix="e.g. --repeat 3 (2 or more: one repeat has no spread to judge)",
        )
    return levels


def _measure(driver: Driver) -> int:
    """Every arm in turn; a stop signal outside an engine's supervisor (which handles its own)
    ends the run with 128+N, a refused launch or failed load generator with its exit code."""

    def _raise(signum, _frame):
        raise _Interrupted(signum)

    old = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return driver.measure_all()
    except _Interrupted as e:
        progress(f"interrupted by {signal.Signals(e.signum).name}: every engine is stopped")
        return exit_for_signal(e.signum)
    except PpspecError as e:  # a launch refused, a load generator failed: keep what is measured
        driver.fail(e)
        return e.exit_code
    finally:
        driver.close()  # the load generator, whatever happened
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
    from ppspec_cli import operation
    from ppspec_cli.planning.predict_inputs import bench_calibration

    o = operation.run(operation.Operation("plan", profile_path, offline=offline, profile=prof, read_headers=False))
    cal, note = bench_calibration(doc, o.judgment.resolved, str(state / "bench.json"))
    if cal is not None:
        safeio.write_text(state / "calibration.json", json.dumps(cal, indent=2) + "\n", what="bench calibration")
        note += f": {state / 'calibration.json'} (`ppspec plan PROFILE --predict --calibration` reads it)"
    progress(note)
