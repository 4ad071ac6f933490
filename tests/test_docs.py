"""docs/profile-reference.md is generated from the schema and must never drift from it.

Regenerate after a schema change: `ppspec docs --out docs/profile-reference.md`.

The README is the front door (what ppspec is, the two set-up commands first, install, one profile,
the commands, what to read next) and the manual lives in docs/: every link between them resolves,
every command and option of the CLI is in a docs page, every finding code a page names is in the
findings registry (docs/findings.md)."""

from __future__ import annotations

import re
import typing

import pytest
from conftest import REPO, run_ppspec
from pydantic import BaseModel

from ppspec_cli.commands.docs import profile_reference
from ppspec_cli.planning.profile import Profile

DOC = REPO / "docs" / "profile-reference.md"


def _models(model=Profile, seen=None):
    seen = seen if seen is not None else {}
    seen[model] = True
    for f in model.model_fields.values():
        for cand in (f.annotation, *typing.get_args(f.annotation)):
            if isinstance(cand, type) and issubclass(cand, BaseModel) and cand not in seen:
                _models(cand, seen)
    return list(seen)


def test_committed_reference_equals_generated():
    assert DOC.read_text(encoding="utf-8") == profile_reference(), "run `ppspec docs --out docs/profile-reference.md`"


@pytest.mark.slow  # runs the CLI in a subprocess
def test_cli_docs_prints_the_same(tmp_path):
    cp = run_ppspec("docs", "--markdown")
    assert cp.returncode == 0 and cp.stdout == DOC.read_text(encoding="utf-8")
    out = tmp_path / "ref.md"
    cp = run_ppspec("docs", "--out", str(out))
    assert cp.returncode == 0 and out.read_text(encoding="utf-8") == profile_reference()


def test_every_field_is_documented_with_a_description():
    text = profile_reference()
    for model in _models():
        assert (model.__doc__ or "").strip(), f"{model.__name__} has no docstring"
        for name, f in model.model_fields.items():
            assert (f.description or "").strip(), f"{model.__name__}.{name} has no description"
            assert f"| `{name}` |" in text


def test_tables_are_well_formed():
    """Every table row has exactly 4 cells: a `|` inside a type or description is escaped."""
    import re

    for line in profile_reference().splitlines():
        if line.startswith("| `"):
            cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
            assert len(cells) == 4, line


def test_adapters_manifest_reference_is_generated():
    """docs/adapters.md's manifest reference is the schema's (regenerate:
    `python -m ppspec_cli.commands.docs docs/adapters.md`), and names every key and capability."""
    from ppspec_cli.commands.docs import manifest_reference, with_manifest_reference
    from ppspec_cli.knowledge.packs import CAPABILITIES, Manifest

    doc = (REPO / "docs" / "adapters.md").read_text(encoding="utf-8")
    assert doc == with_manifest_reference(doc), "run `python -m ppspec_cli.commands.docs docs/adapters.md`"
    ref = manifest_reference()
    for model in _models(Manifest):
        assert (model.__doc__ or "").strip(), f"{model.__name__} has no docstring"
        for name, f in model.model_fields.items():
            assert (f.description or "").strip(), f"{model.__name__}.{name} has no description"
            assert f"| `{name}` |" in ref
    for cap in CAPABILITIES:
        assert f"| `{cap}` |" in ref


# ---- the README as the front door, the docs pages in step with the CLI and the registry

#: A five-minute read: the README stays this short (the manual is in docs/).
README_MAX_LINES = 120


