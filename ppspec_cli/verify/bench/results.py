"""`ppspec bench`'s results: the arms, what is already measured (for --resume), greedy parity
between arms, and the verdict (speed-up per concurrency, crossover, best num_speculative_tokens,
the one-line profile change)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppspec_cli.errors import PpspecError

SCHEMA = "ppspec-bench/1"
#: Speculation "pays" at a level when its best arm's output tokens/s exceeds the baseline's by this factor.
PAYS_ABOVE = 1.0
MAX_RECORD_BYTES = 64 << 20
BASELINE = "baseline"


@dataclass(frozen=True)
class Arm:
    """One engine configuration: the profile without its drafter, or with k speculative tokens."""

    name: str
    speculation: bool
    num_speculative_tokens: int | None
    endpoint: str | None = None  # --endpoint / --baseline-endpoint: a server already running

    def to_json(self) -> dict:
        return {"name": self.name, "speculation": self.speculation, "num_speculative_tokens": self.num_speculative_tokens, "endpoint": self.endpoint}


def spec_arm_name(k: int | None) -> str:
    return f"spec-k{k}" if k is not None else "spec"


def parse_int_list(text: str, what: str, lo: int, hi: int) -> list[int]:
    """`1,4,16` -> [1, 4, 16] (sorted, without repeats); a clear usage error otherwise."""
    out = set()
    for part in text.split(","):
        p = part.strip()
        if not (p.isascii() and p.isdigit()) or not (lo <= int(p) <= hi):
            raise PpspecError(f"{what} {text[:60]!r}: {p[:20]!r} is not a whole number in {lo}..{hi}", where=what, fix=f"e.g. {what} 1,4,16")
        out.add(int(p))
    if not out:
        raise PpspecError(f"{what} is empty", where=what, fix=f"e.g. {what} 1,4")
    return sorted(out)


def settings_match(rec: dict, settings: dict) -> bool:
    return all(rec.get(k) == settings[k] for k in ("num_prompts", "max_tokens", "input_len"))


def load_record(path: Path) -> dict | None:
    """A finished level's (or parity pass's) record, or None when absent. A record that is there
    but not of its typed shape (verify/bench/schema.py) is one error naming the file: its text
    would otherwise reach the report, and its figures the verdict."""
    from ppspec_cli.io import records
    from ppspec_cli.verify.bench.schema import model_for

    if not os.path.lexists(path):
        return None
    _, doc = records.load(path, model_for(path.name), what="saved bench result", limit=MAX_RECORD_BYTES, fix=f"delete {path} (that level is measured again), or run without --resume")
    return doc


def level_done(rec: dict | None, settings: dict) -> bool:
    return rec is not None and settings_match(rec, settings) and (rec.get("completed") or 0) > 0


# -- parity ------------------------------------------------------------------------------------


def _first_token_diff(a: list, b: list) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def parity(arms: list[Arm], parity_docs: dict[str, dict | None], runs: list[dict]) -> dict:
    """Greedy outputs of every speculative arm against the baseline's: the parity pass's token ids
    (one request at a time), and the texts of every load run at the same concurrency."""
    base = parity_docs.get(BASELINE)
    checks: list[dict] = []
    identical = True
    missing = []
    for arm in arms:
        if not arm.speculation:
            continue
        doc = parity_docs.get(arm.name)
        if base is None or doc is None:
            missing.append(arm.name)
            identical = False
            continue
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
            diffs.append({"prompt": None, "token": None, "why": f"{len(s_out)} outputs against the baseline's {len(b_out)}"})
        checks.append({"arm": arm.name, "pass": "tokens" if by_tokens else "text", "prompts": n, "identical": not diffs, "first_difference": diffs[0] if diffs else None, "differing_prompts": len(diffs)})
        identical = identical and not diffs
    # the load runs: the same seeded prompts at every level, so the texts compare between arms
    load = []
    by_key = {(r["arm"], r["concurrency"]): r for r in runs}
    for r in runs:
        if not r.get("speculation"):
            continue
        b = by_key.get((BASELINE, r["concurrency"]))
        bt, st = (b or {}).get("generated_texts"), r.get("generated_texts")
        if not bt or not st:
            continue
        diff = [i for i, (x, y) in enumerate(zip(bt, st)) if x != y]
        load.append({"arm": r["arm"], "concurrency": r["concurrency"], "requests": min(len(bt), len(st)), "identical": not diff and len(bt) == len(st), "first_difference": diff[0] if diff else None})
        identical = identical and not diff and len(bt) == len(st)
    return {"identical": identical and bool(checks), "checks": checks, "load_runs": load, "missing": missing}


# -- verdict -----------------------------------------------------------------------------------


def speedups(arms: list[Arm], runs: list[dict], levels: list[int]) -> list[dict]:
    """Per level: each speculative arm's output tokens/s over the baseline's, and the best arm."""
    by_key = {(r["arm"], r["concurrency"]): r for r in runs}
    out = []
    for c in levels:
        base = by_key.get((BASELINE, c))
        bt = (base or {}).get("output_tokens_per_s")
        per_arm = {}
        for arm in arms:
            if not arm.speculation:
                continue
            st = (by_key.get((arm.name, c)) or {}).get("output_tokens_per_s")
            if bt and st:
                per_arm[arm.name] = {"speedup": st / bt, "num_speculative_tokens": arm.num_speculative_tokens, "tpot_speedup": _ratio((base or {}).get("tpot_ms", {}).get("mean"), (by_key.get((arm.name, c)) or {}).get("tpot_ms", {}).get("mean"))}
        best = max(per_arm.items(), key=lambda kv: kv[1]["speedup"]) if per_arm else None
        out.append({
            "concurrency": c,
            "baseline_output_tokens_per_s": bt,
            "arms": per_arm,
            "best_arm": best[0] if best else None,
            "best_num_speculative_tokens": best[1]["num_speculative_tokens"] if best else None,
            "speedup": best[1]["speedup"] if best else None,
            "pays": bool(best and best[1]["speedup"] > PAYS_ABOVE),
        })
    return out


def _ratio(base: float | None, spec: float | None) -> float | None:
    return base / spec if base and spec else None


def recommendation(sp: list[dict], profile_k: int | None, arms: list[Arm]) -> dict:
    """The crossover and the one-line profile change."""
    measured = [s for s in sp if s["speedup"] is not None]
    if not measured:
        return {"speculate": None, "crossover_concurrency": None, "num_speculative_tokens": None, "profile_change": None, "summary": "nothing to compare: a level lacks the baseline or every speculative arm"}
    paying = [s for s in measured if s["pays"]]
    crossover = max((s["concurrency"] for s in paying), default=None)
    top = max(s["concurrency"] for s in measured)
    levels = ", ".join(f"c={s['concurrency']} {s['speedup']:.2f}x" for s in measured)
    if not paying:
        return {
            "speculate": False,
            "crossover_concurrency": None,
            "num_speculative_tokens": None,
            "profile_change": "delete the `drafter:` section (serve without speculation)",
            "summary": f"speculation costs throughput at every measured concurrency ({levels})",
        }
    # k: the one that wins most paying levels; a tie goes to the better geometric-mean speed-up there
    wins: dict[int, int] = {}
    for s in paying:
        wins[s["best_num_speculative_tokens"]] = wins.get(s["best_num_speculative_tokens"], 0) + 1

    def gmean(k: int) -> float:
        vals = [a["speedup"] for s in paying for a in s["arms"].values() if a["num_speculative_tokens"] == k]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else 0.0

    k = max(wins, key=lambda kk: (wins[kk], gmean(kk)))
    if k is None:
        change = "keep the `drafter:` section as it is"
    elif k == profile_k:
        change = f"keep drafter.num_speculative_tokens: {k}"
    else:
        change = f"drafter.num_speculative_tokens: {k}"
    if crossover == top:
        summary = f"speculation pays at every measured concurrency up to c={top} ({levels})"
    else:
        summary = f"speculation pays up to c={crossover} and costs throughput above it ({levels}): serve loads above c={crossover} without `drafter:`"
    dips = [s["concurrency"] for s in measured if not s["pays"] and s["concurrency"] < crossover]
    if dips:  # not a clean crossover: noise, or a real dip; say so rather than hide it
        summary = summary.replace("speculation pays at every measured concurrency", "speculation pays at most measured concurrencies") + f"; but not at c={', c='.join(map(str, dips))} (repeat the run: a dip below the crossover is often noise)"
    return {"speculate": True, "crossover_concurrency": crossover, "highest_measured": top, "num_speculative_tokens": k, "profile_change": change, "summary": summary}


def public_run(rec: dict) -> dict[str, Any]:
    """A level's record as the JSON report shows it (without the generated texts)."""
    return {k: v for k, v in rec.items() if k != "generated_texts"}
