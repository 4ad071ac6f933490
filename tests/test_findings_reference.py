"""The registry of finding codes (ppspec_cli/findings/registry.py, joined with the codes owned next to
their rules in ppspec_cli/preflight/registry.py): every code the code base can raise is registered,
with the severity it is raised with; every registered code is one the code base raises; and
docs/findings.md is what `ppspec docs --findings` generates from it. Regenerate:
`ppspec docs --findings --out docs/findings.md`.

The codes are collected from the source, not listed here: the first argument of every finding
constructor (`_f`, `Finding`, `finding`, `_refusal`) that is a string (or a conditional
between strings), the checkpoint gaps (`Gap(...)`, reported as `target-<gap>` / `drafter-<gap>`), the
disaggregated checks' codes (`pd-*` strings in pd.py) and the engine probes (`probe-<name>`)."""

from __future__ import annotations

import ast

from conftest import REPO
from typer.testing import CliRunner

from ppspec_cli.checkpoint.reader import CONFIG_INT_LIMITS
from ppspec_cli.cli import app
from ppspec_cli.commands.docs import findings_reference
from ppspec_cli.findings.registry import LAUNCH_REFUSALS, SEVERITIES, TABLE
from ppspec_cli.knowledge import archtable, drafterfacts
from ppspec_cli.planning.drafter_contract import codes as contract_codes
from ppspec_cli.preflight.registry import PROBE_ENTRY, codes, lookup
from ppspec_cli.running.engine.probes import PROBE_NAMES

DOC = REPO / "docs" / "findings.md"
CONSTRUCTORS = {"_f", "Finding", "finding", "_refusal"}


