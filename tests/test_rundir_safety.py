"""Nothing lost: `serve --run-dir DIR` deletes only what ppspec created there. A directory holding
anything else (a user's `tmp/`, any file) is refused before anything is written or removed, and a
symbolic link where ppspec writes or cleans is refused (cleaning through it would delete elsewhere)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.running.serve.rundir import lock_run_dir, remove_engine_tmp


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def test_users_tmp_folder_is_refused_and_kept(tmp_path):
    d = tmp_path / "run"
    (d / "tmp").mkdir(parents=True)
    (d / "tmp" / "thesis.tex").write_text("years of work")
    with pytest.raises(PpspecError, match="did not create") as ei:
        lock_run_dir(d)
    assert ei.value.exit_code == 1 and ei.value.where == "--run-dir"
    assert (d / "tmp" / "thesis.tex").read_text() == "years of work"
    assert not (d / "serve.lock").exists()


def test_foreign_file_next_to_ppspec_files_is_refused(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for n in ("serve.lock", "plan.json", "notes.txt"):
        (d / n).write_text("x")
    with pytest.raises(PpspecError, match="notes.txt"):
        lock_run_dir(d)
    assert (d / "notes.txt").exists()


@pytest.mark.parametrize("entry", ["tmp", "plugin-status", "serve.lock", "launch.json"])
def test_symlinked_entries_are_refused_and_nothing_elsewhere_is_touched(tmp_path, entry):
    elsewhere = tmp_path / "home"
    elsewhere.mkdir()
    (elsewhere / "1234.json").write_text("precious")
    (elsewhere / "keep").write_text("precious")
    before = _tree(elsewhere)
    d = tmp_path / "run"
    d.mkdir()
    (d / "serve.lock").write_text("")
    if entry == "serve.lock":
        (d / "serve.lock").unlink()
        (d / "serve.lock").symlink_to(elsewhere / "keep")
    else:
        (d / entry).symlink_to(elsewhere)
    with pytest.raises(PpspecError, match="symbolic link"):
        lock_run_dir(d)
    remove_engine_tmp(d)  # even called directly, a symlinked tmp is unlinked, never followed
    assert _tree(elsewhere) == before


def test_a_ppspec_run_dir_is_reused(tmp_path):
    d = tmp_path / "run"
    f = lock_run_dir(d)  # new: created, marked by serve.lock
    f.close()
    (d / "tmp").mkdir()
    (d / "tmp" / "engine-socket").write_text("")
    (d / "engine.log").write_text("log")
    f = lock_run_dir(d)
    f.close()
    remove_engine_tmp(d)
    assert not (d / "tmp").exists() and (d / "engine.log").exists()
