"""The verify report: one JSON document per run, also the format of baselines and references.

A baseline (`--save-baseline`) and a reference (`--save-reference`) are ordinary reports saved
from another run, so every number a gate compares was produced by the same code.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, StrictFloat, StrictInt, StrictStr
from rich.table import Table

from ppspec_cli.errors import EXIT_REFUSED, EXIT_USAGE, PpspecError
from ppspec_cli.io import records, safeio, terminal
from ppspec_cli.io.records import Record
from ppspec_cli.io.terminal import (
    safe,  # noqa: F401 - kept for callers of report.safe
    styled,
)

SCHEMA = "ppspec-verify-report/1"
MAX_REPORT_BYTES = 64 << 20


@dataclass
class Report:
    """Everything one verify run measured. `to_dict()` is the JSON written to disk."""

    endpoint: str
    model: str
    prompt_set: dict
    settings: dict
    speculative: dict
    counters_delta: dict
    spec_decode: dict
    throughput: dict
    outputs: list[dict]
    task_score: dict | None = None
    per_engine: dict = field(default_factory=dict)
    #: The ppspec plugin status of each engine process of the served run (serve.confirm.plugin_record).
    plugin: list[dict] = field(default_factory=list)
    gates: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lm_eval_command: str | None = None
    profile: str | None = None
    created_at: str | None = None
    ppspec_version: str | None = None
    schema: str = SCHEMA

    @property
    def passed(self) -> bool:
        return all(g.get("status") == "PASS" for g in self.gates)

    @property
    def mean_acceptance_length(self) -> float | None:
        return self.spec_decode.get("mean_acceptance_length")

    @property
    def acceptance_rate(self) -> float | None:
        return self.spec_decode.get("acceptance_rate")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d

    @classmethod
    def from_dict(cls, d: dict, source: str = "<report>") -> "Report":
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise PpspecError(
                f"not a ppspec verify report (schema {d.get('schema') if isinstance(d, dict) else None!r}, expected "
                f"{SCHEMA!r})",
                where=source,
                fix="pass a file written by `ppspec verify --out/--save-baseline/--save-reference`",
            )
        names = set(cls.__dataclass_fields__)
        missing = [
            k
            for k in (
                "endpoint",
                "model",
                "prompt_set",
                "settings",
                "speculative",
                "counters_delta",
                "spec_decode",
                "throughput",
                "outputs",
            )
            if k not in d
        ]
        if missing:
            raise PpspecError(
                f"report is missing {', '.join(missing)}", where=source, fix="re-create it with `ppspec verify`"
            )
        return cls(**{k: v for k, v in d.items() if k in names})


def save_report(report: Report, path: str | Path) -> Path:
    """Write the report atomically (a half-written baseline would poison later gates)."""
    p = Path(path)
    safeio.check_writable(p, where=str(p))  # a directory, a missing parent, a name too long: one message
    try:
        text = json.dumps(report.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n"
    except ValueError:  # a non-finite figure (a server's counter at +Inf): JSON has no such number
        raise PpspecError(
            f"cannot write {p}: the report holds a non-finite number (a server counter at Inf or NaN)",
            where=str(p),
            fix="check the server's /metrics; ppspec writes only finite figures",
            exit_code=EXIT_REFUSED,
        ) from None
    safeio.write_text(p, text, what="report", exit_code=EXIT_USAGE, through=True)
    return p


# ---- the report as read back (a baseline or a reference): typed, validated before the run ----


Num = StrictInt | StrictFloat


class _PromptSetRec(Record):
    name: Optional[str] = None
    version: StrictInt | StrictStr | None = None
    sha256: Optional[str] = None


class _SettingsRec(Record):
    num_prompts: Optional[StrictInt] = None
    max_tokens: Optional[StrictInt] = None
    seed: Optional[StrictInt] = None


class _SpeculativeRec(Record):
    configured: Optional[bool] = None
    synthetic_acceptance: Optional[bool] = None


class _SpecDecodeRec(Record):
    configured: Optional[bool] = None
    status: Optional[str] = None
    drafts: Optional[Num] = None
    draft_tokens: Optional[Num] = None
    accepted_tokens: Optional[Num] = None
    mean_acceptance_length: Optional[Num] = None
    acceptance_rate: Optional[Num] = None
    per_position_acceptance: Optional[list[Num]] = None


class _OutputRec(Record):
    id: StrictStr | StrictInt
    text: Optional[str] = None
    completion_tokens: Optional[StrictInt] = None


class _TaskScoreRec(Record):
    correct: Optional[StrictInt] = None
    total: Optional[StrictInt] = None
    score: Optional[Num] = None


class ReportRecord(Record):
    """A saved `ppspec verify` report as gates read it back (--baseline, --reference)."""

    schema_: Literal["ppspec-verify-report/1"] = Field(alias="schema")
    endpoint: str
    model: str
    prompt_set: _PromptSetRec
    settings: _SettingsRec
    speculative: _SpeculativeRec
    counters_delta: dict[str, Any]
    spec_decode: _SpecDecodeRec
    throughput: dict[str, Num | str | None]
    outputs: list[_OutputRec]
    task_score: Optional[_TaskScoreRec] = None
    per_engine: dict[str, _SpecDecodeRec] = Field(default_factory=dict)
    gates: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def load_report(path: str | Path, role: str = "report") -> dict:
    """Read a saved report (a baseline, a reference) and validate every field the gates read, BEFORE
    the run: a wrong type or a non-finite number is exit 2 naming the file, never a crash after it."""
    p = Path(path)
    fix = (
        f"pass a report written by `ppspec verify --save-{role}` (re-create it: `ppspec verify PROFILE "
        f"--save-{role} {p}`)"
    )
    doc = safeio.read_json(p, limit=MAX_REPORT_BYTES, what=f"{role} file", fix=fix)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        Report.from_dict(doc, str(p))  # the one message for "not a report at all"
    records.validate(ReportRecord, doc, what=f"{role} file", where=str(p), fix=fix)
    return doc


# ---------------------------------------------------------------------------------------------
# Rendering


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return fmt.format(x)


def render_table(report: Report | dict, console: Any = None) -> None:
    """A human summary of the report, then one PASS/FAIL line per gate."""
    r = report.to_dict() if isinstance(report, Report) else report
    console = console or terminal.console()
    sd = r.get("spec_decode", {})
    tp = r.get("throughput", {})
    ps = r.get("prompt_set", {})
    spec = r.get("speculative", {})
    t = Table(title="ppspec verify", show_header=True, header_style="bold")
    t.add_column("quantity")
    t.add_column("value", overflow="fold")

    def row(k: str, v: object) -> None:  # every value may carry server text: the console never reads markup
        t.add_row(terminal.plain(k), terminal.plain(v))

    row("endpoint", str(r.get("endpoint")))
    row("model", str(r.get("model")))
    row(
        "prompt set",
        f"{ps.get('name')} v{ps.get('version')} sha256 {str(ps.get('sha256'))[:16]}… "
        f"({r.get('settings', {}).get('num_prompts')} prompts)",
    )
    row("max tokens / seed", f"{r.get('settings', {}).get('max_tokens')} / {r.get('settings', {}).get('seed')}")
    if not sd.get("configured"):
        row("speculative decoding", "not configured (no spec-decode counters on /metrics)")
    else:
        label = "on" + (" — SYNTHETIC acceptance" if spec.get("synthetic_acceptance") else "")
        row("speculative decoding", label)
        row("drafts", str(sd.get("drafts")))
        row("draft tokens", str(sd.get("draft_tokens")))
        row("accepted tokens", str(sd.get("accepted_tokens")))
        if sd.get("status") == "no drafts":
            row("acceptance", "no drafts (acceptance undefined)")
        else:
            row("mean acceptance length", _num(sd.get("mean_acceptance_length")))
            row("acceptance rate", _num(sd.get("acceptance_rate")))
            pp = sd.get("per_position_acceptance") or []
            row("per-position acceptance", "  ".join(f"{i}:{v:.3f}" for i, v in enumerate(pp)) or "—")
    for engine, st in sorted((r.get("per_engine") or {}).items()):
        row(
            f"engine {engine}",
            f"length {_num(st.get('mean_acceptance_length'))}, rate {_num(st.get('acceptance_rate'))}, drafts "
            f"{st.get('drafts')}",
        )
    row("output tokens", str(tp.get("output_tokens")))
    row("wall time", _num(tp.get("wall_time_s"), "{:.2f} s"))
    row("output tokens/s", _num(tp.get("output_tokens_per_s"), "{:.1f}"))
    # what each measures, next to its value: the two differ by design (docs/verify.md)
    row("time per output token", _num(tp.get("time_per_output_token_ms"), "{:.1f} ms") + f" ({TPOT_MEANS})")
    if tp.get("engine_inter_token_latency_ms") is not None:
        row(
            "engine inter-token latency", _num(tp.get("engine_inter_token_latency_ms"), "{:.1f} ms") + f" ({ITL_MEANS})"
        )
    ts = r.get("task_score")
    if ts and ts.get("total"):
        row("arithmetic score", f"{ts.get('correct')}/{ts.get('total')} = {ts.get('score'):.3f}")
    console.print(t)
    if ts and ts.get("total"):
        terminal.print_par(console, styled("[dim]arithmetic score: {}[/dim]", ARITHMETIC_NOTE))
    for w in r.get("warnings", []):
        terminal.print_par(console, styled("[yellow]warning:[/yellow] {}", w))
    print_gate_lines(r, console)


#: What verify's two latency rows measure (vLLM 0.32 records one inter-token latency per engine step
#: that emits tokens for a request, vllm/v1/metrics/stats.py update_from_output, whatever their number).
TPOT_MEANS = "client: each request's time, prefill included, over its tokens"
ITL_MEANS = "engine: time between its steps; a step emits every accepted draft token at once"


#: What the arithmetic score row means (printed under the table whenever it is shown).
ARITHMETIC_NOTE = (
    "how many of this run's built-in arithmetic prompts came back with the exact integer answer. "
    "It means something only next to a speculation-off run of the same model (--reference FILE, task gate): "
    "speculation must not lower it. The tiny demo models are not trained language models: they score 0 either way."
)


def print_gate_lines(r: dict, console: Any) -> None:
    from ppspec_cli.verify.gates import GATE_TITLES

    for g in r.get("gates", []):
        style = "green" if g.get("status") == "PASS" else "red"
        title = GATE_TITLES.get(g.get("name"), g.get("name"))
        line = styled(f"[{style}]{{}}[/{style}]  {{}}: {{}}", g.get("status"), title, g.get("detail"))
        terminal.print_par(console, line, hang=len(str(g.get("status"))) + 2)
