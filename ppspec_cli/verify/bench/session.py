"""One bench run's sessions: the arms and their kept results (resume), the engine sessions still
to run (per repeat or per arm), the load generator's job per session, the tuned arm the static
arms' grid proposes, and bench.json assembled from what was measured. Serving each session is the
operation layer's (operation/bench.py); the command parses, writes and renders (commands/bench.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ppspec_cli.errors import PpspecError
from ppspec_cli.verify.bench import judge
from ppspec_cli.verify.bench import results as res
from ppspec_cli.verify.bench.outdir import OutDir
from ppspec_cli.verify.bench.results import BASELINE, Arm

#: --sessions: each repeat of every arm in its own engine session, arms interleaved round by round
#: (the machine's drift between sessions lands in the spread the verdict judges), or one session
#: per arm holding all its repeats (fewer engine starts; drift between arms is not in the spread).
PER_REPEAT, PER_ARM = "per-repeat", "per-arm"
SESSIONS = (PER_REPEAT, PER_ARM)


#: The most prompts one bench level sends: over the ~94 thousand conversations of ShareGPT V3, the
#: largest prompt set vLLM's benchmark client ships a loader for.
MAX_NUM_PROMPTS = 1 << 17


def identity(served: bool, prof=None) -> dict:
    """This run's identity, recorded in every result it measures (and checked on --resume); the
    profile's digest (results.profile_digest) ties each record to the profile it measured."""
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


def arms_for(prof, nst: str | None, endpoint: str | None, baseline_endpoint: str | None) -> list[Arm]:
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
            fix="start both servers yourself (with and without the drafter) and pass --endpoint URL "
            "--baseline-endpoint URL",
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


def default_state_dir(name: str) -> Path:
    """~/.cache/ppspec/runs/NAME-bench: bench's results without --out."""
    from ppspec_cli.running.serve.rundir import default_run_dir

    return default_run_dir(name).parent / f"{name}-bench"


def state_dir(out: str | None, name: str) -> OutDir:
    """--out DIR, else default_state_dir(NAME): the results and the --resume state, claimed and locked
    (verify/bench/outdir.py: yours alone, one bench at a time, walked by descriptor)."""
    return OutDir.claim(Path(out) if out else default_state_dir(name))


