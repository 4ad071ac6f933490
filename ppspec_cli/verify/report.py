"""The verify report: one JSON document per run, also the format of baselines and references.

A baseline (`--save-baseline`) and a reference (`--save-reference`) are ordinary reports saved
from another run, so every number a gate compares was produced by the same code.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ppspec_cli.io import safeio
from ppspec_cli.io.terminal import safe
from ppspec_cli.errors import PpspecError

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
                f"not a ppspec verify report (schema {d.get('schema') if isinstance(d, dict) else None!r}, expected {SCHEMA!r})",
                where=source,
                fix="pass a file written by `ppspec verify --out/--save-baseline/--save-reference`",
            )
        names = set(cls.__dataclass_fields__)
        missing = [k for k in ("endpoint", "model", "prompt_set", "settings", "speculative", "counters_delta", "spec_decode", "throughput", "outputs") if k not in d]
        if missing:
            raise PpspecError(f"report is missing {', '.join(missing)}", where=source, fix="re-create it with `ppspec verify`")
        return cls(**{k: v for k, v in d.items() if k in names})


def save_report(report: Report, path: str | Path) -> Path:
    """Write the report atomically (a half-written baseline would poison later gates)."""
    p = Path(path)
    if p.is_dir():
        raise PpspecError(f"{p} is a directory", where=str(p), fix="pass a file path such as baseline.json")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise PpspecError(f"directory {parent} does not exist", where=str(p), fix="create it first or choose another path")
    text = json.dumps(report.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n"
    safeio.write_text(p, text, what="report", exit_code=2)
    return p


def load_report(path: str | Path, role: str = "report") -> dict:
    """Read a saved report as a dict (gates work on the JSON form)."""
    p = Path(path)
    if not p.is_file():
        raise PpspecError(f"{role} file not found: {p}", where=f"--{role}", fix=f"create it with `ppspec verify --save-{role} {p}`")
    doc = safeio.read_json(p, limit=MAX_REPORT_BYTES, what=f"{role} file", fix="pass a report written by ppspec verify")
    Report.from_dict(doc, str(p))  # validates the shape
    return doc


# ---------------------------------------------------------------------------------------------
# Rendering


def _num(x: Any, fmt: str = "{:.3f}") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return fmt.format(x)


def render_table(report: Report | dict, console: Console | None = None) -> None:
    """A human summary of the report, then one PASS/FAIL line per gate."""
    r = report.to_dict() if isinstance(report, Report) else report
    console = console or Console()
    sd = r.get("spec_decode", {})
    tp = r.get("throughput", {})
    ps = r.get("prompt_set", {})
    spec = r.get("speculative", {})
    t = Table(title="ppspec verify", show_header=True, header_style="bold")
    t.add_column("quantity")
    t.add_column("value", overflow="fold")

    def row(k: str, v: object) -> None:  # every value may carry server text: escaped, never markup
        t.add_row(safe(k), safe(v))

    row("endpoint", str(r.get("endpoint")))
    row("model", str(r.get("model")))
    row("prompt set", f"{ps.get('name')} v{ps.get('version')} sha256 {str(ps.get('sha256'))[:16]}… ({r.get('settings', {}).get('num_prompts')} prompts)")
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
        row(f"engine {engine}", f"length {_num(st.get('mean_acceptance_length'))}, rate {_num(st.get('acceptance_rate'))}, drafts {st.get('drafts')}")
    row("output tokens", str(tp.get("output_tokens")))
    row("wall time", _num(tp.get("wall_time_s"), "{:.2f} s"))
    row("output tokens/s", _num(tp.get("output_tokens_per_s"), "{:.1f}"))
    row("time per output token", _num(tp.get("time_per_output_token_ms"), "{:.1f} ms"))
    if tp.get("engine_inter_token_latency_ms") is not None:
        row("engine inter-token latency", _num(tp.get("engine_inter_token_latency_ms"), "{:.1f} ms"))
    ts = r.get("task_score")
    if ts and ts.get("total"):
        row("arithmetic score", f"{ts.get('correct')}/{ts.get('total')} = {ts.get('score'):.3f}")
    console.print(t)
    for w in r.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {safe(w)}", highlight=False)
    print_gate_lines(r, console)


def print_gate_lines(r: dict, console: Console) -> None:
    from ppspec_cli.verify.gates import GATE_TITLES

    for g in r.get("gates", []):
        style = "green" if g.get("status") == "PASS" else "red"
        title = GATE_TITLES.get(g.get("name"), g.get("name"))
        console.print(f"[{style}]{safe(g.get('status'))}[/{style}]  {safe(title)}: {safe(g.get('detail'))}", highlight=False, soft_wrap=True)
