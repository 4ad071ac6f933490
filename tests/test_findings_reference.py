"""Finding codes are objects and findings are made only from them (`TAPS_DEFAULT.at(field, message)`):
the owners register their codes when they load (findings/codes.py, the methods, each pack's rules file,
the probes), a second code of one name is refused, every core code is one the code base reports, and
docs/findings.md and docs/drafters.md's contract table are what `ppspec_cli/operation/reference.py`
generates from the objects. Regenerate: `ppspec docs --findings --out docs/findings.md` and
`python -m ppspec_cli.commands.docs docs/drafters.md`."""

from __future__ import annotations

import ast

import pytest
from conftest import REPO
from typer.testing import CliRunner

from ppspec_cli.cli import app
from ppspec_cli.commands.docs import findings_reference
from ppspec_cli.findings import SEVERITIES, Code, DuplicateCode, Finding, register
from ppspec_cli.findings import codes as core
from ppspec_cli.operation.reference import every_code, with_drafter_table
from ppspec_cli.running.engine.probes import PROBE_NAMES

DOC = REPO / "docs" / "findings.md"
DRAFTERS = REPO / "docs" / "drafters.md"
#: Functions that build a Code from their arguments (a family of codes one owner declares): the only
#: places a Code is constructed outside a module's top level.
CODE_FACTORIES = {"contract_code", "arch_unknown_code", "probe_code", "_gap_codes"}


