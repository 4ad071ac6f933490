"""docs/findings.md: every finding code the code base can report has an entry (cause and fix), every
entry is a code the code base reports, and the committed file is what `ppspec docs --findings`
generates. Regenerate: `ppspec docs --findings --out docs/findings.md`.

The codes are collected from the source, not listed here: the first argument of every finding
constructor (`_f`, `Finding`, `finding`, `_refusal`, `Breach`) that is a string (or a conditional
between strings), the checkpoint gaps (`Gap(...)`, reported as `target-<gap>` / `drafter-<gap>`), the
disaggregated checks' codes (`pd-*` strings in pd.py) and the engine probes (`probe-<name>`)."""

from __future__ import annotations

import ast

from typer.testing import CliRunner

from conftest import REPO
from ppspec_cli.checkpoint.reader import CONFIG_INT_LIMITS
from ppspec_cli.cli import app
from ppspec_cli.commands.docs import findings_reference
from ppspec_cli.planning.drafter_contract import codes as contract_codes
from ppspec_cli.planning.engine_options import REFUSALS
from ppspec_cli.planning.finding_codes import entry, sections
from ppspec_cli.running.engine.probes import PROBE_NAMES

DOC = REPO / "docs" / "findings.md"
CONSTRUCTORS = {"_f", "Finding", "finding", "_refusal", "Breach"}


#: Codes built from a method's name (f"{m.name}-suffix"): which methods can report each, by the
#: SpecMethod field its rule tests. A new such code fails the collector until it is listed here.
METHOD_CODES = {
    "-no-layers": lambda m: not m.external_drafter,  # rules.py: a target without MTP layers
    "-needs-v2": lambda m: not m.v1_runner,  # rules.py: a method Model Runner V1 refuses
}


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2 and isinstance(node.values[1], ast.Constant):
        head, tail = node.values
        if isinstance(head, ast.FormattedValue) and ast.unparse(head.value) == "m.name":
            from ppspec_cli.knowledge.methods import REGISTRY

            assert tail.value in METHOD_CODES, f"a finding code f'{{m.name}}{tail.value}': say in METHOD_CODES which methods report it"
            return [f"{name}{tail.value}" for name, m in REGISTRY.items() if METHOD_CODES[tail.value](m)]
    return []


def codes_in_the_code_base() -> set[str]:
    found: set[str] = set()
    gaps: set[str] = {"unreadable"} | {f"{p}-{k.replace('_', '-')}" for k in CONFIG_INT_LIMITS for p in ("missing", "bad")}
    for root in ("ppspec_cli", "adapters"):
        for path in (REPO / root).rglob("*.py"):
            if path.name == "finding_codes.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and node.args:
                    fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                    if fn in CONSTRUCTORS:
                        found.update(_strings(node.args[0]))
                    elif fn == "Gap":
                        gaps.update(_strings(node.args[0]))
                elif isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["code"]:
                    found.update(_strings(node.value))  # code = "a" if ... else "b"; Finding(code, ...)
                if path.name == "pd.py" and isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("pd-") and " " not in node.value:
                    found.add(node.value)
    found = {c for c in found if c and " " not in c}
    found |= {f"{role}-{g}" for g in gaps for role in ("target", "drafter")}
    found |= {f"probe-{n}" for n in PROBE_NAMES}
    return found | set(contract_codes()) | set(REFUSALS)


def test_the_collector_finds_codes_of_every_kind():
    """The measurement can fail: it sees constructor codes, gaps, pd checks, pack rules and probes."""
    got = codes_in_the_code_base()
    for code in ("partition-sum", "untrusted-acknowledged", "target-no-weights", "drafter-missing-vocab-size", "pd-kv-dtype-mismatch", "kimi_k3-aux-attn-res-boundary", "probe-partition", "dspark-d2t-missing", "api-key-env-unset", "probes-not-run"):
        assert code in got, code
    assert len(got) > 120


def test_every_code_has_an_entry():
    missing = sorted(c for c in codes_in_the_code_base() if entry(c) is None)
    assert not missing, f"finding codes without an entry in ppspec_cli/planning/finding_codes.py: {missing}"


def test_every_entry_is_a_code_the_code_base_reports():
    known = codes_in_the_code_base()
    stale = sorted(c for entries in sections().values() for c in entries if "<" not in c and c not in known)
    assert not stale, f"entries for codes nothing reports (renamed or removed?): {stale}"


def test_every_entry_says_cause_and_fix():
    for entries in sections().values():
        for code, (cause, fix) in entries.items():
            assert cause.strip() and fix.strip(), code


def test_committed_reference_equals_generated():
    assert DOC.read_text(encoding="utf-8") == findings_reference(), "run `ppspec docs --findings --out docs/findings.md`"


def test_cli_docs_findings_prints_it():
    r = CliRunner().invoke(app, ["docs", "--findings"])
    assert r.exit_code == 0 and r.stdout == findings_reference()
