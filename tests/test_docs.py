"""docs/profile-reference.md is generated from the schema and must never drift from it.

Regenerate after a schema change: `ppspec docs --out docs/profile-reference.md`."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from conftest import REPO, run_ppspec
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
    cp = run_ppspec("docs")
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
