"""The run directory of one `ppspec serve`: its lock, the files written before the engine starts
(plan file for the plugin, launch record, plugin-status folder), and the engine's private TMPDIR."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO

from .. import safeio
from ..engine.planfile import write_plan_file
from ..errors import PpspecError
from ..launch import LaunchSpec, NodeLaunch

#: In the run directory: the private TMPDIR of the current run, when it is not <run_dir>/tmp.
PRIVATE_TMP_RECORD = "tmpdir"
#: In the run directory: present while the engine serves (the URL), removed when it stops.
READY_FILE = "ready"
#: vLLM puts UNIX sockets under TMPDIR and their paths must stay under 108 bytes: a TMPDIR path
#: longer than this gets a short private directory under /tmp instead.
MAX_TMPDIR_LEN = 60


def lock_run_dir(run_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the run directory for the whole serve: a second `ppspec serve` with
    the same run directory would overwrite the plan file and remove the first one's temp files.
    The kernel drops the lock when this process dies, even by SIGKILL. Close the returned file to
    release it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    f = open(run_dir / "serve.lock", "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole serve
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        other = f.read().strip()[:20]
        f.close()
        raise PpspecError(
            f"another `ppspec serve` (pid {other or 'unknown'}) is using the run directory {run_dir}",
            where="--run-dir",
            fix="stop that server first, or give this one its own --run-dir",
            exit_code=1,
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def write_run_files(spec: LaunchSpec, node: NodeLaunch) -> None:
    """Plan file for the plugin and the launch record, written before anything starts; the plugin
    status folder emptied of a previous run's records."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    write_plan_file(spec.plan_file, spec.plan_data)
    status = Path(spec.plan_data.get("status_dir", spec.run_dir / "plugin-status"))
    if status.is_dir():
        for f in status.iterdir():  # records of a previous run
            if f.is_file() or f.is_symlink():
                f.unlink()
    status.mkdir(parents=True, exist_ok=True)
    rec = {"node_rank": node.node_rank, "role": node.role, "argv": node.argv, "env": node.env, "env_refs": node.env_refs, "url": spec.url}
    safeio.write_text(spec.run_dir / "launch.json", json.dumps(rec, indent=2) + "\n", what="launch.json")


def make_engine_tmp(run_dir: Path) -> Path:
    """The engine's TMPDIR for this run: <run_dir>/tmp, or a short private /tmp/ppspec-* directory
    (recorded in the run dir, for a run killed outright) when that path is too long for sockets."""
    tmp = run_dir / "tmp"
    if len(str(tmp)) > MAX_TMPDIR_LEN:
        tmp = Path(tempfile.mkdtemp(prefix="ppspec-", dir="/tmp"))
        (run_dir / PRIVATE_TMP_RECORD).write_text(str(tmp) + "\n", encoding="utf-8")
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def remove_engine_tmp(run_dir: Path) -> None:
    """Remove the engine's temp dirs: <run_dir>/tmp and the private TMPDIR a run recorded (only a
    /tmp/ppspec-* directory of ours). At the start of a serve they are a killed run's leftovers (we
    hold the lock, so no live run owns them)."""
    shutil.rmtree(run_dir / "tmp", ignore_errors=True)
    rec = run_dir / PRIVATE_TMP_RECORD
    try:
        p = Path(rec.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return
    if p.parent == Path("/tmp") and p.name.startswith("ppspec-") and not p.is_symlink() and p.is_dir() and p.stat().st_uid == os.getuid():
        shutil.rmtree(p, ignore_errors=True)
    rec.unlink(missing_ok=True)