def doc_pages() -> list:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_readme_is_the_front_door():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= README_MAX_LINES, f"the README has {len(lines)} lines: move the detail into a docs/ page"
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert "bash dev.sh demo" in first_block and "bash dev.sh test" in first_block, "the two set-up commands come first"
    assert text.index("bash dev.sh demo") < text.index("## Install"), "set-up before install"
    assert any("docs/architecture.md" in ln for ln in lines[:10]), "docs/architecture.md is linked near the top"
    for heading in ("## Install on a cluster", "## One profile", "## The commands", "## What to read next"):
        assert heading in text, heading
    # every page of the manual is reachable from the README, by its links and the pages' own
    seen, todo = set(), [REPO / "README.md"]
    while todo:
        page = todo.pop()
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            dest = (page.parent / target).resolve()
            if dest.parent == (REPO / "docs").resolve() and dest.exists() and dest.name not in seen:
                seen.add(dest.name)
                todo.append(dest)
    pages = {p.name for p in (REPO / "docs").glob("*.md")}
    assert pages - seen == set(), f"docs pages no link from the README leads to: {sorted(pages - seen)}"


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings (lowercase, punctuation dropped, spaces to dashes)."""
    out = set()
    in_code = False
    for ln in text.splitlines():
        if ln.startswith("```"):
            in_code = not in_code
        elif not in_code and ln.startswith("#"):
            out.add(re.sub(r"[^a-z0-9 _-]", "", ln.lstrip("#").strip().lower()).replace(" ", "-"))
    return out


def test_every_link_between_the_pages_resolves():
    """Relative links of the README and the docs pages name files that exist, and anchors name
    headings of that page (the move of the manual into docs/ broke none)."""
    bad = []
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad


def test_every_command_and_option_is_in_a_docs_page():
    """`--help` and the docs say the same commands and options: each command path and each of its
    options (every spelling, `-o` too) appears in the README or a docs page."""
    import typer.main

    from ppspec_cli.cli import app

    text = "\n".join(p.read_text(encoding="utf-8") for p in doc_pages())
    missing = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, (*path, name))
            return
        if f"ppspec {' '.join(path)}" not in text:
            missing.append(" ".join(path))
        for p in cmd.params:
            if p.param_type_name == "option" and p.name != "help":
                missing.extend(f"{' '.join(path)} {o}" for o in p.opts if o not in text)

    walk(typer.main.get_command(app), ())
    assert not missing, f"not in any docs page: {missing}"


def test_every_finding_code_a_page_names_is_in_the_registry():
    """A code a page names in backticks (one the code base reports) has its entry in the registry
    and in docs/findings.md; the measurement can fail (it sees codes in the pages)."""
    from ppspec_cli.operation.reference import every_code

    reported = every_code()
    findings = (REPO / "docs" / "findings.md").read_text(encoding="utf-8")
    named = set()
    for page in doc_pages():
        if page.name != "findings.md":
            named |= {
                t
                for t in re.findall(r"`([a-z0-9_]+(?:-[a-z0-9_]+)+)`", page.read_text(encoding="utf-8"))
                if t in reported
            }
    assert {"taps-nested-eagle-config", "topology-master-addr", "untrusted-acknowledged"} <= named, sorted(named)
    missing = sorted(c for c in named if f"`{c}`" not in findings)
    assert not missing, f"codes the docs name without a registry entry: {missing}"


#: Where each figure of docs/testing.md's Figures table is stated in the pages, as the pages phrase it.
FIGURE_PATTERNS = {
    "install": r"(\d+ to \d+ minutes on (?:2 cores|a 2-core box))",
    "venv": r"(about [\d.]+ GB)(?=[^.]{0,40}(?:disk|phases|\)))",
    "suite": r"(?:whole suite|`bash dev\.sh test`)[^.]{0,40}? takes (about \d+ minutes on 2 cores)",
    "fast": r"fast (?:tests|set)[^.]{0,60}? in ((?:under a minute|(?:one|two|three|\d+) to "
    r"(?:one|two|three|four|five|\d+) minutes|about \d+ minutes?))",
}


def _figures() -> dict[str, str]:
    text = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    table = text[text.index("## Figures") :]
    table = table[: table.index("\n## ")]
    return {
        m.group(1): m.group(2) for m in re.finditer(r"^\| (\w[\w-]*) \| ([^|]+?) \| [^|]+ \|$", table, re.MULTILINE)
    }


def test_every_page_states_the_figures_of_the_one_table():
    """Issue 43 item 9: the install time, the .venv's size, the suite's time and the fast set's time
    have one source (docs/testing.md, Figures); every page that states one states that value (the
    README said 20 minutes where the guide said 13, and "under a minute" beside "one to three")."""
    figures = _figures()
    assert set(figures) >= set(FIGURE_PATTERNS), figures
    found: dict[str, list[str]] = {k: [] for k in FIGURE_PATTERNS}
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = " ".join(page.read_text(encoding="utf-8").split())
        if page.name == "testing.md":
            text = text[: text.index("## Figures")] + text[text.index("## Timings") :]
        for name, pat in FIGURE_PATTERNS.items():
            for m in re.finditer(pat, text):
                found[name].append(page.name)
                assert m.group(1) == figures[name], (
                    f"{page.name} says {m.group(1)!r}; docs/testing.md's Figures: {figures[name]!r}"
                )
    for name in FIGURE_PATTERNS:  # the patterns still find the README's and the guide's statements
        assert {"README.md", "guide.md"} <= set(found[name]), (name, found[name])


def test_the_figures_test_fails_on_a_page_that_disagrees():
    figures = _figures()
    wrong = (
        "The whole suite (`bash dev.sh test`) takes about 13 minutes on 2 cores; the fast tests run in under a minute."
    )
    m = re.search(FIGURE_PATTERNS["suite"], wrong)
    assert m and m.group(1) != figures["suite"]
    m = re.search(FIGURE_PATTERNS["fast"], wrong)
    assert m and m.group(1) == "under a minute" != figures["fast"]
