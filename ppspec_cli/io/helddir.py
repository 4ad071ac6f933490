"""A directory ppspec owns, held open by descriptor, locked, and walked relative to that descriptor.

For output directories a user names (`bench --out DIR`) that ppspec writes into AND deletes from
on later runs. Round 3 made the last component of every delete safe (safeio.remove_tree never
follows a link there), but a path walk still followed links in the middle: `DIR/arms/NAME` with
`arms` a link another user planted in a shared DIR deleted NAME wherever the link pointed. Here:

- `HeldDir.claim(path)`: the directory is created if absent (0o755) and opened with
  O_DIRECTORY|O_NOFOLLOW; on that descriptor it must belong to the user ppspec runs as (root
  included: another user's directory is refused, not used) and no one else may write it (group or
  others' write bit: they could plant entries). One error naming the path otherwise.
- `lock(name)`: an exclusive flock on a file in it, held until `close()`; a second holder is one
  error naming the holder's pid and host (the kernel drops the lock when a process dies).
- `sub(name)`: a subdirectory, created by descriptor (mkdir dir_fd=) and opened with O_NOFOLLOW,
  checked like the root: a link or another user's directory there is refused.
- `remove_tree(name)`: `name` and everything under it, relative to descriptors only (os.fwalk,
  links never followed; a link is unlinked as a link).

A directory held this way cannot be redirected by another user: every component under it was
created by ppspec and only its owner can write there.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import IO

from ppspec_cli.errors import EXIT_USAGE, PpspecError

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _why(e: OSError) -> str:
    return {
        errno.ENOSPC: "the file system is full",
        errno.EROFS: "the file system is read-only",
        errno.EDQUOT: "the disk quota is exhausted",
        errno.EACCES: "permission denied",
        errno.ELOOP: "it is a symbolic link (ppspec does not follow links here)",
        errno.ENOTDIR: "it is not a directory",
    }.get(e.errno or 0, e.strerror or str(e))


def unsafe(st: os.stat_result) -> str | None:
    """Why a directory with this stat may not be used as one ppspec owns (None: it may)."""
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others can write to it (mode {stat.S_IMODE(st.st_mode):o}): they could plant links in it"
    return None


class HeldDir:
    """A directory held by descriptor (see the module doc)."""

    def __init__(self, path: Path, fd: int, where: str, exit_code: int):
        self.path = Path(path)
        self.fd = fd
        self.where = where
        self.exit_code = exit_code
        self._lock: IO[str] | None = None

    def _error(self, what: str, fix: str, exit_code: int | None = None) -> PpspecError:
        return PpspecError(
            what, where=self.where, fix=fix, exit_code=self.exit_code if exit_code is None else exit_code
        )

    # -- opening --------------------------------------------------------------------------------

    @classmethod
    def claim(cls, path: str | os.PathLike[str], *, where: str, what: str, exit_code: int = EXIT_USAGE) -> "HeldDir":
        """The directory at `path` (created if absent), held; refused unless it is yours alone."""
        p = Path(path)
        fix = (
            f"`chmod go-w {str(p)[:200]}` if it is yours, or pass {where} a directory of your own that no one else "
            "can write to (it is created if absent)"
        )
        try:
            if not os.path.lexists(p):
                os.makedirs(p, mode=0o755, exist_ok=True)
            fd = os.open(p, _OPEN_DIR)
        except OSError as e:
            raise PpspecError(
                f"cannot use {str(p)[:200]} for {what}: {_why(e)}", where=where, fix=fix, exit_code=exit_code
            ) from None
        held = cls(p, fd, where, exit_code)
        st = os.fstat(fd)
        why = unsafe(st)
        if why is None and os.geteuid() != 0 and not st.st_mode & stat.S_IWUSR:
            why = "it is not writable"
        if why is not None:
            held.close()
            raise PpspecError(f"cannot use {str(p)[:200]} for {what}: {why}", where=where, fix=fix, exit_code=exit_code)
        return held

    def close(self) -> None:
        if self._lock is not None:
            try:
                self._lock.seek(0)
                self._lock.truncate()
            except OSError:
                pass
            self._lock.close()
            self._lock = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "HeldDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the lock -------------------------------------------------------------------------------

    def lock(self, name: str, *, holder: str) -> None:
        """Hold an exclusive lock on `name` in this directory until close(). `holder` says who
        takes it (`ppspec bench`); a second one is refused with the first one's pid and host."""
        from ppspec_cli.io import netinfo

        try:
            fd = os.open(
                name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644, dir_fd=self.fd
            )
        except OSError as e:
            raise self._error(
                f"cannot lock {self.path / name}: {_why(e)}", "remove what is there, or choose another directory", 1
            ) from None
        f = os.fdopen(fd, "r+", encoding="utf-8", errors="replace")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            f.close()
            raise self._error(f"{self.path / name} is not a regular file", "remove it, or choose another directory", 1)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                rec = _holder(f.read(1024))
                f.close()
                raise self._error(
                    f"another {holder} ({rec}) is using {self.path}",
                    f"wait for it to finish, or give this one another {self.where}",
                    1,
                ) from None
            if e.errno != errno.ENOLCK:
                f.close()
                raise self._error(f"cannot lock {self.path / name}: {_why(e)}", "choose another directory", 1) from None
            # the file system keeps no locks (NFS mounted `nolock`): the record alone is kept
        try:
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "host": netinfo.host_name()}) + "\n")
            f.flush()
        except OSError as e:
            f.close()
            raise self._error(f"cannot write {self.path / name}: {_why(e)}", "free space there", 1) from None
        self._lock = f

    def lock_self(self) -> None:
        """Wait for, then hold until close(), an exclusive lock on the directory itself (no file is
        left in it: a cache whose listing is its content)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno != errno.ENOLCK:  # a file system without locks: go on unlocked
                raise self._error(f"cannot lock {self.path}: {_why(e)}", "choose another directory", 1) from None

    # -- below it -------------------------------------------------------------------------------

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

    def sub(self, name: str, *, create: bool = True) -> "HeldDir":
        """The subdirectory `name` (one component), created if absent, held by its own descriptor."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"not one path component: {name!r}")
        shown = self.path / name
        try:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=self.fd)
                except FileExistsError:
                    pass
            fd = os.open(name, _OPEN_DIR, dir_fd=self.fd)
        except OSError as e:
            raise self._error(
                f"cannot use {shown}: {_why(e)}",
                f"remove {shown} (ppspec recreates it), or choose another {self.where}",
            ) from None
        why = unsafe(os.fstat(fd))
        if why is not None:
            os.close(fd)
            raise self._error(
                f"cannot use {shown}: {why}",
                f"`chmod go-w {shown}` if it is yours, else remove it (ppspec recreates it), or choose another "
                f"{self.where}",
            )
        return HeldDir(shown, fd, self.where, self.exit_code)

    def remove_tree(self, name: str) -> None:
        """Remove `name` and everything under it, relative to descriptors only (os.fwalk, links
        never followed; a link at `name` or inside is unlinked as a link). Nothing there: done."""
        k = self.kind(name)
        try:
            if k in ("file", "link", "other"):
                os.unlink(name, dir_fd=self.fd)
                return
            if k != "dir":
                return
            for _root, dirs, files, rootfd in os.fwalk(name, topdown=False, dir_fd=self.fd, follow_symlinks=False):
                for f in files:
                    os.unlink(f, dir_fd=rootfd)
                for d in dirs:
                    if stat.S_ISLNK(os.stat(d, dir_fd=rootfd, follow_symlinks=False).st_mode):
                        os.unlink(d, dir_fd=rootfd)
                    else:
                        os.rmdir(d, dir_fd=rootfd)
            os.rmdir(name, dir_fd=self.fd)
        except FileNotFoundError:
            return
        except OSError as e:
            raise self._error(
                f"cannot remove {self.path / name}: {_why(e)}", "check its permissions, or choose another directory", 1
            ) from None


def _holder(text: str) -> str:
    """The holder a lock record names, in words."""
    try:
        rec = json.loads(text.strip().splitlines()[0][:1024]) if text.strip() else None
    except ValueError:
        rec = None
    if not isinstance(rec, dict):
        return "its record is not written yet"
    pid, host = rec.get("pid"), rec.get("host")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else "?"
    host = str(host)[:64] if isinstance(host, str) else "?"
    from ppspec_cli.io.shellout import printable

    return f"pid {pid} on host {printable(host)}"
