"""Nothing lost: `serve --run-dir DIR` deletes only what ppspec created there. A directory holding
anything else (a user's `tmp/`, any file) is refused before anything is written or removed, and a
symbolic link where ppspec writes or cleans is refused (cleaning through it would delete elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.running.serve.rundir import lock_run_dir, remove_engine_tmp


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


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


def test_lock_without_file_system_locks_goes_by_the_record(tmp_path, monkeypatch):
    """NFS mounted `nolock` answers flock with ENOLCK: the record alone decides. A live pid on this
    host and boot holds the directory; a dead one's record is taken over; another host's record is
    never taken for a local pid (tests/test_hosts.py runs the cross-host cases on two hosts)."""
    import errno
    import fcntl
    import json
    import subprocess

    from ppspec_cli.io import netinfo

    def nolock(f, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", nolock)
    d = tmp_path / "run"
    lock = lock_run_dir(d)
    assert lock.kernel is False
    me = json.loads((d / "serve.lock").read_text())
    assert me["pid"] == os.getpid() and me["host"] == netinfo.host_name()
    lock.close()
    live = subprocess.Popen(["sleep", "60"])
    try:
        (d / "serve.lock").write_text(json.dumps({**me, "pid": live.pid}) + "\n")
        with pytest.raises(
            PpspecError, match=rf"pid {live.pid} on this host.*keeps no locks, and that process is alive"
        ):
            lock_run_dir(d)
    finally:
        live.kill()
        live.wait()
    lock_run_dir(d).close()  # its pid is dead now: taken over
    (d / "serve.lock").write_text(json.dumps({**me, "host": "elsewhere", "pid": os.getpid() + 1}) + "\n")
    with pytest.raises(PpspecError, match=r"on host elsewhere \(pid \d+ there, not on this host"):
        lock_run_dir(d)
