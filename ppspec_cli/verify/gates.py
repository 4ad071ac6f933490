"""Pass/fail gates over verify reports.

A gate compares one measured report with a threshold or with a saved report (a baseline measured
at PP=1, a reference measured with speculation off). Gates read the JSON form of reports so a
live run and a file on disk are handled the same way. Comparing runs that sent different prompts
or settings is refused, not reported: the numbers would not mean anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

ACCEPTANCE = "acceptance"
DRAFTER = "drafter"
OUTPUT = "output"
TASK = "task"
GATE_NAMES = (ACCEPTANCE, DRAFTER, OUTPUT, TASK)
GATE_TITLES = {
    ACCEPTANCE: "acceptance parity",
    DRAFTER: "drafter sanity",
    OUTPUT: "output parity",
    TASK: "task score",
}
_ALIASES = {
    "acceptance": ACCEPTANCE,
    "acceptance-parity": ACCEPTANCE,
    "parity": ACCEPTANCE,
    "drafter": DRAFTER,
    "drafter-sanity": DRAFTER,
    "sanity": DRAFTER,
    "output": OUTPUT,
    "output-parity": OUTPUT,
    "task": TASK,
    "task-score": TASK,
}

DEFAULT_MIN_ACCEPTANCE = 0.05
DEFAULT_PARITY_RATIO = 0.95
DEFAULT_TASK_TOLERANCE = 0.05


@dataclass
class GateResult:
    name: str
    passed: bool
    detail: str
    measured: float | None = None
    threshold: float | None = None

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def line(self) -> str:
        return f"{self.status}  {GATE_TITLES.get(self.name, self.name)}: {self.detail}"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "measured": self.measured,
            "threshold": self.threshold,
        }


# ---------------------------------------------------------------------------------------------
# Synthetic acceptance: vLLM can force the acceptance rate for benchmarking


def synthetic_acceptance_configured(spec_config: Mapping[str, Any] | None) -> bool:
    """True when a speculative config forces acceptance instead of verifying drafts.

    vLLM's SpeculativeConfig has `rejection_sample_method: "synthetic"` together with
    `synthetic_acceptance_rates` (per position) or `synthetic_acceptance_length`; forks and
    other versions spell a scalar `synthetic_acceptance_rate`. Under it the acceptance counters
    report the imposed number and the output is not the target's, so no gate means anything.
    """
    if not spec_config:
        return False
    if not isinstance(spec_config, Mapping):
        return False
    norm = {str(k).replace("-", "_").lower(): v for k, v in spec_config.items()}
    method = norm.get("rejection_sample_method")
    if isinstance(method, str) and method.strip().lower() == "synthetic":
        return True
    for key, value in norm.items():
        if key.startswith("synthetic_") and value is not None and value is not False:
            return True
    return False


def speculative_config_from_engine(engine: Mapping[str, Any] | None) -> dict | None:
    """The speculative config a profile's `engine:` dict passes to vLLM, if any.

    Accepts `speculative-config` / `speculative_config` as a mapping or a JSON string, and vLLM's
    dotted form (`speculative-config.rejection_sample_method: synthetic`).
    """
    if not engine:
        return None
    out: dict[str, Any] = {}
    found = False
    for key, value in engine.items():
        k = str(key).lstrip("-").replace("_", "-")
        if k == "speculative-config":
            found = True
            if isinstance(value, str):
                value = safeio.parse_json(
                    value,
                    what="engine.speculative-config (a string, so read as JSON)",
                    where="profile engine.speculative-config",
                    fix="write it as a YAML mapping (or a JSON object string)",
                )
            if isinstance(value, Mapping):
                out.update(value)
        elif k.startswith("speculative-config."):
            found = True
            out[k.split(".", 1)[1]] = value
    return out if found else None


def refuse_if_synthetic(spec_config: Mapping[str, Any] | None, source: str) -> None:
    if synthetic_acceptance_configured(spec_config):
        raise PpspecError(
            "the engine is configured with synthetic acceptance (rejection_sample_method='synthetic'): "
            "acceptance counters report an imposed rate and outputs are not the target's, so no gate can be judged",
            where=source,
            fix="remove rejection_sample_method / synthetic_acceptance_* from the speculative config, "
            "or pass --gates none to only measure",
        )


# ---------------------------------------------------------------------------------------------
# Gate selection


def resolve_gates(
    gates: list[str] | None,
    *,
    have_baseline: bool,
    have_reference: bool,
    speculative: bool,
) -> list[str]:
    """The gates to run. None picks the ones whose inputs exist; an explicit list must be satisfiable."""
    if gates is None:
        chosen = []
        if have_baseline:
            chosen.append(ACCEPTANCE)
        if speculative:
            chosen.append(DRAFTER)
        if have_reference:
            chosen += [OUTPUT, TASK]
        return chosen
    chosen = []
    for raw in gates:
        for g in str(raw).split(","):
            g = g.strip().lower()
            if not g:
                continue
            if g in ("none", "off"):
                continue
            if g == "all":
                chosen += [x for x in GATE_NAMES if x not in chosen]
                continue
            name = _ALIASES.get(g)
            if name is None:
                raise PpspecError(
                    f"unknown gate {g!r}",
                    where="--gates",
                    fix=f"choose from {', '.join(GATE_NAMES)} (or all / none)",
                )
            if name not in chosen:
                chosen.append(name)
    if ACCEPTANCE in chosen and not have_baseline:
        raise PpspecError(
            "gate 'acceptance' needs a baseline report",
            where="--gates",
            fix="pass --baseline FILE (made with --save-baseline on the PP=1 run)",
        )
    for g in (OUTPUT, TASK):
        if g in chosen and not have_reference:
            raise PpspecError(
                f"gate {g!r} needs a reference report",
                where="--gates",
                fix="pass --reference FILE (made with --save-reference on a run with speculation off)",
            )
    return chosen


# ---------------------------------------------------------------------------------------------
# Comparability


def check_comparable(report: Mapping, other: Mapping, role: str, *, check_outputs: bool = True) -> None:
    """Refuse to compare reports that sent different prompts or settings."""
    a, b = report.get("prompt_set", {}), other.get("prompt_set", {})
    if a.get("sha256") != b.get("sha256"):
        raise PpspecError(
            f"the {role} was measured with a different prompt set "
            f"({b.get('name')} v{b.get('version')} {str(b.get('sha256'))[:12]} vs {a.get('name')} "
            f"v{a.get('version')} {str(a.get('sha256'))[:12]})",
            where=f"--{role}",
            fix=f"re-create the {role} with this ppspec version",
        )
    sa, sb = report.get("settings", {}), other.get("settings", {})
    for key in ("max_tokens", "num_prompts"):
        if sa.get(key) != sb.get(key):
            raise PpspecError(
                f"the {role} used {key}={sb.get(key)}, this run {key}={sa.get(key)}",
                where=f"--{role}",
                fix=f"run with the same --max-tokens and --num-prompts as the {role}",
            )
    if check_outputs:
        ids_a = [o.get("id") for o in report.get("outputs", [])]
        ids_b = [o.get("id") for o in other.get("outputs", [])]
        if ids_a != ids_b:
            raise PpspecError(
                f"the {role} holds outputs for other prompts than this run",
                where=f"--{role}",
                fix=f"re-create the {role} with the same prompt set and --num-prompts",
            )


def _f(x: float | None, nd: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


# ---------------------------------------------------------------------------------------------
# The gates


def gate_acceptance_parity(report: Mapping, baseline: Mapping, ratio: float = DEFAULT_PARITY_RATIO) -> GateResult:
    """Mean acceptance length must be at least ratio x the baseline's (upstream uses 0.95 x PP=1)."""
    if not (0 < ratio <= 10):
        raise PpspecError(
            f"--parity-ratio must be in (0, 10], got {ratio}", where="--parity-ratio", fix="use e.g. 0.95"
        )
    if baseline.get("speculative", {}).get("synthetic_acceptance"):
        raise PpspecError(
            "the baseline was measured with synthetic acceptance",
            where="--baseline",
            fix="re-create the baseline on an engine without synthetic acceptance",
        )
    check_comparable(report, baseline, "baseline", check_outputs=False)
    base = baseline.get("spec_decode", {}).get("mean_acceptance_length")
    if not isinstance(base, (int, float)) or not math.isfinite(base):
        raise PpspecError(
            "the baseline has no mean acceptance length (it made no drafts, or speculation was off)",
            where="--baseline",
            fix="save the baseline from a run with speculative decoding on (same drafter, PP=1)",
        )
    cur = report.get("spec_decode", {}).get("mean_acceptance_length")
    need = ratio * base
    if cur is None:
        status = report.get("spec_decode", {}).get("status", "no drafts")
        return GateResult(
            ACCEPTANCE, False, f"no acceptance length to compare ({status}); baseline {base:.3f}", None, need
        )
    ok = cur >= need - 1e-12
    rel = ">=" if ok else "<"
    return GateResult(
        ACCEPTANCE,
        ok,
        f"mean acceptance length {cur:.3f} {rel} {ratio:g} x baseline {base:.3f} = {need:.3f}",
        cur,
        need,
    )


