"""`ppspec bench`'s results: the arms, what is already measured (for --resume, one record per
(arm, concurrency, repeat)), the runs as the report shows them (the median and every sample),
greedy parity between arms, and the recommendation's wording (the judgement is judge.py's)."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppspec_cli.errors import PpspecError
from ppspec_cli.planning import schedule
from ppspec_cli.verify.bench import judge

SCHEMA = "ppspec-bench/2"
MAX_RECORD_BYTES = 64 << 20
BASELINE = judge.BASELINE
TUNED = judge.TUNED
#: Each in-flight slot serves at least this many requests per level (requests = max(--num-prompts,
#: MIN_ROUNDS x concurrency)): ramp-up and drain (the first TTFTs, the last stragglers) are then a
#: small share of the level. A GPU level of 2 rounds at c=32 (~1.5 s) moved tokens/s by 5%.
MIN_ROUNDS = 4
#: Highest --concurrency bench accepts (also the top of a derived schedule: planning/schedule.TOP).
MAX_CONCURRENCY = schedule.TOP


@dataclass(frozen=True)
class Arm:
    """One engine configuration: the profile without its drafter, with k speculative tokens, or
    (the tuned arm) with the schedule bench derived."""

    name: str
    speculation: bool
    num_speculative_tokens: int | None
    endpoint: str | None = None  # --endpoint / --baseline-endpoint: a server already running
    schedule: tuple[tuple[int, int, int], ...] | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "speculation": self.speculation,
            "num_speculative_tokens": self.num_speculative_tokens,
            "endpoint": self.endpoint,
            "schedule": [list(e) for e in self.schedule] if self.schedule else None,
        }

    def schedule_list(self) -> list[list[int]] | None:
        return [list(e) for e in self.schedule] if self.schedule else None


def prompts_at(num_prompts: int, c: int) -> int:
    """Requests measured at concurrency c: at least --num-prompts, at least MIN_ROUNDS per slot."""
    return max(num_prompts, MIN_ROUNDS * c)


def record_name(c: int, r: int) -> str:
    return f"c{c}-r{r}.json"


def spec_arm_name(k: int | None) -> str:
    return f"spec-k{k}" if k is not None else "spec"


#: The most values one list option takes (--concurrency: each level is a measured run per arm and
#: repeat; the report, verdict and plots grow with them).
MAX_LIST = 64


def parse_int_list(text: str, what: str, lo: int, hi: int) -> list[int]:
    """`1,4,16` -> [1, 4, 16] (sorted, without repeats); a clear usage error otherwise."""
    out = set()
    if text.count(",") >= MAX_LIST:
        raise PpspecError(
            f"{what} lists {text.count(',') + 1} values; bench takes at most {MAX_LIST}",
            where=what,
            fix=f"e.g. {what} 1,4,16,32",
        )
    for part in text.split(","):
        p = part.strip()
        if not (p.isascii() and p.isdigit()) or not (lo <= int(p) <= hi):
            raise PpspecError(
                f"{what} {text[:60]!r}: {p[:20]!r} is not a whole number in {lo}..{hi}",
                where=what,
                fix=f"e.g. {what} 1,4,16",
            )
        out.add(int(p))
    if not out:
        raise PpspecError(f"{what} is empty", where=what, fix=f"e.g. {what} 1,4")
    return sorted(out)


def settings_match(rec: dict, settings: dict) -> bool:
    c = rec.get("concurrency")
    return (
        isinstance(c, int)
        and rec.get("num_prompts") == prompts_at(settings["num_prompts"], c)
        and all(rec.get(k) == settings[k] for k in ("max_tokens", "input_len", "seed"))
    )


def load_record(path: Path) -> dict | None:
    """A finished level's (or parity pass's) record, or None when absent. A record that is there
    but not of its typed shape (verify/bench/schema.py) is one error naming the file: its text
    would otherwise reach the report, and its figures the verdict."""
    from ppspec_cli.io import records
    from ppspec_cli.verify.bench.schema import model_for

    if not os.path.lexists(path):
        return None
    _, doc = records.load(
        path,
        model_for(path.name),
        what="saved bench result",
        limit=MAX_RECORD_BYTES,
        fix=f"delete {path} (that level is measured again), or run without --resume",
    )
    return doc


def profile_digest(prof: Any) -> str:
    """What a record's figures depend on in the profile, as a digest: everything but its description
    and the drafter's num_speculative_tokens and schedule (each arm's own, recorded beside it)."""
    import hashlib
    import json

    doc = prof.model_dump(mode="json", exclude={"description"})
    if isinstance(doc.get("drafter"), dict):
        doc["drafter"] = {k: v for k, v in doc["drafter"].items() if k not in ("num_speculative_tokens", "schedule")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def identity_problem(rec: dict, arm: Arm, digest: str | None, c: int | None = None, r: int | None = None) -> str | None:
    """How a saved record's identity differs from the place it was found in (this profile, this
    arm, and for a level record its concurrency and repeat), or None when it is this run's to keep.
    A record measured for another profile, arm or level is never this run's, --allow-mixed or not."""
    want: dict[str, Any] = {"arm": arm.name, "profile_digest": digest}
    if c is not None:
        want |= {"concurrency": c, "repeat": r, "speculation": arm.speculation}
        if arm.num_speculative_tokens is not None and not arm.schedule:
            want["num_speculative_tokens"] = arm.num_speculative_tokens if arm.speculation else None
    diffs = [f"{k} {rec.get(k)!r} (here: {v!r})" for k, v in want.items() if rec.get(k) != v]
    return "; ".join(diffs) if diffs else None


