"""`ppspec bench`: does speculation pay at my load? Serve the profile without its drafter and with
each requested num_speculative_tokens (one engine at a time, as `serve` does), drive every
concurrency level with vLLM's benchmark client, check greedy parity, give a verdict."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from ppspec_cli.commands.common import progress
from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio
from ppspec_cli.verify.bench import results as res
from ppspec_cli.verify.bench.results import BASELINE, Arm

#: Prompts of the parity pass (one request at a time, per arm).
PARITY_PROMPTS = 16


class _Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def run(profile: str, *, concurrency: str, num_prompts: int | None, max_tokens: int, input_len: int, nst: str | None, out: str | None, json_out: bool, resume: bool, endpoint: str | None, baseline_endpoint: str | None, offline: bool, health_timeout: int | None, seed: int = 0) -> int:
    """Exit code: 0 every run done and parity identical; 1 parity differs, a run is missing, or an
    engine / the load generator failed; 2 usage; 128+N interrupted by signal N (finished results kept)."""
    from ppspec_cli.planning.profile import load_profile

    levels = res.parse_int_list(concurrency, "--concurrency", 1, 4096)
    if (endpoint is None) != (baseline_endpoint is None):
        raise PpspecError("--endpoint and --baseline-endpoint go together", where="--endpoint", fix="give both (the speculative server and the one without speculation), or neither to let bench serve the profile")
    if not 1 <= max_tokens <= 1 << 16 or not 1 <= input_len <= 1 << 20:
        raise PpspecError("--max-tokens must be in 1..65536 and --input-len in 1..1048576", where="--max-tokens / --input-len", fix="e.g. --max-tokens 128 --input-len 128")
    n_prompts = num_prompts if num_prompts is not None else max(16, 4 * max(levels))
    if not 1 <= n_prompts <= MAX_NUM_PROMPTS:
        raise PpspecError(f"--num-prompts must be in 1..{MAX_NUM_PROMPTS}", where="--num-prompts", fix="e.g. --num-prompts 64")
    prof = load_profile(profile)
    arms = _arms(prof, nst, endpoint, baseline_endpoint)
    state = _state_dir(out, prof.name)
    settings = {"concurrency": levels, "num_prompts": n_prompts, "max_tokens": max_tokens, "input_len": input_len, "seed": seed, "parity_prompts": min(PARITY_PROMPTS, n_prompts)}
    if not resume:
        for arm in arms:
            safeio.remove_tree(state / "arms" / arm.name, what="the arm's previous results")  # a planted link is unlinked, never followed
    b = _Bench(profile, prof, arms, levels, settings, state, offline, health_timeout)
    code = _measure(b)
    doc = b.assemble()
    _write_outputs(doc, state)
    if json_out:
        print(json.dumps(doc, indent=2))
    else:
        from ppspec_cli.io import terminal
        from ppspec_cli.verify.bench.report import print_report

        print_report(doc, terminal.console())
    if code:
        progress(f"finished results are kept in {state}; continue with the same command and --resume")
        return code
    if not doc["complete"]:
        return 1
    if not doc["parity"]["identical"]:
        progress("parity: the speculative arms' greedy outputs differ from the baseline's (see the report)")
        return 1
    return 0


def _arms(prof, nst: str | None, endpoint: str | None, baseline_endpoint: str | None) -> list[Arm]:
    from ppspec_cli.io import redact

    for url in (endpoint, baseline_endpoint):  # a `user:password@` endpoint never lands in bench.json, report.md or the terminal
        redact.register_url(url)
    """baseline (no drafter) first, then one arm per num_speculative_tokens."""
    if prof.drafter is None:
        raise PpspecError(f"profile {prof.name} names no drafter: there is no speculation to measure", where="drafter", fix="bench a profile with a `drafter:` section (bench serves it once without the drafter itself)")
    if endpoint is None and (prof.disaggregated or prof.topology.nodes > 1):
        raise PpspecError(
            "bench starts one single-node engine at a time; this profile runs " + ("two engines (roles)" if prof.disaggregated else f"{prof.topology.nodes} nodes"),
            where="topology", fix="start both servers yourself (with and without the drafter) and pass --endpoint URL --baseline-endpoint URL",
        )
    ks = res.parse_int_list(nst, "--num-speculative-tokens", 1, 64) if nst else [prof.drafter.num_speculative_tokens]
    if endpoint is None:
        return [Arm(BASELINE, False, None)] + [Arm(res.spec_arm_name(k), True, k) for k in ks]
    if len(ks) > 1:
        raise PpspecError("with --endpoint, the speculative server runs one num_speculative_tokens", where="--num-speculative-tokens", fix="give one value (the server's), or let bench serve the profile")
    return [Arm(BASELINE, False, None, baseline_endpoint), Arm(res.spec_arm_name(ks[0]), True, ks[0], endpoint)]


#: The most prompts one bench level sends: over the ~94 thousand conversations of ShareGPT V3, the
#: largest prompt set vLLM's benchmark client ships a loader for.
MAX_NUM_PROMPTS = 1 << 17


def _state_dir(out: str | None, name: str) -> Path:
    """--out DIR (created), else ~/.cache/ppspec/runs/NAME-bench: the results and the --resume state."""
    from ppspec_cli.running.launch import default_run_dir

    state = Path(out) if out else default_run_dir(name).parent / f"{name}-bench"
    try:
        state.mkdir(parents=True, exist_ok=True)
        if not os.access(state, os.W_OK):
            raise PermissionError(13, "not writable")
    except OSError as e:
        raise PpspecError(f"cannot use {str(state)[:200]} for the results: {e.strerror or e}", where="--out", fix="pass --out DIR, a directory you can write to (it is created)") from None
    return state


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
        from ppspec_cli.commands.common import err_console

        b.failures.append(e.what)
        err_console().print(e.render())
        return e.exit_code
    finally:
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


class _Bench:
    def __init__(self, profile_path, prof, arms, levels, settings, state: Path, offline, health_timeout):
        self.profile_path, self.prof, self.arms, self.levels = profile_path, prof, arms, levels
        self.settings, self.state, self.offline, self.health_timeout = settings, state, offline, health_timeout
        self.level_times: list[float] = []
        self.start_times: list[float] = []
        self.failures: list[str] = []
        self.t0 = time.monotonic()

    def arm_dir(self, arm: Arm) -> Path:
        return self.state / "arms" / arm.name

    def todo(self, arm: Arm) -> tuple[list[int], bool]:
        d = self.arm_dir(arm)
        levels = [c for c in self.levels if not res.level_done(res.load_record(d / f"c{c}.json"), self.settings)]
        par = res.load_record(d / "parity.json")
        need_parity = par is None or par.get("settings") != _parity_key(self.settings)
        return levels, need_parity

    def _eta(self, levels_left: int, arms_left: int) -> str:
        if not self.level_times:
            return ""
        per = sum(self.level_times) / len(self.level_times)
        start = sum(self.start_times) / len(self.start_times) if self.start_times else 30.0
        s = per * levels_left + start * arms_left
        return f", ETA ~{int(s // 60)}m{int(s % 60):02d}s"

    def measure_all(self) -> int:
        plan = [(a, *self.todo(a)) for a in self.arms]
        for i, (arm, levels, need_parity) in enumerate(plan, start=1):
            tag = f"arm {i}/{len(plan)} {arm.name}"
            if not levels and not need_parity:
                progress(f"{tag}: measured earlier (kept, --resume)")
                continue
            arms_left = sum(1 for a, lv, p in plan[i:] if lv or p)
            code = self.measure_arm(arm, tag, levels, need_parity, arms_left, sum(len(lv) for _a, lv, _p in plan[i:]))
            if code:
                return code
        return 0

    def _variant(self, arm: Arm):
        p = self.prof
        if not arm.speculation:
            return p.model_copy(update={"drafter": None})
        return p.model_copy(update={"drafter": p.drafter.model_copy(update={"num_speculative_tokens": arm.num_speculative_tokens})})

    def measure_arm(self, arm: Arm, tag: str, levels: list[int], need_parity: bool, arms_left: int, later_levels: int) -> int:
        from ppspec_cli.verify.bench.harness import LoadGen, Stopped

        d = self.arm_dir(arm)
        d.mkdir(parents=True, exist_ok=True)
        progress(f"{tag}: " + ("measuring " + arm.endpoint if arm.endpoint else "serving the profile " + ("without its drafter" if not arm.speculation else f"with num_speculative_tokens {arm.num_speculative_tokens}")) + f"; levels c={','.join(map(str, levels)) or '-'}")
        prepared = None
        if arm.endpoint is None:
            from ppspec_cli.commands.serve import prepare

            prepared = prepare(self._variant(arm), self.profile_path, offline=self.offline, health_timeout=self.health_timeout)
            if isinstance(prepared, int):
                return prepared
        job = self._job(arm, prepared, levels, need_parity)
        env = {"HF_HUB_OFFLINE": "1"} if self.offline or os.path.isdir(job["tokenizer"]) else {}
        lg = LoadGen(d / "loadgen.log", env)  # imports vLLM while the engine starts
        t_start = time.monotonic()
        done_levels = [0]

        def on_event(ev: dict) -> None:
            e = ev["event"]
            if e == "warmup":
                if prepared is not None:
                    self.start_times.append(time.monotonic() - t_start)
                progress(f"{tag}: warm-up")
            elif e == "level":
                left = len(levels) - done_levels[0]
                progress(f"{tag}: c={ev['concurrency']} ({done_levels[0] + 1}/{len(levels)}){self._eta(left + later_levels, arms_left)}")
            elif e == "level_done":
                done_levels[0] += 1
                self.level_times.append(float(ev.get("seconds") or 0))
                rec = res.load_record(Path(ev["file"])) or {}
                acc = rec.get("acceptance_length")
                progress(f"{tag}: c={ev['concurrency']} done in {ev.get('seconds')}s: {rec.get('output_tokens_per_s') or 0:.1f} output tok/s" + (f", acceptance length {acc:.2f}" if isinstance(acc, (int, float)) else ""))
            elif e == "parity":
                progress(f"{tag}: parity pass ({self.settings['parity_prompts']} prompts, one at a time)")

        timeout = 300.0 + 0.5 * self.settings["num_prompts"] * self.settings["max_tokens"]

        def workload(stop) -> None:
            try:
                lg.run(job, stop, on_event, timeout)
            except Stopped:
                return
            if need_parity and (d / "parity.json").is_file():
                doc = res.load_record(d / "parity.json") or {}
                doc["settings"] = _parity_key(self.settings)
                safeio.write_text(d / "parity.json", json.dumps(doc, indent=1), what="bench parity outputs")

        try:
            if prepared is None:
                try:
                    workload(lambda: False)
                except PpspecError as e:
                    self.failures.append(f"{arm.name}: {e.what}")
                    raise
                return 0
            from ppspec_cli.commands.serve import launch

            r = launch(prepared, workload=workload, stream=False)
        finally:
            lg.close()
        if r.exit_code != 0:
            if r.error is not None and not isinstance(r.error, PpspecError):
                raise r.error
            if r.exit_code < 128:
                print(f"error: {arm.name}: {r.reason}", file=sys.stderr, flush=True)
                self.failures.append(f"{arm.name}: {r.reason.splitlines()[0] if r.reason else 'failed'}")
            else:
                progress(f"{tag}: {r.reason}")
            return r.exit_code
        return 0

    def _job(self, arm: Arm, prepared, levels: list[int], need_parity: bool) -> dict:
        from ppspec_cli.verify.client import normalize_endpoint

        p = self.prof
        if arm.endpoint is not None:
            base = normalize_endpoint(arm.endpoint)
        else:
            base = normalize_endpoint(prepared.spec.url)
        return {
            "base_url": base,
            "model": p.server.served_model_name or p.name,
            "tokenizer": _tokenizer(p, prepared),
            "levels": levels,
            "num_prompts": self.settings["num_prompts"],
            "max_tokens": self.settings["max_tokens"],
            "input_len": self.settings["input_len"],
            "seed": self.settings["seed"],
            "out_dir": str(self.arm_dir(arm)),
            "arm": arm.name,
            "speculation": arm.speculation,
            "num_speculative_tokens": arm.num_speculative_tokens,
            "parity_prompts": self.settings["parity_prompts"] if need_parity else 0,
            "api_key_env": p.server.api_key_env,
            "warmup": bool(levels),
        }

    def assemble(self) -> dict:
        from ppspec_cli import __version__

        runs, parity_docs = [], {}
        for arm in self.arms:
            d = self.arm_dir(arm)
            for c in self.levels:
                rec = res.load_record(d / f"c{c}.json")
                if res.level_done(rec, self.settings):
                    runs.append(rec)
            parity_docs[arm.name] = res.load_record(d / "parity.json")
        sp = res.speedups(self.arms, runs, self.levels)
        missing = [f"{a.name} c={c}" for a in self.arms for c in self.levels if not any(r["arm"] == a.name and r["concurrency"] == c for r in runs)]
        warnings = [f"{r['arm']} c={r['concurrency']}: {w}" for r in runs for w in r.get("warnings") or []]
        warnings += [f"{r['arm']} c={r['concurrency']}: {r['failed']} request(s) failed" for r in runs if r.get("failed")]
        if missing:
            warnings.append("not measured: " + ", ".join(missing))
        warnings += self.failures
        return {
            "schema": res.SCHEMA,
            "profile": self.prof.name,
            "profile_path": os.path.abspath(self.profile_path),
            "settings": self.settings,
            "arms": [a.to_json() for a in self.arms],
            "load_generator": runs[0]["load_generator"] if runs else "vllm bench serve",
            "runs": [res.public_run(r) for r in runs],
            "speedup": sp,
            "parity": res.parity(self.arms, parity_docs, runs),
            "recommendation": res.recommendation(sp, self.prof.drafter.num_speculative_tokens, self.arms),
            "complete": not missing and not any(r.get("failed") for r in runs),
            "warnings": warnings,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "ppspec_version": __version__,
        }


def _parity_key(settings: dict) -> dict:
    return {k: settings[k] for k in ("num_prompts", "max_tokens", "input_len", "seed", "parity_prompts")}


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