def _sources():
    for root in ("ppspec_cli", "adapters"):
        for path in sorted((REPO / root).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _calls_inside_functions(tree: ast.AST, name: str) -> list[tuple[str, int]]:
    """(enclosing function, line) of every call to `name` made inside a function body."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                    out.append((fn.name, node.lineno))
    return out


def test_findings_are_made_only_from_code_objects():
    """No `Finding(...)` outside Code.at, no `finding(code_string, ...)` helper, and a Code is
    built at a module's top level (or by a factory of its owner), never from a string in a rule."""
    bad = []
    for path, tree in _sources():
        rel = str(path.relative_to(REPO))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Finding", "finding", "_f"):
                if rel != "ppspec_cli/findings/__init__.py":
                    bad.append(f"{rel}:{node.lineno}: {ast.unparse(node.func)}(...)")
        for fn, line in _calls_inside_functions(tree, "Code"):
            if fn not in CODE_FACTORIES | {"at"}:
                bad.append(f"{rel}:{line}: Code(...) built inside {fn}()")
    assert not bad, bad


def test_the_measurement_sees_a_string_built_finding(tmp_path):
    """The scan above can fail: a rule that builds a Finding itself is found."""
    tree = ast.parse("def rule(r):\n    yield Finding('taps-default', 'warning', 'f', 'm', '')\n    Code('x-y', ())\n")
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Finding"]
    assert _calls_inside_functions(tree, "Code") == [("rule", 3)]


def test_at_takes_the_severity_and_fix_from_the_code():
    f = core.PARTITION_SUM.at("topology.layer_partition", "sums to 30")
    assert (f.code, f.severity, f.hint, f.kind) == (
        "partition-sum",
        "error",
        core.PARTITION_SUM.fix,
        core.PARTITION_SUM,
    )
    assert core.TAPS_NESTED_EAGLE_CONFIG.at("drafter.model", "m").hint == ""  # an info asks nothing of the reader
    assert core.PLATFORM_NOT_SERVED.at("platform", "m", severity="warning").severity == "warning"
    with pytest.raises(ValueError):
        core.PARTITION_SUM.at("topology", "m", severity="info")  # not a severity the code lists
    assert f.to_json() == {
        "code": "partition-sum",
        "severity": "error",
        "field": "topology.layer_partition",
        "message": "sums to 30",
        "hint": core.PARTITION_SUM.fix,
    }


def test_a_second_code_of_one_name_is_refused():
    register("core", core.TAPS_DEFAULT)  # the same object again from its owner: nothing happens
    with pytest.raises(DuplicateCode):
        register("pack acme", core.TAPS_DEFAULT)
    with pytest.raises(DuplicateCode):
        register("core", Code("taps-default", ("error",), "another", "another"))


def _names_used(exclude: str) -> set[str]:
    used: set[str] = set()
    for path, tree in _sources():
        if str(path.relative_to(REPO)) == exclude:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
    return used


def test_every_core_code_is_reported_somewhere():
    """A core code object nothing makes a finding from is stale (renamed or removed)."""
    used = _names_used("ppspec_cli/findings/codes.py") | {"RULE_CRASHED"}
    stale = sorted(c.code for name, c in vars(core).items() if isinstance(c, Code) and name not in used)
    assert not stale, f"core codes nothing reports: {stale}"


def test_every_checkpoint_gap_has_its_code():
    """The gaps the checkpoint reader records are the ones findings.codes.GAPS holds."""
    recorded: set[str] = set()
    tree = ast.parse((REPO / "ppspec_cli/checkpoint/reader.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Gap" and node.args:
            a = node.args[0]
            if isinstance(a, ast.Constant):
                recorded.add(a.value)
    from ppspec_cli.checkpoint.reader import CONFIG_INT_LIMITS

    recorded |= {f"{p}-{k.replace('_', '-')}" for k in CONFIG_INT_LIMITS for p in ("missing", "bad")}
    assert recorded and recorded <= set(core.GAPS["target"]), sorted(recorded - set(core.GAPS["target"]))


def test_every_code_says_cause_fix_severity_and_question():
    codes = every_code()
    assert len(codes) > 150
    for code, c in codes.items():
        assert c.code == code and c.cause.strip() and c.fix.strip(), code
        assert c.severities and set(c.severities) <= set(SEVERITIES), code
        assert c.question in ("profile", "here"), code
    for name in ("kimi_k3-aux-attn-res-boundary", "dspark-d2t-missing", "drafter-beyond-block", "mtp-no-layers"):
        assert name in codes, name  # packs', methods' and the in-target drafter's codes joined
    assert {f"probe-{n}" for n in PROBE_NAMES} <= set(codes)


def test_committed_reference_equals_generated():
    assert DOC.read_text(encoding="utf-8") == findings_reference(), (
        "run `ppspec docs --findings --out docs/findings.md`"
    )
    doc = DRAFTERS.read_text(encoding="utf-8")
    assert doc == with_drafter_table(doc), "run `python -m ppspec_cli.commands.docs docs/drafters.md`"


def test_cli_docs_findings_prints_it():
    r = CliRunner().invoke(app, ["docs", "--findings", "--markdown"])
    assert r.exit_code == 0 and r.stdout == findings_reference()


def test_settled_by_names_a_probe():
    """An unknown a probe settles names a probe that exists (check --probes drops the finding when
    that probe passed: preflight.core.settled_by_probes)."""
    settled = {c.code: c.settled_by for c in every_code().values() if c.settled_by}
    assert settled and all(p.removeprefix("probe-") in PROBE_NAMES for p in settled.values()), settled
    assert all(every_code()[c].severities == ("warning",) for c in settled)


#: Classes that carry a code, a severity or a fix but are not findings, and why. A new class that
#: looks like a finding (a `code` or `severity` field next to a message, detail or fix) fails
#: test_findings_are_one_type until it is the Finding it should be, or is listed here with why not.
NOT_FINDINGS = {
    "Code": "a finding code: the object that makes the findings (ppspec_cli/findings/__init__.py)",
    "Gap": "what a checkpoint reader could not read; rules report it as target-<gap> / drafter-<gap>",
    "ProbeResult": "a behaviour probe's outcome (passed/failed/not run); it enters the preflight as "
    "ProbeResult.finding()",
}


def _finding_like_classes() -> dict[str, str]:
    out: dict[str, str] = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            names = {t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
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
    """Findings exist as one type (ppspec_cli.findings.Finding). The measurement sees Finding itself."""
    found = _finding_like_classes()
    assert found.get("Finding") == "ppspec_cli/findings/__init__.py", found
    extra = sorted(f"{name} ({path})" for name, path in found.items() if name != "Finding" and name not in NOT_FINDINGS)
    assert not extra, f"a second finding-like type: {extra}; yield ppspec_cli.findings.Finding instead"
    assert isinstance(core.TAPS_DEFAULT.at("f", "m"), Finding)