class Session:
    """The state of one bench run (its arms, settings, results directory and identity) and what is
    decided from the results kept there."""

    def __init__(
        self, profile_path: str, prof, arms, settings: dict, state: Path, identity: dict, out: OutDir | None = None
    ):
        self.profile_path, self.prof, self.arms, self.levels = profile_path, prof, list(arms), settings["concurrency"]
        self.settings, self.state, self.identity = settings, state, identity
        self.digest = identity.get("profile_digest")
        self.out = out  # the claimed --out (verify/bench/outdir.OutDir): arms are made and cleared by descriptor
        self.level_times: list[float] = []
        self.start_times: list[float] = []
        self.failures: list[str] = []
        self.warnings: list[str] = []
        #: Where the session's progress lines go (the command's stderr line writer).
        self.progress: Callable[[str], None] = lambda _line: None

    def arm_dir(self, arm: Arm) -> Path:
        return self.state / "arms" / arm.name

    def make_arm_dir(self, arm: Arm) -> Path:
        """The arm's results directory, created (by descriptor under a claimed --out)."""
        if self.out is not None:
            return self.out.make_arm(arm.name)
        d = self.arm_dir(arm)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def kept(self, arm: Arm, c: int, r: int) -> dict | None:
        rec = res.kept_record(self.arm_dir(arm) / res.record_name(c, r), arm, self.digest, c, r)
        return rec if res.level_done(rec, self.settings, arm) else None

    def parity_doc(self, arm: Arm) -> dict | None:
        return res.kept_record(self.arm_dir(arm) / "parity.json", arm, self.digest)

    def todo(self, arm: Arm) -> tuple[list[tuple[int, int]], bool]:
        """The (concurrency, repeat) runs still to measure, repeats outermost (so drift spreads over
        the levels), and whether the parity pass is still to do."""
        runs = [(c, r) for r in range(self.settings["repeat"]) for c in self.levels if self.kept(arm, c, r) is None]
        par = self.parity_doc(arm)
        need_parity = par is None or par.get("settings") != parity_key(self.settings, arm)
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

    def eta(self, levels_left: int, arms_left: int) -> str:
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

    def tag(self, arm: Arm, names: list[str], runs: list[tuple[int, int]] | None) -> str:
        tag = f"arm {names.index(arm.name) + 1}/{len(names)} {arm.name}"
        reps = sorted({r for _c, r in runs or []})
        if self.settings.get("sessions", PER_REPEAT) == PER_REPEAT and len(reps) == 1 and self.settings["repeat"] > 1:
            tag += f" repeat {reps[0] + 1}/{self.settings['repeat']}"
        return tag

    def grid(self) -> dict[tuple[str, int], list[float]]:
        """(arm, concurrency) -> output tokens/s of each kept repeat."""
        out: dict[tuple[str, int], list[float]] = {}
        for arm in self.arms:
            for c in self.levels:
                xs = [
                    rec["output_tokens_per_s"]
                    for r in range(self.settings["repeat"])
                    if (rec := self.kept(arm, c, r)) is not None
                    and isinstance(rec.get("output_tokens_per_s"), (int, float))
                ]
                if xs:
                    out[(arm.name, c)] = xs
        return out

    def static(self) -> list[tuple[str, int]]:
        return [(a.name, a.num_speculative_tokens or 0) for a in self.arms if a.name != res.TUNED]

    def tuned_arm(self) -> Arm | None:
        """The schedule the static arms' grid proposes (judge.per_level, planning/schedule.derive)."""
        grid = self.grid()
        if not all(judge.complete(grid, a, self.levels) for a, _k in self.static()):
            return None
        sch = judge.proposed_schedule(judge.per_level(grid, self.static(), self.levels))
        if not sch:
            return None
        k = max(e[2] for e in sch) or max(k for _a, k in self.static())
        return Arm(res.TUNED, True, k, None, tuple(tuple(e) for e in sch))

    def variant(self, arm: Arm):
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

    def on_event(
        self, tag: str, runs: list, done: list[int], t_start: float, served: bool, later: int, arms_left: int, ev: dict
    ) -> None:
        """One event of the load generator, as a progress line (and the timings the ETA reads)."""
        e = ev["event"]
        if e == "warmup":
            if served:
                self.start_times.append(time.monotonic() - t_start)
            self.progress(f"{tag}: warm-up")
        elif e == "level":
            self.progress(
                f"{tag}: c={ev['concurrency']} repeat {ev.get('repeat', 0) + 1} "
                f"({done[0] + 1}/{len(runs)}){self.eta(len(runs) - done[0] + later, arms_left)}"
            )
        elif e == "level_done":
            done[0] += 1
            self.level_times.append(float(ev.get("seconds") or 0))
            rec = res.load_record(Path(ev["file"])) or {}
            acc = rec.get("acceptance_length")
            self.progress(
                f"{tag}: c={ev['concurrency']} done in {ev.get('seconds')}s: "
                f"{rec.get('output_tokens_per_s') or 0:.1f} output tok/s"
                + (f", acceptance length {acc:.2f}" if isinstance(acc, (int, float)) else "")
            )
        elif e == "parity":
            self.progress(f"{tag}: parity pass ({self.settings['parity_prompts']} prompts, one at a time)")

    def job(self, arm: Arm, prepared, runs: list[tuple[int, int]], need_parity: bool) -> dict:
        from ppspec_cli.verify.client import normalize_endpoint

        p = self.prof
        base = normalize_endpoint(arm.endpoint if arm.endpoint is not None else prepared.launch.url)
        identity = {k: v for k, v in self.identity.items() if k != "served"}
        return {
            "base_url": base,
            "model": p.server.served_model_name or p.name,
            "tokenizer": tokenizer(p, prepared),
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
                recs = [rec for r in range(self.settings["repeat"]) if (rec := self.kept(arm, c, r)) is not None]
                samples += recs
                if recs:
                    runs.append(res.aggregate(recs))
            parity_docs[arm.name] = self.parity_doc(arm)
        grid = self.grid()
        static = self.static()
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
            if self.kept(a, c, r) is None
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


def parity_key(settings: dict, arm: Arm | None = None) -> dict:
    key = {k: settings[k] for k in ("max_tokens", "input_len", "seed", "parity_prompts", "parity_source_prompts")}
    if arm is not None and arm.schedule:
        key["schedule"] = arm.schedule_list()
    return key


def arm_line(arm: Arm) -> str:
    """What one arm measures, in the progress line."""
    if arm.endpoint:
        return "measuring " + arm.endpoint
    if not arm.speculation:
        return "serving the profile without its drafter"
    if arm.schedule:
        return f"serving the profile with the schedule {arm.schedule_list()}"
    return f"serving the profile with num_speculative_tokens {arm.num_speculative_tokens}"


def tokenizer(p, prepared) -> str:
    """The target's tokenizer: the local checkpoint the engine loads (a `demo:` model's built
    folder), else the hub id (read from the HF cache; vLLM's client loads it)."""
    ref = p.target.model
    if ref.startswith("demo:"):
        from ppspec_cli import demo

        return demo.resolve_model_ref(ref)
    if prepared is not None:
        ck = getattr(prepared.resolved, "target", None)
        if ck is not None and getattr(ck, "source", None) == "local" and getattr(ck, "location", None):
            return os.path.abspath(ck.location)
    return ref
