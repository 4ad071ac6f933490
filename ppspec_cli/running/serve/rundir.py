"""The run directory of one `ppspec serve`: its lock, the files written before the engine starts
(plan file for the plugin, launch record, plugin-status folder), and the engine's private TMPDIR.

`RunDir` is the one way ppspec touches a run directory: it holds the directory open by descriptor
(os.open(dir, O_DIRECTORY | O_NOFOLLOW)) from the lock to the last cleanup, and every write, open,
unlink, mkdir and rmdir is relative to that descriptor (dir_fd=, never through the path again);
cleanup walks with os.fwalk without following links. So a run directory swapped for a symbolic link
while serving is never followed: ppspec keeps working in (and cleaning) the directory it locked.
Every write goes through io.safeio.write_text; every OS failure there (a full or read-only file
system) is one PpspecError naming the run directory, exit 1."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO

from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.io import safeio
from ppspec_cli.running.launch import LaunchSpec, NodeLaunch
from ppspec_cli.running.planfile import plan_file_text, write_plan_file


def runs_root() -> Path:
    """ppspec's runs directory: `runs` under the per-user cache (io/cache: refused when another user
    owns it or can write it), created when missing."""
    from ppspec_cli.io.cache import owned_dir

    return owned_dir("runs")


def default_run_dir(profile_name: str) -> Path:
    """A profile's default run directory (one node; a multi-node profile's nodes get their own:
    planning/placement.node_run_dir)."""
    return runs_root() / profile_name


#: In the run directory: the private TMPDIR of the current run, when it is not <run_dir>/tmp.
PRIVATE_TMP_RECORD = "tmpdir"
#: In the run directory: present while the engine serves (the URL), removed when it stops.
READY_FILE = "ready"
#: vLLM puts UNIX sockets under TMPDIR and their paths must stay under 108 bytes: a TMPDIR path
#: longer than this gets a short private directory under /tmp instead.
MAX_TMPDIR_LEN = 60
#: Everything ppspec creates in a run directory. Anything else there is the user's: ppspec refuses
#: such a directory rather than risk deleting what it did not create.
RUN_DIR_ENTRIES = frozenset(
    {
        "serve.lock",
        "plan.json",
        "launch.json",
        "engine.log",
        "plugin-status",
        "tmp",
        PRIVATE_TMP_RECORD,
        READY_FILE,
        "shm.json",
        "drafter-overlay",
    }
)


class RunDir:
    """A run directory held by descriptor (see the module doc). Also the lock holder: `close()`
    releases the lock and the descriptor."""

    def __init__(self, path: Path, fd: int):
        self.path = Path(path)
        self.fd = fd
        self._lock: IO[str] | None = None
        self.kernel = True  # False: the file system keeps no locks (lock_run_dir goes by the record)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> "RunDir":
        path = Path(path)
        try:
            if create:
                path.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise _error(path, "open", e) from None
        return cls(path, fd)

    def close(self) -> None:
        if self._lock is not None:
            try:  # the lock's record names this process: cleared before the lock goes
                self._lock.seek(0)
                self._lock.truncate()
                self._lock.flush()
            except OSError:
                pass  # the kernel lock still goes with the close; a record left behind is checked by host
            self._lock.close()
            self._lock = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------------

    def entries(self) -> list[str]:
        return os.listdir(self.fd)

    def kind(self, name: str) -> str | None:
        """ "dir", "file", "link", "other", or None when nothing is there (never follows a link)."""
        try:
            mode = os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        return (
            "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "link" if stat.S_ISLNK(mode) else "other"
        )

    def read_text(self, name: str, limit: int) -> str | None:
        """A regular file's text (at most `limit` bytes), None when absent or not a regular file."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            return f.read(limit).decode("utf-8", "replace")

    # -- writing -------------------------------------------------------------------------------

    def write_text(self, name: str, text: str, *, what: str) -> None:
        """`name` in this directory, through the one writer (temp + rename, relative to the descriptor)."""
        safeio.write_text(
            name, text, what=what, where=f"--run-dir ({self.path / name})", dir_fd=self.fd, exit_code=EXIT_REFUSED
        )

    def open_write(self, name: str) -> IO[str]:
        """A new (truncated) text file for streaming (the engine log): never through a link, a
        regular file only."""
        try:
            if self.kind(name) not in (None, "file"):
                raise OSError(errno.EEXIST, f"{name} is not a regular file")
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=self.fd
            )
            return os.fdopen(fd, "w", encoding="utf-8", errors="replace")
        except OSError as e:
            raise _error(self.path / name, "write", e) from None

    def mkdir(self, name: str) -> "RunDir":
        """The subdirectory `name` (created if absent), held by its own descriptor."""
        try:
            try:
                os.mkdir(name, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as e:
            raise _error(self.path / name, "create", e) from None
        return RunDir(self.path / name, fd)

    # -- cleaning (never raises: cleanup must go on) -------------------------------------------

    def unlink(self, name: str) -> None:
        """Remove the file or link `name` (a link itself, never what it points at)."""
        try:
            if self.kind(name) in ("file", "link", "other"):
                os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def rmtree(self, name: str) -> None:
        """Remove `name` and everything under it, relative to descriptors only (os.fwalk, links
        never followed: a link inside is removed as a link). A link at `name` is only unlinked."""
        k = self.kind(name)
        if k in ("file", "link", "other"):
            self.unlink(name)
            return
        if k != "dir":
            return
        try:
            for _root, dirs, files, rootfd in os.fwalk(name, topdown=False, dir_fd=self.fd, follow_symlinks=False):
                for f in files:
                    try:
                        os.unlink(f, dir_fd=rootfd)
                    except OSError:
                        pass
                for d in dirs:
                    try:
                        if stat.S_ISLNK(os.stat(d, dir_fd=rootfd, follow_symlinks=False).st_mode):
                            os.unlink(d, dir_fd=rootfd)
                        else:
                            os.rmdir(d, dir_fd=rootfd)
                    except OSError:
                        pass
            os.rmdir(name, dir_fd=self.fd)
        except OSError:
            pass


def _error(path: Path, action: str, e: OSError) -> PpspecError:
    why = {
        errno.ENOSPC: "the file system is full",
        errno.EROFS: "the file system is read-only",
        errno.EDQUOT: "the disk quota is exhausted",
        errno.EACCES: "permission denied",
        errno.ELOOP: "it is a symbolic link (ppspec does not follow links here)",
    }.get(e.errno or 0, e.strerror or str(e))
    return PpspecError(
        f"cannot {action} {path} in the run directory: {why}",
        where="--run-dir",
        fix="give `ppspec serve` a writable directory with free space (--run-dir)",
        exit_code=EXIT_REFUSED,
    )


def _as_rundir(run_dir: "RunDir | Path") -> tuple[RunDir, bool]:
    """(RunDir, whether the caller must close it)."""
    return (run_dir, False) if isinstance(run_dir, RunDir) else (RunDir.open(Path(run_dir)), True)


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory that holds anything ppspec did not create, or a symbolic link where
    ppspec writes or cleans (cleaning through it would delete files elsewhere)."""
    if os.path.islink(run_dir):
        raise PpspecError(
            f"the run directory {run_dir} is a symbolic link; ppspec does not write or clean through links",
            where="--run-dir",
            fix="pass the directory itself",
            exit_code=EXIT_REFUSED,
        )
    try:
        entries = os.listdir(run_dir)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise PpspecError(
            f"the run directory {run_dir} is not a directory",
            where="--run-dir",
            fix="pass a directory path",
            exit_code=EXIT_REFUSED,
        ) from None
    except OSError as e:
        raise PpspecError(
            f"cannot read the run directory {run_dir}: {e.strerror}",
            where="--run-dir",
            fix="check its permissions",
            exit_code=EXIT_REFUSED,
        ) from None
    foreign = sorted(
        e for e in entries if e not in RUN_DIR_ENTRIES and not (e.startswith(".") and e.endswith(".ppspec-tmp"))
    )
    if entries and "serve.lock" not in entries:
        foreign = sorted(entries)  # serve.lock is the first thing ppspec creates: without it nothing here is ours
    if foreign:
        shown = ", ".join(repr(e)[:60] for e in foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise PpspecError(
            f"the run directory {run_dir} holds files ppspec did not create ({shown}); ppspec cleans its run "
            "directory and never deletes what it did not create",
            where="--run-dir",
            fix="give `ppspec serve` a new or empty directory with --run-dir",
            exit_code=EXIT_REFUSED,
        )
    links = sorted(e for e in entries if os.path.islink(run_dir / e))
    if links:
        raise PpspecError(
            f"{run_dir / links[0]} is a symbolic link; ppspec does not write or clean through links",
            where="--run-dir",
            fix="remove the link (ppspec recreates the entry), or use another --run-dir",
            exit_code=EXIT_REFUSED,
        )


def _missing_parents(path: Path) -> list[Path]:
    out = []
    p = path.absolute()
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


#: The lock file in a run directory; its content names the holder (see lock_run_dir).
LOCK_FILE = "serve.lock"


def _me() -> dict:
    from ppspec_cli.io import netinfo

    return {"host": netinfo.host_name(), "boot_id": netinfo.boot_id(), "pid": os.getpid()}


def _holder(text: str) -> dict | None:
    """The holder a lock record names: {host, boot_id, pid}; a bare pid (records of older ppspec
    versions) has host None; None for an empty or unreadable record."""
    text = text.strip()[:1024]
    if not text:
        return None
    if text.isdigit() and len(text) <= 10:
        return {"host": None, "boot_id": None, "pid": int(text)}
    try:
        rec = json.loads(text.splitlines()[0])
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    host = rec.get("host") if isinstance(rec.get("host"), str) else None
    boot = rec.get("boot_id") if isinstance(rec.get("boot_id"), str) else None
    pid = rec.get("pid") if isinstance(rec.get("pid"), int) and not isinstance(rec.get("pid"), bool) else None
    return {"host": None if host is None else host[:64], "boot_id": None if boot is None else boot[:64], "pid": pid}


def _same_host(rec: dict, me: dict) -> bool:
    return rec.get("host") == me["host"] and (
        rec.get("boot_id") is None or me["boot_id"] is None or rec["boot_id"] == me["boot_id"]
    )


def _pid_alive(pid: int | None) -> bool:
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(rec: dict | None, me: dict) -> str:
    """Who holds the lock, in words. A pid is named as this host's only when the record says so."""
    from ppspec_cli.io.shellout import printable

    if rec is None:
        return "another `ppspec serve` (it has not written its record yet)"
    pid = rec.get("pid")
    if rec.get("host") is None:
        return f"another `ppspec serve` (pid {pid} on an unknown host: an older ppspec's record)"
    if _same_host(rec, me):
        return f"another `ppspec serve` (pid {pid} on this host)"
    return f"`ppspec serve` on host {printable(rec['host'])} (pid {pid} there, not on this host {me['host']})"


def in_use_by(run_dir: Path) -> str | None:
    """Who holds the run directory's lock right now (lock_run_dir's words), or None: free, absent or
    not readable. Looks only: never creates, never takes the lock, never follows a link. `serve`
    asks before its port check, so a second serve of the same profile and run directory says the
    directory is in use (its port is busy too, for the same reason)."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return _describe(_holder(f.read(1024)), _me())
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def lock_run_dir(run_dir: Path) -> RunDir:
    """Hold an exclusive lock on the run directory for the whole serve: a second `ppspec serve` with
    the same run directory would overwrite the plan file and remove the first one's temp files.
    The lock is an exclusive flock on serve.lock (the kernel drops it when this process dies, even
    by SIGKILL; Linux turns flock into a lock on the NFS server, so it holds across the hosts of a
    shared home) plus a record of the holder in the file: host name, boot id and pid, one JSON line.
    A pid is only ever looked at when the record comes from this host and this boot: a lock held on
    another host is reported by host, and another host's record is never taken over from here.
    Returns the run directory held by descriptor; `close()` clears the record and releases both. A
    run directory this call created is removed again when the lock cannot be written (a full or
    read-only file system leaves nothing behind)."""
    check_run_dir(run_dir)
    created = _missing_parents(Path(run_dir))
    rd = RunDir.open(run_dir)
    me = _me()
    try:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=rd.fd)
        f = os.fdopen(fd, "a+", encoding="utf-8")  # held for the whole serve
    except OSError as e:
        rd.close()
        _remove_created(created)
        raise _error(Path(run_dir) / LOCK_FILE, "create", e) from None
    kernel = True
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno != errno.ENOLCK:
            f.seek(0)
            rec = _holder(f.read(1024))
            f.close()
            rd.close()
            raise PpspecError(
                f"{_describe(rec, me)} is using the run directory {run_dir}",
                where="--run-dir",
                fix="stop that server first, or give this one its own --run-dir (multi-node profiles get one per "
                "host and node by default)",
                exit_code=EXIT_REFUSED,
            ) from None
        kernel = False  # the file system keeps no locks (NFS mounted `nolock`): the record alone decides
    f.seek(0)
    rec = _holder(f.read(1024))
    if rec is not None and rec.get("host") is not None and rec.get("pid") != me["pid"]:
        foreign = not _same_host(rec, me)
        if foreign or (not kernel and _pid_alive(rec.get("pid"))):
            f.close()
            rd.close()
            why = (
                "its record is from another host, whose processes this host cannot see, and a lock on this file "
                "system may not reach across hosts"
                if foreign
                else "this file system keeps no locks, and that process is alive"
            )
            raise PpspecError(
                f"{_describe(rec, me)} holds the run directory {run_dir} ({why})",
                where="--run-dir",
                fix="give this node its own --run-dir; if that server no longer runs, remove "
                f"{Path(run_dir) / LOCK_FILE}",
                exit_code=EXIT_REFUSED,
            )
    try:
        f.seek(0)
        f.truncate()
        f.write(json.dumps(me, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())  # on NFS: the record reaches the server before another host reads it
    except OSError as e:
        try:
            f.close()  # flushes what could not be written: fails the same way
        except OSError:
            pass
        rd.unlink(LOCK_FILE)
        rd.close()
        _remove_created(created)
        raise _error(Path(run_dir) / LOCK_FILE, "write", e) from None
    rd._lock = f  # noqa: SLF001
    rd.kernel = kernel
    return rd


def _remove_created(created: list[Path]) -> None:
    for p in created:  # deepest first; only empty directories this call made
        try:
            os.rmdir(p)
        except OSError:
            return


def status_dir(spec: LaunchSpec) -> Path:
    """Where every engine process's plugin writes its status record (kept with the run)."""
    return Path(spec.plan_data.get("status_dir", spec.run_dir / "plugin-status"))


def write_run_files(spec: LaunchSpec, node: NodeLaunch, rd: RunDir | None = None) -> None:
    """Plan file for the plugin and the launch record, written before anything starts; the plugin
    status folder emptied of a previous run's records."""
    rd, own = _as_rundir(rd if rd is not None else spec.run_dir)
    try:
        if spec.plan_file.parent == spec.run_dir:
            rd.write_text(spec.plan_file.name, plan_file_text(spec.plan_data), what="plan file")
        else:
            write_plan_file(spec.plan_file, spec.plan_data)
        status = status_dir(spec)
        if status.parent == spec.run_dir:
            with rd.mkdir(status.name) as sd:
                for name in sd.entries():  # the plugin's records of a previous run (<pid>.json), nothing else
                    if name.endswith(".json") and name[:-5].isdigit():
                        sd.unlink(name)
        else:
            status.mkdir(parents=True, exist_ok=True)
        rec = {
            "node_rank": node.node_rank,
            "role": node.role,
            "argv": node.argv,
            "env": node.env,
            "env_refs": node.env_refs,
            "url": spec.url,
        }
        rd.write_text("launch.json", json.dumps(rec, indent=2) + "\n", what="launch.json")
    finally:
        if own:
            rd.close()


def make_engine_tmp(run_dir: "RunDir | Path") -> Path:
    """The engine's TMPDIR for this run: <run_dir>/tmp, or a short private /tmp/ppspec-* directory
    (recorded in the run dir, for a run killed outright) when that path is too long for sockets.
    A private directory whose record cannot be written is removed again before the error."""
    rd, own = _as_rundir(run_dir)
    try:
        tmp = rd.path / "tmp"
        if len(str(tmp)) > MAX_TMPDIR_LEN:
            try:
                tmp = Path(tempfile.mkdtemp(prefix="ppspec-", dir="/tmp"))
            except OSError as e:
                raise _error(Path("/tmp/ppspec-*"), "create", e) from None
            try:
                rd.write_text(PRIVATE_TMP_RECORD, str(tmp) + "\n", what="the private TMPDIR record")
            except PpspecError:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return tmp
        rd.mkdir("tmp").close()
        return tmp
    finally:
        if own:
            rd.close()


def remove_engine_tmp(run_dir: "RunDir | Path") -> None:
    """Remove the engine's temp dirs: <run_dir>/tmp and the private TMPDIR a run recorded (only a
    /tmp/ppspec-* directory of ours). At the start of a serve they are a killed run's leftovers (we
    hold the lock, so no live run owns them). Relative to the run directory's descriptor: a link
    at `tmp` is unlinked, never followed."""
    try:
        rd, own = (
            _as_rundir(run_dir)
            if isinstance(run_dir, RunDir) or os.path.isdir(run_dir) and not os.path.islink(run_dir)
            else (None, False)
        )
    except PpspecError:
        return
    if rd is None:
        return
    try:
        rd.rmtree("tmp")
        text = rd.read_text(PRIVATE_TMP_RECORD, 4096)
        if text is not None:
            p = Path(text.strip())
            if (
                p.parent == Path("/tmp")
                and p.name.startswith("ppspec-")
                and not p.is_symlink()
                and p.is_dir()
                and p.stat().st_uid == os.getuid()
            ):
                shutil.rmtree(p, ignore_errors=True)
        rd.unlink(PRIVATE_TMP_RECORD)
    finally:
        if own:
            rd.close()