#: Codes built from a method's name (f"{m.name}-suffix"): which methods can report each, by the
#: SpecMethod field its rule tests. A new such code fails the collector until it is listed here.
METHOD_CODES = {
    "-no-layers": lambda m: not m.external_drafter,  # rules.py: a target without MTP layers
    "-needs-v2": lambda m: not m.v1_runner,  # rules.py: a method Model Runner V1 refuses
    # drafter_load.py: a served class the registry lacks, for the methods EAGLEConfig renames (the table says which)
    "-arch-unknown": lambda m: bool(drafterfacts.renames(archtable.newest(), m.name)),
    "-refused": lambda m: not m.external_drafter,  # drafter_load.py: the family refuses mtp, names another method
    "-k-not-multiple": lambda m: not m.external_drafter,  # drafter_load.py: k not a multiple of n_predict
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

            assert tail.value in METHOD_CODES, (
                f"a finding code f'{{m.name}}{tail.value}': say in METHOD_CODES which methods report it"
            )
            return [f"{name}{tail.value}" for name, m in REGISTRY.items() if METHOD_CODES[tail.value](m)]
    return []


def codes_in_the_code_base() -> set[str]:
    found: set[str] = set()
    gaps: set[str] = {"unreadable"} | {
        f"{p}-{k.replace('_', '-')}" for k in CONFIG_INT_LIMITS for p in ("missing", "bad")
    }
    for root in ("ppspec_cli", "adapters"):
        for path in (REPO / root).rglob("*.py"):
            if path.name == "registry.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and node.args:
                    fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                    if fn in CONSTRUCTORS:
                        found.update(_strings(node.args[0]))
                    elif fn == "Gap":
                        gaps.update(_strings(node.args[0]))
                    elif fn == "guard":  # the one guard: its `code=`, else rule-crashed
                        kw = [k.value for k in node.keywords if k.arg == "code"]
                        found.update(_strings(kw[0]) if kw else ["rule-crashed"])
                elif isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["code"]:
                    found.update(_strings(node.value))  # code = "a" if ... else "b"; Finding(code, ...)
                if (
                    path.name == "pd.py"
                    and isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value.startswith("pd-")
                    and " " not in node.value
                ):
                    found.add(node.value)
    found = {c for c in found if c and " " not in c}
    found |= {f"{role}-{g}" for g in gaps for role in ("target", "drafter")}
    found |= {f"probe-{n}" for n in PROBE_NAMES}
    return found | set(contract_codes()) | set(LAUNCH_REFUSALS)


def test_the_collector_finds_codes_of_every_kind():
    """The measurement can fail: it sees constructor codes, gaps, pd checks, pack rules and probes."""
    got = codes_in_the_code_base()
    for code in (
        "partition-sum",
        "untrusted-acknowledged",
        "target-no-weights",
        "drafter-missing-vocab-size",
        "pd-kv-dtype-mismatch",
        "kimi_k3-aux-attn-res-boundary",
        "probe-partition",
        "dspark-d2t-missing",
        "api-key-env-unset",
        "probes-not-run",
    ):
        assert code in got, code
    assert len(got) > 120


def test_every_code_has_an_entry():
    missing = sorted(c for c in codes_in_the_code_base() if lookup(c) is None)
    assert not missing, f"finding codes raised but not in the registry (ppspec_cli/findings/registry.py): {missing}"


def test_every_entry_is_a_code_the_code_base_reports():
    known = codes_in_the_code_base()
    stale = sorted(c for c in codes() if c != PROBE_ENTRY and c not in known)
    assert not stale, f"registered codes nothing raises (renamed or removed?): {stale}"


def test_every_entry_says_cause_fix_severity_and_question():
    for code, c in codes().items():
        assert c.cause.strip() and c.fix.strip(), code
        assert c.severities and set(c.severities) <= set(SEVERITIES), code
        assert c.question in ("profile", "here"), code


def _raised_severities() -> dict[str, set[str]]:
    """code -> the severities the source raises it with (constructor calls with literal arguments)."""
    out: dict[str, set[str]] = {}
    for root in ("ppspec_cli", "adapters"):
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and len(node.args) >= 2:
                    fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                    if fn in ("_f", "Finding", "finding"):
                        sevs = {s for s in _strings(node.args[1]) if s in SEVERITIES}
                        for c in _strings(node.args[0]):
                            out.setdefault(c, set()).update(sevs)
    return out


def test_codes_are_raised_with_their_registered_severities():
    """The registry's severity is the code's: a literal severity where a code is raised is one the
    registry lists for it (the measurement sees `partition-sum` raised as an error)."""
    raised = _raised_severities()
    assert raised["partition-sum"] == {"error"}
    assert raised["dspark-d2t-missing"] == {"error"} and raised["drafter-beyond-block"] == {
        "warning"
    }  # the drafter contract's, owned by a pack and a method
    entries = {c: lookup(c) for c in raised}
    wrong = sorted(
        f"{c}: raised {sorted(s)}, registered {entries[c].severities}"
        for c, s in raised.items()
        if entries[c] is not None and not s <= set(entries[c].severities)
    )
    assert not wrong, wrong


def test_committed_reference_equals_generated():
    assert DOC.read_text(encoding="utf-8") == findings_reference(), (
        "run `ppspec docs --findings --out docs/findings.md`"
    )


def test_cli_docs_findings_prints_it():
    r = CliRunner().invoke(app, ["docs", "--findings", "--markdown"])
    assert r.exit_code == 0 and r.stdout == findings_reference()


def test_settled_by_names_a_probe():
    """An unknown the registry says a probe settles names a probe that exists (check --probes drops the
    finding when that probe passed: preflight.core.settled_by_probes)."""
    from ppspec_cli.findings.registry import SETTLED_BY

    assert SETTLED_BY and all(p.removeprefix("probe-") in PROBE_NAMES for p in SETTLED_BY.values()), SETTLED_BY
    assert all(TABLE[c].severities == ("warning",) for c in SETTLED_BY)


#: Classes that carry a code, a severity or a fix but are not findings, and why. A new class that
#: looks like a finding (a `code` or `severity` field next to a message, detail or fix) fails
#: test_findings_are_one_type until it is the Finding it should be, or is listed here with why not.
NOT_FINDINGS = {
    "Code": "the registry's row for a code (ppspec_cli/findings/registry.py)",
    "CodeSpec": "a drafter pack manifest's row for a code it owns (joins the registry)",
    "Gap": "what a checkpoint reader could not read; rules report it as target-<gap> / drafter-<gap>",
    "ProbeResult": "a behaviour probe's outcome (passed/failed/not run); it enters the preflight as ProbeResult.finding()",
}


def _finding_like_classes() -> dict[str, str]:
    out: dict[str, str] = {}
    for root in ("ppspec_cli", "adapters"):
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef):
                    continue
                names = {
                    t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)
                }
                names |= {
                    a.arg
                    for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name == "__init__"
                    for a in f.args.args + f.args.kwonlyargs
                }
                if names & {"code", "severity"} and names & {"message", "detail", "fix", "hint", "meaning", "cause"}:
                    out[node.name] = str(path.relative_to(REPO))
    return out


def test_findings_are_one_type():
    """Issue 30: findings exist as one type (ppspec_cli.findings.Finding). The drafter contract's own
    `Breach` is gone: its rules yield Finding. The measurement sees Finding itself."""
    import ppspec_cli.knowledge.methods as methods_pkg
    from ppspec_cli.planning import drafter_contract

    found = _finding_like_classes()
    assert found.get("Finding") == "ppspec_cli/findings/__init__.py", found
    extra = sorted(f"{name} ({path})" for name, path in found.items() if name != "Finding" and name not in NOT_FINDINGS)
    assert not extra, f"a second finding-like type: {extra}; yield ppspec_cli.findings.Finding instead"
    assert not hasattr(methods_pkg, "Breach") and not hasattr(drafter_contract, "Breach")
