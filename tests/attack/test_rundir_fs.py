"""A run directory on a file system that refuses writes: one clear error (exit 1), no traceback, and
nothing left that this serve created. The refusal is real: the child process runs under
RLIMIT_FSIZE=0, so every write of a byte fails with EFBIG, as on a full disk; a read-only run dir is a
read-only bind mount in a private mount namespace (unshare)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from ppspec_cli.errors import PpspecError
from ppspec_cli.running.serve import rundir
run_dir = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
try:
    rd = rundir.lock_run_dir(run_dir)
    try:
        rd.write_text("launch.json", "{}\n", what="launch.json")
    finally:
        rd.close()
except PpspecError as e:
    print(json.dumps({"exit": e.exit_code, "msg": e.render()}))
    sys.exit(0)
print(json.dumps({"exit": 0, "msg": ""}))
"""


@pytest.mark.parametrize("depth", [1, 3])
def test_full_file_system_is_one_clear_error_and_leaves_nothing(tmp_path, depth):
    run_dir = tmp_path.joinpath(*[f"d{i}" for i in range(depth)])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cp = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir)], capture_output=True, text=True, env=env, timeout=120
    )
    assert "Traceback" not in cp.stderr, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out["exit"] == 1 and "run directory" in out["msg"], out
    assert list(tmp_path.iterdir()) == [], f"left {list(tmp_path.iterdir())}"


def test_private_tmp_is_removed_when_its_record_cannot_be_written(tmp_path, monkeypatch):
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.running.serve import rundir

    long_dir = tmp_path / ("x" * 70)
    rd = rundir.RunDir.open(long_dir)
    before = {p for p in os.listdir("/tmp") if p.startswith("ppspec-")}

    def refuse(*a, **k):
        raise PpspecError("cannot write the private TMPDIR record: the file system is full", exit_code=1)

    monkeypatch.setattr(rd, "write_text", refuse)
    try:
        with pytest.raises(PpspecError):
            rundir.make_engine_tmp(rd)
    finally:
        rd.close()
    assert {p for p in os.listdir("/tmp") if p.startswith("ppspec-")} == before


def _ro_prefix(tmp_path: Path) -> list[str] | None:
    """A command prefix that runs its command with `tmp_path` bind-mounted read-only in a private
    mount namespace (root: `unshare -m`; otherwise a user namespace, `unshare -r -m`), or None where
    this machine allows neither (probed with a write that must fail)."""
    import shutil

    if not shutil.which("unshare") or not shutil.which("mount"):
        return None
    d = str(tmp_path)
    ns = (
        ["unshare", "-m", "--propagation", "private"]
        if os.geteuid() == 0
        else ["unshare", "-r", "-m", "--propagation", "private"]
    )
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    prefix = [*ns, "sh", "-c", script, d]
    probe = subprocess.run(
        [*prefix, "sh", "-c", 'touch "$0/probe" 2>/dev/null && exit 9 || exit 0', d], capture_output=True, timeout=60
    )
    return prefix if probe.returncode == 0 and not (tmp_path / "probe").exists() else None


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_read_only_file_system_is_one_clear_error_naming_the_run_dir(tmp_path, depth):
    """A run dir on a read-only mount (the dir itself, or one to be created under it): one error that
    names the directory, exit 1, no traceback, no hang (the child has a deadline)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    prefix = _ro_prefix(ro)
    if prefix is None:
        pytest.skip(
            "no private mount namespace here (unshare -m / unshare -r -m refused): a read-only mount cannot be made "
            "without changing the host's mounts"
        )
    run_dir = ro.joinpath(*[f"d{i}" for i in range(depth)])
    child = CHILD.replace("resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))\n", "")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cp = subprocess.run(
        [*prefix, sys.executable, "-c", child, str(run_dir)], capture_output=True, text=True, env=env, timeout=120
    )
    assert "Traceback" not in cp.stderr, cp.stderr
    out = json.loads(cp.stdout.strip().splitlines()[-1])
    assert out["exit"] == 1 and "run directory" in out["msg"] and str(run_dir) in out["msg"], out
    assert "read-only" in out["msg"].lower(), out
    assert list(ro.iterdir()) == [], f"left {list(ro.iterdir())}"