def kept_record(path: Path, arm: Arm, digest: str | None, c: int | None = None, r: int | None = None) -> dict | None:
    """A saved record (load_record) that belongs where it was found; one error naming the file when
    it names another profile, arm or level (a copied, moved or edited file would otherwise be mixed
    into this run's figures and recommendation)."""
    rec = load_record(path)
    if rec is None:
        return None
    why = identity_problem(rec, arm, digest, c, r)
    if why is not None:
        raise PpspecError(
            f"saved bench result {path} is not this run's: {why}",
            where="--resume",
            fix=f"delete {path} (that level is measured again), or measure afresh without --resume (or into another "
            "--out)",
        )
    return rec


def level_done(rec: dict | None, settings: dict, arm: Arm | None = None) -> bool:
    """A kept record counts when measured with the same settings (and, for the tuned arm, the same schedule)."""
    if rec is None or not settings_match(rec, settings) or not (rec.get("completed") or 0) > 0:
        return False
    return arm is None or rec.get("schedule") == arm.schedule_list()


# -- parity ------------------------------------------------------------------------------------


def _first_token_diff(a: list, b: list) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _pass_check(arm: Arm, base: dict, doc: dict) -> dict:
    b_out, s_out = base.get("outputs") or [], doc.get("outputs") or []
    n = min(len(b_out), len(s_out))
    by_tokens = all(o.get("token_ids") is not None for o in b_out[:n] + s_out[:n])
    diffs = []
    for bo, so in zip(b_out, s_out):
        if by_tokens:
            if bo["token_ids"] != so["token_ids"]:
                diffs.append({"prompt": bo["index"], "token": _first_token_diff(bo["token_ids"], so["token_ids"])})
        elif bo.get("text") != so.get("text"):
            diffs.append({"prompt": bo["index"], "token": None})
    if n == 0 or len(b_out) != len(s_out):
        diffs.append(
            {"prompt": None, "token": None, "why": f"{len(s_out)} outputs against the baseline's {len(b_out)}"}
        )
    return {
        "arm": arm.name,
        "pass": "tokens" if by_tokens else "text",
        "prompts": n,
        "identical": not diffs,
        "first_difference": diffs[0] if diffs else None,
        "differing_prompts": len(diffs),
    }


