"""What an engine leaves in /dev/shm, and what `ppspec serve` removes.

Policy (the one place for it). An entry of /dev/shm is identified by its inode, not its name: a
process that creates a POSIX semaphore maps it under glibc's temporary name (`sem.XXXXXX
(deleted)` in /proc/PID/maps), which is then linked to the real name (`sem.mp-…`), so only the
inode ties a mapping to the entry. "In use" = some process on the machine maps that inode or holds
it open (/proc/*/maps and /proc/*/fd).

While the engine runs, `ShmTracker` records (about once a second) the entries whose inode one of
the engine's own processes maps or holds open. After the engine stopped, `remove_engine_shm`
removes the /dev/shm entries that
  (a) were not there in the snapshot taken just before the engine started,
  (b) are regular files owned by our uid (never a symbolic link, never another user's entry),
  (c) either were recorded by the tracker, or have a name vLLM 0.32's engine processes create and
      the tracker can miss: Python multiprocessing's named semaphores `sem.mp-` + 8 characters (a
      lock tqdm makes in each worker as it loads weights; spawn-started, they outlive a SIGKILL of the
      whole tree, resource tracker included) and `multiprocessing.shared_memory` segments `psm_` +
      8 hex digits (vLLM's message queues), and the CPU workers' shared-memory communicator
      `<VLLM_DIST_IDENT>-<group>:<n>-[<ranks>]-cpushm_<rank>` (the ident is the `vllm_dist_<hex>`
      init file's name, or the port of a tcp:// init) — an entry that lived less than one
      tracker interval, or whose only user was killed before it was seen,
  (d) no process uses, at a look taken at least SETTLE_S after the entry last changed (its ctime):
      a segment another engine has just created and is handing to its peers is not taken.
Several engines on one machine: an entry another live engine uses is mapped by it, so it is kept;
what (c) can take from another engine is only an entry of those shapes that appeared during this
run and that nothing uses any more — its leftover.

When `ppspec serve` itself was killed outright (SIGKILL, OOM), the run dir keeps SHM_RECORD (the
pre-start snapshot and the tracked names; the tracker touches it at every look), and the next
serve of that run dir applies the same rule, with (c)'s shapes limited to entries whose ctime is
no later than the record's last touch + 2 tracker intervals (while the killed run was alive).
An engine that outlives its killed ppspec (it is sent SIGTERM and shuts down) removes its own
entries; one it leaks after that moment stays.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

#: In the run directory: {"before": [...], "seen": [...]} — the /dev/shm names present before the
#: engine started and those its processes used; kept while it runs (touched at every tracker look)
#: so the next serve of this run dir can clean up after a run killed outright (SIGKILL, OOM).
SHM_RECORD = "shm.json"
SHM_DIR = Path("/dev/shm")
#: Seconds between the tracker's looks at the engine's processes.
SCAN_S = 1.0
#: An entry is removed only when unused at a look taken at least this long after it last changed.
SETTLE_S = 1.0
#: Names vLLM 0.32's engine processes create (see the module docstring, (c)).
ENGINE_SHM_NAME = re.compile(
    r"sem\.mp-[a-z0-9_]{8}|psm_[0-9a-f]{8}|(?:vllm_dist_[0-9a-f]{32}|[0-9]+)-[a-z_]+:[0-9]+-\[[0-9-]+\]-cpushm_[0-9]+"
)

Key = tuple[int, int]  # (st_dev, st_ino)


def shm_snapshot() -> set[str]:
    """The names in /dev/shm now (taken before the engine starts: those are never removed)."""
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _ours() -> dict[str, os.stat_result]:
    """The regular files of our uid in /dev/shm (never a symbolic link), by name."""
    out: dict[str, os.stat_result] = {}
    for name in shm_snapshot():
        try:
            st = os.lstat(SHM_DIR / name)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
            out[name] = st
    return out


def _shm_of(pid: int | str) -> set[Key]:
    """The /dev/shm files one process maps or holds open, by inode (empty if it is gone or
    unreadable) — also those mapped under a name that is gone (`… (deleted)`)."""
    prefix = f"{SHM_DIR}/"
    found: set[Key] = set()
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(maxsplit=5)  # address perms offset major:minor inode path
                if len(parts) == 6 and parts[5].startswith(prefix):
                    major, minor = parts[3].split(":")
                    found.add((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])))
    except (OSError, ValueError):
        pass
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    found.add((st.st_dev, st.st_ino))
            except OSError:
                continue
    except OSError:
        pass
    return found


def _shm_in_use() -> set[Key]:
    """Every /dev/shm file some process maps or holds open right now, by inode."""
    used: set[Key] = set()
    for pid in psutil.pids():
        used |= _shm_of(pid)
    return used


def _remove(seen: set[str], before: set[str], shapes_until: float) -> None:
    """Apply the module's rule: unlink each entry of ours not in `before` that is in `seen`, or has
    an engine name and a ctime <= `shapes_until`, once it is settled and nothing uses it."""
    cands = {
        n: st
        for n, st in _ours().items()
        if n not in before and (n in seen or (ENGINE_SHM_NAME.fullmatch(n) and st.st_ctime <= shapes_until))
    }
    if not cands:
        return
    wait = max(st.st_ctime for st in cands.values()) + SETTLE_S - time.time()
    if wait > 0:
        time.sleep(min(wait, SETTLE_S))
    used = _shm_in_use()
    for name, st in cands.items():
        p = SHM_DIR / name
        if (st.st_dev, st.st_ino) not in used:
            safeio.remove_if_unchanged(p, (st.st_dev, st.st_ino, st.st_ctime))


def _names(value: object) -> set[str]:
    return {n for n in value if isinstance(n, str)} if isinstance(value, list) else set()


def _held(run_dir: Any) -> tuple[Any, bool]:
    """The run directory held by descriptor (rundir.RunDir), and whether it was opened here."""
    if hasattr(run_dir, "fd"):
        return run_dir, False
    from ppspec_cli.running.serve.rundir import RunDir

    return RunDir.open(Path(run_dir), create=False), True


def remove_recorded_shm(run_dir: Any) -> None:
    """Clean up after a previous run of this run dir that was killed outright (the module's rule,
    from its record); drop the record. `run_dir`: a rundir.RunDir (or a path, opened here)."""
    try:
        rd, own = _held(run_dir)
    except PpspecError:
        return
    try:
        _remove_recorded(rd)
    finally:
        if own:
            rd.close()


def _remove_recorded(rd: Any) -> None:
    try:
        text = rd.read_text(SHM_RECORD, 1 << 20)
        data = safeio.parse_json(text, what="shm record") if text is not None else None
        if isinstance(data, dict):
            before = data.get("before")
            # its last touch: the killed run was alive then (no snapshot: no untracked entry is its own)
            until = (
                os.stat(SHM_RECORD, dir_fd=rd.fd, follow_symlinks=False).st_mtime + 2 * SCAN_S
                if isinstance(before, list)
                else -math.inf
            )
            _remove(_names(data.get("seen")), _names(before), until)
    except (PpspecError, OSError):
        pass  # no record (the run ended normally) or an unreadable one: nothing is claimed
    rd.unlink(SHM_RECORD)


def remove_engine_shm(run_dir: Any, seen: set[str], before: set[str]) -> None:
    """After the engine stopped: remove what it left (the module's rule) and drop the record."""
    _remove(seen, before, math.inf)
    try:
        rd, own = _held(run_dir)
    except PpspecError:
        return
    rd.unlink(SHM_RECORD)
    if own:
        rd.close()


def engine_left(seen: set[str], before: set[str]) -> list[str]:
    """What of this engine is still in /dev/shm after cleanup, by the module's rule: entries of
    ours (regular, our uid) that were not there before it started and that it used (`seen`), or
    that have an engine's name and nothing uses. Another engine's entries (in use by it, of
    another user, or of no shape vLLM's processes make and never ours) are not this engine's."""
    ours = {n: st for n, st in _ours().items() if n not in before}
    shaped = {n: st for n, st in ours.items() if n not in seen and ENGINE_SHM_NAME.fullmatch(n)}
    used = _shm_in_use() if shaped else set()
    return sorted(
        [n for n in ours if n in seen] + [n for n, st in shaped.items() if (st.st_dev, st.st_ino) not in used]
    )


class ShmTracker(threading.Thread):
    """Remembers the /dev/shm entries the engine's own processes map or hold open, so cleanup
    removes those even when their name follows no known shape."""

    def __init__(self, root_pid: int, interval: float = SCAN_S, record: Any = None, before: set[str] | None = None):
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.seen: set[str] = set()
        self.before = None if before is None else set(before)  # None: the record claims no untracked entry
        self.record = (
            record  # the run directory (rundir.RunDir) whose SHM_RECORD keeps the names for a run killed outright
        )
        self._written: set[str] | None = None
        self._lock = threading.Lock()
        self._stop_evt = threading.Event()

    def _save(self) -> None:
        if self.record is None:
            return
        with self._lock:
            names = set(self.seen)
            try:
                if names != self._written:
                    rec = {"seen": sorted(names)} | ({} if self.before is None else {"before": sorted(self.before)})
                    text = json.dumps(rec) + "\n"
                    if hasattr(self.record, "fd"):
                        self.record.write_text(SHM_RECORD, text, what="the shared-memory record")
                    else:
                        safeio.write_text(self.record, text, what="the shared-memory record")
                    self._written = names
                elif hasattr(self.record, "fd"):
                    os.utime(
                        SHM_RECORD, dir_fd=self.record.fd, follow_symlinks=False
                    )  # the run is alive: see remove_recorded_shm
                else:
                    os.utime(self.record, follow_symlinks=False)
            except (PpspecError, OSError):
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
        used: set[Key] = set()
        for pid in self._pids():
            used |= _shm_of(pid)
        self.seen |= {n for n, st in _ours().items() if (st.st_dev, st.st_ino) in used}
        self._save()

    def run(self) -> None:
        self._save()  # the pre-start snapshot is on disk before the first look
        while not self._stop_evt.wait(self.interval):
            self.scan()

    def stop(self) -> None:
        self._stop_evt.set()