def gate_drafter_sanity(report: Mapping, min_acceptance: float = DEFAULT_MIN_ACCEPTANCE) -> GateResult:
    """The drafter must be accepted at least min_acceptance of the time: a floor that catches wrong taps."""
    if not (0 <= min_acceptance <= 1):
        raise PpspecError(
            f"--min-acceptance must be in [0, 1], got {min_acceptance}", where="--min-acceptance", fix="use e.g. 0.05"
        )
    sd = report.get("spec_decode", {})
    if not sd.get("configured"):
        return GateResult(
            DRAFTER,
            False,
            "speculative decoding is not configured on this server (no spec-decode counters)",
            None,
            min_acceptance,
        )
    rate = sd.get("acceptance_rate")
    if rate is None:
        return GateResult(
            DRAFTER,
            False,
            "no drafts were made during the run: the drafter never proposed a token",
            None,
            min_acceptance,
        )
    ok = rate >= min_acceptance
    rel = ">=" if ok else "<"
    return GateResult(
        DRAFTER,
        ok,
        f"acceptance rate {rate:.3f} {rel} floor {min_acceptance:g} ({sd.get('accepted_tokens')} of "
        f"{sd.get('draft_tokens')} draft tokens)",
        rate,
        min_acceptance,
    )


def _first_divergence(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def gate_output_parity(report: Mapping, reference: Mapping) -> GateResult:
    """Greedy outputs must equal the reference's, prompt by prompt (bf16 ties can flip a token)."""
    check_comparable(report, reference, "reference")
    ref = {o["id"]: o for o in reference.get("outputs", []) if isinstance(o, dict) and "id" in o}
    outs = [o for o in report.get("outputs", []) if isinstance(o, dict)]
    diffs = []
    for o in outs:
        r = ref.get(o.get("id"))
        if r is None or r.get("text") != o.get("text"):
            diffs.append((o, r))
    n = len(outs)
    note = (
        ""
        if not reference.get("speculative", {}).get("configured")
        else " (note: the reference was measured with speculation on)"
    )
    if not diffs:
        return GateResult(
            OUTPUT, True, f"{n} of {n} greedy outputs identical to the reference{note}", float(n), float(n)
        )
    o, r = diffs[0]
    a, b = o.get("text") or "", (r or {}).get("text") or ""
    at = _first_divergence(a, b)
    snippet_a = a[max(0, at - 10) : at + 20]
    snippet_b = b[max(0, at - 10) : at + 20]
    return GateResult(
        OUTPUT,
        False,
        f"{len(diffs)} of {n} outputs differ; first {o.get('id')} at character {at}: "
        f"got {snippet_a!r}, reference {snippet_b!r} (bf16 ties can flip a greedy token: see docs/verify.md){note}",
        float(n - len(diffs)),
        float(n),
    )


def gate_task_score(report: Mapping, reference: Mapping, tolerance: float = DEFAULT_TASK_TOLERANCE) -> GateResult:
    """Arithmetic exact-answer score must not fall more than `tolerance` below the spec-off reference."""
    check_comparable(report, reference, "reference")
    cur, ref = report.get("task_score"), reference.get("task_score")
    if not cur or not cur.get("total"):
        raise PpspecError(
            "this run sent no arithmetic problems, so there is no task score",
            where="--num-prompts",
            fix="raise --num-prompts (or omit it) so the arithmetic problems are included",
        )
    if not ref or ref.get("score") is None:
        raise PpspecError(
            "the reference has no task score",
            where="--reference",
            fix="re-create the reference with this ppspec version",
        )
    need = ref["score"] - tolerance
    ok = cur["score"] >= need - 1e-12
    rel = ">=" if ok else "<"
    return GateResult(
        TASK,
        ok,
        f"{cur['correct']}/{cur['total']} correct = {cur['score']:.3f} {rel} reference {ref['score']:.3f} - "
        f"{tolerance:g}",
        cur["score"],
        need,
    )


def evaluate_gates(
    report: Mapping,
    gates: list[str],
    *,
    baseline: Mapping | None = None,
    reference: Mapping | None = None,
    min_acceptance: float = DEFAULT_MIN_ACCEPTANCE,
    parity_ratio: float = DEFAULT_PARITY_RATIO,
    task_tolerance: float = DEFAULT_TASK_TOLERANCE,
) -> list[GateResult]:
    """Run the named gates in a fixed order. Missing inputs for a named gate are usage errors."""
    if gates and report.get("speculative", {}).get("synthetic_acceptance"):
        refuse_if_synthetic({"rejection_sample_method": "synthetic"}, "the measured engine")
    results = []
    for g in GATE_NAMES:
        if g not in gates:
            continue
        if g == ACCEPTANCE:
            if baseline is None:
                raise PpspecError("gate 'acceptance' needs --baseline FILE", where="--gates", fix="pass --baseline")
            results.append(gate_acceptance_parity(report, baseline, parity_ratio))
        elif g == DRAFTER:
            results.append(gate_drafter_sanity(report, min_acceptance))
        elif g == OUTPUT:
            if reference is None:
                raise PpspecError("gate 'output' needs --reference FILE", where="--gates", fix="pass --reference")
            results.append(gate_output_parity(report, reference))
        elif g == TASK:
            if reference is None:
                raise PpspecError("gate 'task' needs --reference FILE", where="--gates", fix="pass --reference")
            results.append(gate_task_score(report, reference, task_tolerance))
    return results