def parity(arms: list[Arm], parity_docs: dict[str, dict | None], samples: list[dict]) -> dict:
    """Greedy outputs of every speculative arm against the baseline's: the parity pass's token ids
    (one request at a time), and the texts of every load run (each repeat) against the baseline's
    at the same concurrency. `status`: identical, differs, incomplete (some compared, some arm not
    measured) or not compared (nothing was)."""
    base = parity_docs.get(BASELINE)
    checks: list[dict] = []
    missing = []
    for arm in arms:
        if not arm.speculation:
            continue
        doc = parity_docs.get(arm.name)
        if base is None or doc is None:
            missing.append(arm.name)
            continue
        checks.append(_pass_check(arm, base, doc))
    # the load runs: the same seeded prompts at a level, so the texts compare between arms
    load = []
    base_texts: dict[int, list] = {}
    for r in samples:
        if not r.get("speculation") and r.get("generated_texts"):
            base_texts.setdefault(r["concurrency"], r["generated_texts"])
    for r in samples:
        bt, st = base_texts.get(r["concurrency"]), r.get("generated_texts")
        if not r.get("speculation") or not bt or not st:
            continue
        diff = [i for i, (x, y) in enumerate(zip(bt, st)) if x != y]
        load.append(
            {
                "arm": r["arm"],
                "concurrency": r["concurrency"],
                "repeat": r.get("repeat", 0),
                "requests": min(len(bt), len(st)),
                "identical": not diff and len(bt) == len(st),
                "first_difference": diff[0] if diff else None,
            }
        )
    differs = any(not c["identical"] for c in checks) or any(not x["identical"] for x in load)
    if differs:
        status = "differs"
    elif not checks:
        status = "not compared"
    else:
        status = "incomplete" if missing else "identical"
    return {
        "identical": status == "identical",
        "status": status,
        "checks": checks,
        "load_runs": load,
        "missing": missing,
    }


# -- runs --------------------------------------------------------------------------------------

#: Figures a run shows as the median of its repeats (dicts: per key).
_MEDIAN_KEYS = (
    "output_tokens_per_s",
    "request_throughput",
    "duration_s",
    "acceptance_length",
    "acceptance_rate",
    "vllm_acceptance_length",
    "vllm_acceptance_rate",
)
_MEDIAN_DICTS = ("tpot_ms", "itl_ms", "ttft_ms", "e2el_ms")
#: What each entry of a run's `samples` keeps.
_SAMPLE_KEYS = (
    "repeat",
    "output_tokens_per_s",
    "request_throughput",
    "duration_s",
    "tpot_ms",
    "itl_ms",
    "ttft_ms",
    "e2el_ms",
    "acceptance_length",
    "acceptance_rate",
    "per_position_acceptance",
    "completed",
    "failed",
    "measured_at",
    "run_id",
    "host",
    "device",
    "ppspec_version",
    "vllm_version",
    "file",
)


def _median(xs: list) -> float | None:
    nums = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return statistics.median(nums) if nums else None


def aggregate(recs: list[dict]) -> dict[str, Any]:
    """One (arm, concurrency): the first repeat's record (settings, arguments, acceptance detail)
    with every figure replaced by the median over the repeats, `samples` (one entry per repeat) and
    `spread` (output tokens/s: median, min, max, n)."""
    recs = sorted(recs, key=lambda r: r.get("repeat", 0))
    out = {k: v for k, v in recs[0].items() if k != "generated_texts"}
    for k in _MEDIAN_KEYS:
        out[k] = _median([r.get(k) for r in recs])
    for k in _MEDIAN_DICTS:
        keys = {kk for r in recs for kk in (r.get(k) or {})}
        out[k] = {kk: _median([(r.get(k) or {}).get(kk) for r in recs]) for kk in sorted(keys)}
    pos = [r.get("per_position_acceptance") for r in recs if r.get("per_position_acceptance")]
    if pos and all(len(p) == len(pos[0]) for p in pos):
        out["per_position_acceptance"] = [statistics.median(col) for col in zip(*pos)]
    out["completed"] = sum(r.get("completed") or 0 for r in recs)
    out["failed"] = sum(r.get("failed") or 0 for r in recs)
    out["repeats"] = len(recs)
    out["samples"] = [{k: r.get(k) for k in _SAMPLE_KEYS if k in r} for r in recs]
    out["spread"] = judge.spread(
        r["output_tokens_per_s"] for r in recs if isinstance(r.get("output_tokens_per_s"), (int, float))
    )
    out["warnings"] = [w for r in recs for w in r.get("warnings") or []]
    return out


def public_run(rec: dict) -> dict[str, Any]:
    """A level's record as the JSON report shows it (without the generated texts)."""
    return {k: v for k, v in rec.items() if k != "generated_texts"}


# -- identity ----------------------------------------------------------------------------------

#: What must agree between kept results and this run for --resume to mix them.
IDENTITY_KEYS = ("host", "ppspec_version", "vllm_version")


