"""What an engine leaves in /dev/shm: tracked while it runs (only its own processes' entries, so
several engines on one machine never lose each other's), removed when it stops, and — when a run
was killed outright (SIGKILL, OOM) — removed by the next serve of the same run directory."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import psutil

from .. import safeio
from ..errors import PpspecError

#: In the run directory: the /dev/shm names the engine used (JSON list), kept while it runs so the
#: next serve of this run dir can remove them when this one was killed outright (SIGKILL, OOM).
SHM_RECORD = "shm.json"


def shm_snapshot() -> set[str]:
    """The names in /dev/shm now (taken before the engine starts: those are never removed)."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def _shm_of(pid: int | str) -> set[str]:
    """The /dev/shm names one process maps or holds open (empty if it is gone or unreadable)."""
    found: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                i = line.find("/dev/shm/")
                if i >= 0:
                    found.add(line[i + 9 :].split()[0])
    except OSError:
        pass
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("/dev/shm/"):
                found.add(t[9:].split(" ")[0])
    except OSError:
        pass
    return found


def _shm_in_use() -> set[str]:
    """Every /dev/shm name some process maps or holds open right now."""
    used: set[str] = set()
    for pid in psutil.pids():
        used |= _shm_of(pid)
    return used


def _unlink_ours(names: object, keep: set[str]) -> None:
    """Unlink /dev/shm/NAME for each plain name in `names` not in `keep` — only regular files of
    ours (never a symlink, never another user's entry)."""
    if not isinstance(names, (list, set)):
        return
    for name in names:
        if not isinstance(name, str) or "/" in name or name in ("", ".", "..") or name in keep:
            continue
        p = Path("/dev/shm") / name
        try:
            if p.is_file() and not p.is_symlink() and p.stat().st_uid == os.getuid():
                p.unlink()
        except OSError:
            pass


def remove_recorded_shm(run_dir: Path) -> None:
    """Remove the /dev/shm entries a previous run of this run dir recorded and did not remove
    (it was killed outright) — only ours, and only those no process uses any more."""
    rec = run_dir / SHM_RECORD
    try:
        names = safeio.read_json(rec, limit=1 << 20, what="shm record", follow_symlinks=False)
    except PpspecError:
        names = None
    if names:
        _unlink_ours(names, _shm_in_use())
    rec.unlink(missing_ok=True)


def remove_engine_shm(run_dir: Path, seen: set[str], before: set[str]) -> None:
    """After the engine stopped: remove the entries its processes used (`seen`), except those that
    existed before it started, and drop the run dir's record of them."""
    _unlink_ours(seen - before, set())
    (run_dir / SHM_RECORD).unlink(missing_ok=True)


class ShmTracker(threading.Thread):
    """Remembers the /dev/shm entries the engine's own processes map or hold open, so cleanup
    removes exactly those and never another engine's (several can run on one machine)."""

    def __init__(self, root_pid: int, interval: float = 1.0, record: Path | None = None):
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.seen: set[str] = set()
        self.record = record  # where the names are kept for a run killed outright (SHM_RECORD)
        self._written: set[str] = set()
        self._lock = threading.Lock()
        self._stop_evt = threading.Event()

    def _save(self) -> None:
        if self.record is None:
            return
        with self._lock:
            names = set(self.seen)
            if names == self._written:
                return
            try:
                safeio.write_text(self.record, json.dumps(sorted(names)) + "\n", what="the shared-memory record")
                self._written = names
            except PpspecError:
                pass  # bookkeeping for a later run: never a reason to stop this one

    def _pids(self) -> list[int]:
        """The engine's processes: its descendants, and the members of its process group (workers
        whose leader died are re-parented to init but stay in the group)."""
        out = {self.root_pid}
        for pid in psutil.pids():
            try:
                if os.getpgid(pid) == self.root_pid:  # start_new_session: the group id is the leader's pid
                    out.add(pid)
            except OSError:
                continue
        for pid in list(out):
            try:
                out.update(c.pid for c in psutil.Process(pid).children(recursive=True))
            except psutil.Error:
                continue
        return sorted(out)

    def scan(self) -> None:
        for pid in self._pids():
            self.seen |= _shm_of(pid)
        self._save()

    def run(self) -> None:
        while not self._stop_evt.wait(self.interval):
            self.scan()

    def stop(self) -> None:
        self._stop_evt.set()
