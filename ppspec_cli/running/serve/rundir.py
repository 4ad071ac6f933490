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

from ppspec_cli.io import safeio
from ppspec_cli.running.planfile import write_plan_file
from ppspec_cli.errors import PpspecError
from ppspec_cli.running.launch import LaunchSpec, NodeLaunch

#: In the run directory: the private TMPDIR of the current run, when it is not <run_dir>/tmp.
PRIVATE_TMP_RECORD = "tmpdir"
#: In the run directory: present while the engine serves (the URL), removed when it stops.
READY_FILE = "ready"
#: vLLM puts UNIX sockets under TMPDIR and their paths must stay under 108 bytes: a TMPDIR path
#: longer than this gets a short private directory under /tmp instead.
MAX_TMPDIR_LEN = 60
#: Everything ppspec creates in a run directory. Anything else there is the user's: ppspec refuses
#: such a directory rather than risk deleting what it did not create.
RUN_DIR_ENTRIES = frozenset({"serve.lock", "plan.json", "launch.json", "engine.log", "plugin-status", "tmp", PRIVATE_TMP_RECORD, READY_FILE, "shm.json", "drafter-overlay"})


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory that holds anything ppspec did not create, or a symbolic link where
    ppspec writes or cleans (cleaning through it would delete files elsewhere)."""
    try:
        entries = os.listdir(run_dir)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise PpspecError(f"the run directory {run_dir} is not a directory", where="--run-dir", fix="pass a directory path", exit_code=1) from None
    except OSError as e:
        raise PpspecError(f"cannot read the run directory {run_dir}: {e.strerror}", where="--run-dir", fix="check its permissions", exit_code=1) from None
    foreign = sorted(e for e in entries if e not in RUN_DIR_ENTRIES and not (e.startswith(".") and e.endswith(".ppspec-tmp")))
    if entries and "serve.lock" not in entries:
        foreign = sorted(entries)  # serve.lock is the first thing ppspec creates: without it nothing here is ours
    if foreign:
        shown = ", ".join(repr(e)[:60] for e in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise PpspecError(
            f"the run directory {run_dir} holds files ppspec did not create ({shown}); ppspec cleans its run directory and never deletes what it did not create",
            where="--run-dir",
            fix="give `ppspec serve` a new or empty directory with --run-dir",
            exit_code=1,
        )
    links = sorted(e for e in entries if os.path.islink(run_dir / e))
    if links:
        raise PpspecError(
            f"{run_dir / links[0]} is a symbolic link; ppspec does not write or clean through links",
            where="--run-dir",
            fix="remove the link (ppspec recreates the entry), or use another --run-dir",
            exit_code=1,
        )


def lock_run_dir(run_dir: Path) -> IO[str]:
    """Hold an exclusive lock on the run directory for the whole serve: a second `ppspec serve` with
    the same run directory would overwrite the plan file and remove the first one's temp files.
    The kernel drops the lock when this process dies, even by SIGKILL. Close the returned file to
    release it."""
    check_run_dir(run_dir)
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


def status_dir(spec: LaunchSpec) -> Path:
    """Where every engine process's plugin writes its status record (kept with the run)."""
    return Path(spec.plan_data.get("status_dir", spec.run_dir / "plugin-status"))


def write_run_files(spec: LaunchSpec, node: NodeLaunch) -> None:
    """Plan file for the plugin and the launch record, written before anything starts; the plugin
    status folder emptied of a previous run's records."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    write_plan_file(spec.plan_file, spec.plan_data)
    status = status_dir(spec)
    if status.is_dir() and not status.is_symlink():
        for f in status.iterdir():  # the plugin's records of a previous run (<pid>.json), nothing else
            if f.suffix == ".json" and f.stem.isdigit() and (f.is_symlink() or f.is_file()):
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
    tmp = run_dir / "tmp"
    if tmp.is_symlink():
        tmp.unlink()  # the link only, never what it points at
    else:
        shutil.rmtree(tmp, ignore_errors=True)  # rmtree does not follow links inside
    rec = run_dir / PRIVATE_TMP_RECORD
    try:
        p = Path(safeio.read_text(rec, limit=4096, what="tmpdir record", follow_symlinks=False).strip())
    except PpspecError:
        return
    if p.parent == Path("/tmp") and p.name.startswith("ppspec-") and not p.is_symlink() and p.is_dir() and p.stat().st_uid == os.getuid():
        shutil.rmtree(p, ignore_errors=True)
    rec.unlink(missing_ok=True)