def foreign(records: list[dict], identity: dict) -> list[str]:
    """Kept records measured elsewhere or with other versions: one line per distinct origin."""
    seen = []
    for r in records:
        diff = {k: r.get(k) for k in IDENTITY_KEYS if r.get(k) != identity.get(k)}
        if diff:
            line = (
                f"{r.get('arm')} c={r.get('concurrency')} (run {r.get('run_id') or '?'}, "
                f"{r.get('measured_at') or 'time unknown'}): "
                + ", ".join(f"{k} {v!r} (this run: {identity.get(k)!r})" for k, v in diff.items())
            )
            key = tuple(sorted(diff.items(), key=str))
            if key not in [k for k, _l in seen]:
                seen.append((key, line))
    return [line for _k, line in seen]


# -- recommendation ------------------------------------------------------------------------------


def _label(arm: Arm | None) -> str:
    if arm is None:
        return "?"
    if not arm.speculation:
        return "no speculation"
    if arm.schedule:
        return f"the schedule {arm.schedule_list()}"
    return f"num_speculative_tokens {arm.num_speculative_tokens}"


def _fmt_ratio(r: dict | None) -> str:
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})" if r else "-"


def recommendation(
    levels_doc: list[dict],
    choice: dict,
    arms: list[Arm],
    profile_k: int | None,
    proposed: list[list[int]] | None,
    drift: list[str] | None = None,
) -> dict:
    """The profile change (only where a difference is significant), the schedule, the crossover.

    `drift`: judge.drift_check's warnings. A run whose drift check fired recommends nothing
    (`configuration`, `profile_change` null, `changes_profile` false) and says why in `withheld`:
    its differences may be the machine's, not the configurations'."""
    by_name = {a.name: a for a in arms}
    judged = [lv for lv in levels_doc if lv["verdict"] is not None]
    per_level = ", ".join(f"c={lv['concurrency']} {lv['verdict']} {_fmt_ratio(lv['speedup'])}" for lv in judged)
    tuned = by_name.get(TUNED)
    out: dict[str, Any] = {
        "configuration": None,
        "speculate": None,
        "num_speculative_tokens": None,
        "schedule": tuned.schedule_list() if tuned else proposed,
        "schedule_measured": tuned is not None,
        "schedule_recommended": bool(choice.get("schedule")),
        "changes_profile": False,
        "profile_change": None,
        "crossover_concurrency": max(
            (lv["concurrency"] for lv in judged if lv["verdict"] == judge.FASTER), default=None
        ),
        "highest_measured": max((lv["concurrency"] for lv in judged), default=None),
        "summary": None,
        "withheld": None,
    }
    static = by_name.get(choice.get("static") or "")
    if static is None:
        out["summary"] = "nothing to compare: an arm lacks a level"
        return out
    if drift:
        out["schedule_recommended"] = False
        out["withheld"] = (
            f"the machine drifted between engine sessions ({len(drift)} level(s): the tuned arm and the static arm "
            "serving the same k measured apart), so this run's differences may be the machine's: rerun bench on a "
            "quieter machine"
        )
        out["summary"] = f"speculation against none: {per_level or 'not judged'}; no recommendation: {out['withheld']}"
        return out
    rec = tuned if choice.get("schedule") else static
    out["configuration"] = rec.name
    out["speculate"] = rec.speculation
    out["num_speculative_tokens"] = rec.num_speculative_tokens
    if rec.schedule:
        out["changes_profile"] = True
        out["profile_change"] = (
            f"drafter.schedule: {rec.schedule_list()} with drafter.num_speculative_tokens: {rec.num_speculative_tokens}"
        )
        why = "the schedule beats every static arm beyond the noise"
    elif not rec.speculation:
        out["changes_profile"] = True
        out["profile_change"] = "delete the `drafter:` section (serve without speculation)"
        why = "no speculation: " + (
            "it beats the profile's setting beyond the noise" if choice.get("moved") else "the best measured"
        )
    elif rec.num_speculative_tokens == profile_k:
        out["profile_change"] = f"keep drafter.num_speculative_tokens: {profile_k}"
        why = "no measured configuration beats the profile's own beyond the noise"
    else:
        out["changes_profile"] = True
        out["profile_change"] = f"drafter.num_speculative_tokens: {rec.num_speculative_tokens}"
        why = (
            f"{_label(rec)} beats the profile's setting beyond the noise"
            if choice.get("moved") and profile_k is not None and by_name.get(spec_arm_name(profile_k))
            else f"{_label(rec)}: the best measured (the profile's k {profile_k} was not measured)"
        )
    out["summary"] = f"speculation against none: {per_level or 'not judged'}; recommended: {_label(rec)} ({why})"
    return out
