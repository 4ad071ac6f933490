"""Bounded reads: the one way ppspec reads a file it did not just write itself.

Every input file (profile, checkpoint config/index/safetensors header, plan file, saved report,
prompt set, run-dir records) is hostile until proven otherwise:

- the file is opened without blocking and checked on the open descriptor (no race between a check
  and the read): FIFOs, sockets and devices are refused (a FIFO would block forever, /dev/zero
  would fill memory); with `follow_symlinks=False` a symlink is refused too;
- its size is compared with the limit BEFORE anything is read, and the read itself stops at the
  limit (a file that grows between the two is still refused);
- JSON is refused when it nests deeper than `max_depth` (a few bytes of `[[[[...` would otherwise
  recurse the parser to a RecursionError) and when it carries NaN/Infinity (not JSON).

Every refusal is one `error(...)` (PpspecError by default) naming the file and the fix. Standard
library only: the in-engine plugin reads its plan file through this module.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import stat
from typing import Any, Callable

from ppspec_cli.errors import EXIT_REFUSED, EXIT_USAGE, PpspecError

#: Default nesting bound for JSON: metadata files nest a handful of levels.
MAX_JSON_DEPTH = 64

ErrorType = Callable[..., PpspecError]


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _human(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else (f"{n >> 10} KiB" if n >= 1 << 10 else f"{n} bytes")


def _open_regular(
    path: str | os.PathLike[str], what: str, fix: str, follow_symlinks: bool, error: ErrorType, exit_code: int
) -> tuple[int, os.stat_result]:
    """A blocking descriptor on a regular file, checked on the descriptor itself (no check/open race)."""
    where = str(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO with no writer must not block
    except FileNotFoundError:
        raise error(
            f"{what} not found: {where} (it does not exist)", where=where, fix=fix, exit_code=exit_code
        ) from None
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise error(
                f"{what} is a symbolic link; ppspec does not follow it here",
                where=where,
                fix="point at the file itself",
                exit_code=exit_code,
            ) from None
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):  # a socket cannot even be opened (ENXIO)
            raise error(
                f"{what} is {_kind(mode)}, not a regular file", where=where, fix=fix, exit_code=exit_code
            ) from None
        if e.errno == errno.ENAMETOOLONG:
            raise error(
                f"{what} path is longer than the file system allows",
                where=where[:120] + "...",
                fix=fix,
                exit_code=exit_code,
            ) from None
        raise error(
            f"cannot read {what}: {e.strerror or e}",
            where=where,
            fix="check the path and its permissions",
            exit_code=exit_code,
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} is {_kind(st.st_mode)}, not a regular file", where=where, fix=fix, exit_code=exit_code)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _read_up_to(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            break
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_bytes(
    path: str | os.PathLike[str],
    *,
    limit: int,
    what: str = "file",
    fix: str = "check the path",
    follow_symlinks: bool = True,
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_USAGE,
) -> bytes:
    """The contents of a regular file of at most `limit` bytes, else one `error`."""
    fd, st = _open_regular(path, what, fix, follow_symlinks, error, exit_code)
    try:
        if st.st_size > limit:
            raise error(
                f"{what} is larger than {_human(limit)} ({st.st_size} bytes); ppspec does not read it",
                where=str(path),
                fix=fix,
                exit_code=exit_code,
            )
        data = _read_up_to(fd, limit + 1)
    except OSError as e:
        raise error(
            f"cannot read {what}: {e.strerror or e}",
            where=str(path),
            fix="check the path and its permissions",
            exit_code=exit_code,
        ) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise error(f"{what} grew past the {_human(limit)} ppspec reads", where=str(path), fix=fix, exit_code=exit_code)
    return data


def read_text(
    path: str | os.PathLike[str],
    *,
    limit: int,
    what: str = "file",
    fix: str = "check the path",
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_USAGE,
    **kw: Any,
) -> str:
    raw = read_bytes(path, limit=limit, what=what, fix=fix, error=error, exit_code=exit_code, **kw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text", where=str(path), fix=fix, exit_code=exit_code) from None


def json_depth(value: Any) -> int:
    """Deepest nesting of a parsed JSON value (a scalar is 0, `{}` is 1), without recursing. Measured
    on the parsed value: json's own parser stops runaway nesting with RecursionError, and walking the
    containers is ~10x faster than scanning the text (a 13 MB checkpoint index: 0.03 s)."""
    best = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            items: Any = x.values()
        elif isinstance(x, list):
            items = x
        else:
            continue
        best = max(best, d)
        stack.extend((v, d + 1) for v in items if isinstance(v, (dict, list)))
    return best


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(
    data: bytes | str,
    *,
    what: str = "JSON",
    where: str = "",
    fix: str = "check the file",
    max_depth: int = MAX_JSON_DEPTH,
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_USAGE,
) -> Any:
    """json.loads with a nesting bound and strict numbers; one `error` for every way it can fail."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise error(f"{what} is not valid JSON (not UTF-8 text)", where=where, fix=fix, exit_code=exit_code) from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise error(
            f"{what} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
            where=where,
            fix=fix,
            exit_code=exit_code,
        ) from None
    except RecursionError:
        raise error(
            f"{what} nests deeper than the {max_depth} levels ppspec accepts", where=where, fix=fix, exit_code=exit_code
        ) from None
    except ValueError as e:
        raise error(f"{what} is not valid JSON ({str(e)[:120]})", where=where, fix=fix, exit_code=exit_code) from None
    depth = json_depth(value)
    if depth > max_depth:
        raise error(
            f"{what} nests {depth} levels deep, more than the {max_depth} ppspec accepts",
            where=where,
            fix=fix,
            exit_code=exit_code,
        )
    return value


def read_json(
    path: str | os.PathLike[str],
    *,
    limit: int,
    what: str = "JSON file",
    fix: str = "check the file",
    max_depth: int = MAX_JSON_DEPTH,
    follow_symlinks: bool = True,
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_USAGE,
) -> Any:
    raw = read_bytes(
        path, limit=limit, what=what, fix=fix, follow_symlinks=follow_symlinks, error=error, exit_code=exit_code
    )
    return parse_json(raw, what=what, where=str(path), fix=fix, max_depth=max_depth, error=error, exit_code=exit_code)


def read_head(
    path: str | os.PathLike[str],
    n: int,
    *,
    what: str = "file",
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_USAGE,
) -> tuple[bytes, int]:
    """The first `n` bytes of a regular file and its size (for headers of files too big to read)."""
    fd, st = _open_regular(path, what, "check the path", True, error, exit_code)
    try:
        return _read_up_to(fd, n), st.st_size
    except OSError as e:
        raise error(
            f"cannot read {what}: {e.strerror or e}",
            where=str(path),
            fix="check the path and its permissions",
            exit_code=exit_code,
        ) from None
    finally:
        os.close(fd)


def _existing_kind(p: str, dir_fd: int | None = None) -> str | None:
    """What is at `p` when it is something `write_text` must never replace (None: nothing there,
    or a regular file). lstat: a symlink is reported as one, never followed."""
    try:
        mode = os.stat(p, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    except OSError:
        return None  # the write itself reports what is wrong with the path
    if stat.S_ISREG(mode):
        return None
    return "a symbolic link" if stat.S_ISLNK(mode) else _kind(mode)


def write_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    what: str = "file",
    where: str | None = None,
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_REFUSED,
    dir_fd: int | None = None,
    through: bool = False,
) -> None:
    """The one way ppspec writes a file: the text goes through the redaction layer (no registered
    secret reaches a file), is written to a temporary file beside `path`, flushed to disk and renamed
    over it (a reader never sees half a file). Only a regular file (or nothing) at `path` is ever
    replaced. `through=True` (a path the user named: `--out`, `-o`): a character device or FIFO
    there (`--out /dev/null`, a pipe) is written THROUGH (opened without create/truncate, never
    followed, never replaced), and /dev/stdout, /dev/stderr, /dev/fd/N write to that descriptor
    itself. Otherwise (ppspec's own files: caches, records, the run dir) and for a socket,
    directory, block device or symlink, what is there is refused, never renamed over. Every OS failure (write, flush,
    close, rename) is one `error` naming the path; no
    temporary file is left behind. `dir_fd`: `path` is a name in the directory open as that
    descriptor (openat-style: a directory swapped for a link meanwhile is never followed)."""
    from ppspec_cli.io.redact import redact

    try:
        data = redact(text).encode("utf-8")
    except ValueError as e:  # a lone surrogate: no file, one message (as a failed write)
        raise error(
            f"cannot write {what}: {e}",
            where=where or os.fspath(path)[:200],
            fix="choose a writable path (an existing directory you can write to)",
            exit_code=exit_code,
        ) from None
    _replace(path, data, what=what, where=where, error=error, exit_code=exit_code, dir_fd=dir_fd, through=through)


def write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    what: str = "file",
    where: str | None = None,
    error: ErrorType = PpspecError,
    exit_code: int = EXIT_REFUSED,
) -> None:
    """write_text for binary content (a PNG plot): the same temporary file, fsync, rename and
    refusals. No redaction: binary data carries no text a secret could be found in."""
    _replace(path, bytes(data), what=what, where=where, error=error, exit_code=exit_code)


#: Paths that name one of this process's own descriptors (the user's redirection): written to that
#: descriptor directly, never opened by name (so never followed into a replacement).
_STD_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2}
_FD_NAME = re.compile(r"/(?:dev/fd|proc/self/fd)/([0-9]{1,6})")
#: What is written THROUGH (the user named it, e.g. `--out /dev/null`): never replaced, never created.
_THROUGH = ("a character device", "a FIFO")


def named_fd(p: str) -> int | None:
    """The descriptor `p` names (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), or None."""
    if p in _STD_NAMES:
        return _STD_NAMES[p]
    m = _FD_NAME.fullmatch(p)
    return int(m.group(1)) if m else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


#: How long a write into a FIFO waits for a reader to open it (`cat fifo` started just after
#: ppspec): then one error, never a hang on a FIFO nobody reads (one planted where a file was meant).
FIFO_READER_WAIT_S = 2.0


def _open_through(p: str, dir_fd: int | None) -> int:
    """A write descriptor on the device or FIFO at `p`, without O_CREAT/O_TRUNC, never following a
    link; a FIFO with no reader is retried for FIFO_READER_WAIT_S, then ENXIO."""
    import time

    flags = (
        os.O_WRONLY
        | os.O_NONBLOCK
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_NOCTTY", 0)
    )
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            fd = os.open(p, flags, dir_fd=dir_fd)
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() >= deadline:
                if e.errno == errno.ENXIO:
                    raise OSError(errno.ENXIO, f"no process reads the FIFO (waited {FIFO_READER_WAIT_S:g} s)") from None
                raise
            time.sleep(0.05)
            continue
        os.set_blocking(fd, True)
        return fd


def _write_through(p: str, data: bytes, dir_fd: int | None) -> None:
    """Write `data` into the character device or FIFO at `p` (lstat said so): opened without
    O_CREAT/O_TRUNC and with O_NOFOLLOW, and checked again on the descriptor."""
    fd = _open_through(p, dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise OSError(errno.EEXIST, f"{p[:200]} changed while opening it")
        _write_all(fd, data)
    finally:
        os.close(fd)


def _replace(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    what: str,
    where: str | None,
    error: ErrorType,
    exit_code: int,
    dir_fd: int | None = None,
    through: bool = False,
) -> None:
    p = os.fspath(path)
    shown = where or p[:200]
    std = named_fd(p) if through and dir_fd is None else None
    kind = _existing_kind(p, dir_fd)
    if through and (std is not None or kind in _THROUGH):
        try:
            if std is not None:
                import sys

                for stream in (sys.stdout, sys.stderr):  # what ppspec printed before comes first
                    try:
                        stream.flush()
                    except (OSError, ValueError):
                        pass
                _write_all(std, data)
            else:
                _write_through(p, data, dir_fd)
        except OSError as e:
            raise error(
                f"cannot write {what}: {e.strerror or e}",
                where=shown,
                fix="choose a writable path (an existing directory you can write to)",
                exit_code=exit_code,
            ) from None
        return
    if kind is not None:
        raise error(
            f"cannot write {what}: {p[:200]} is {kind}; ppspec only replaces regular files",
            where=shown,
            fix="choose a path that is a regular file or does not exist yet",
            exit_code=exit_code,
        )
    d, name = os.path.split(p)
    if dir_fd is not None and d:
        raise ValueError("with dir_fd, write_text takes a name, not a path")
    tmp = os.path.join(d, f".{name[:200]}.{os.getpid()}.{secrets.token_hex(4)}.ppspec-tmp")
    try:
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
            0o644,
            dir_fd=dir_fd,
        )
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a full disk or a failing NFS server shows here, not after the rename
        kind = _existing_kind(p, dir_fd)  # checked again just before the rename: the path may have changed
        if kind is not None:
            raise OSError(errno.EEXIST, f"{p[:200]} became {kind} while writing; ppspec only replaces regular files")
        os.replace(tmp, p, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except (OSError, ValueError) as e:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        msg = getattr(e, "strerror", None) or str(e)
        raise error(
            f"cannot write {what}: {msg}",
            where=shown,
            fix="choose a writable path (an existing directory you can write to)",
            exit_code=exit_code,
        ) from None


def check_writable(path: str | os.PathLike[str], *, where: str, exit_code: int = EXIT_USAGE) -> None:
    """Refuse at start an output path the user named that `write_text(..., through=True)` could not
    write later (after a long run): a directory, a socket, a symlink, a missing or unwritable parent,
    a name longer than the file system allows. A character device, FIFO or /dev/stdout passes."""
    p = os.fspath(path)
    parent = os.path.dirname(p) or "."
    if len(p.encode("utf-8", "replace")) > 4096 or any(
        len(c.encode("utf-8", "replace")) > 255 for c in p.split(os.sep)
    ):
        raise PpspecError(
            "output path is longer than the file system allows",
            where=where,
            fix="choose a shorter path",
            exit_code=exit_code,
        )
    kind = _existing_kind(p)
    if named_fd(p) is not None or kind in _THROUGH:
        return  # written through (write_text): the user's own descriptor, device or FIFO
    if kind is not None:
        raise PpspecError(
            f"{p[:200]} is {kind}; ppspec only writes regular files or through a character device or FIFO",
            where=where,
            fix="pass the path of a regular file, or of one that does not exist yet",
            exit_code=exit_code,
        )
    if not os.path.isdir(parent):
        raise PpspecError(
            f"directory {parent} does not exist",
            where=where,
            fix="create it first or choose another path",
            exit_code=exit_code,
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PpspecError(
            f"directory {parent} is not writable", where=where, fix="choose a writable path", exit_code=exit_code
        )


def remove_tree(path: str | os.PathLike[str], *, what: str = "directory", exit_code: int = EXIT_REFUSED) -> None:
    """Remove what is at `path` WITHOUT following a symbolic link: a link (planted by another user,
    say) is unlinked itself, never its target; a regular file is unlinked; a directory is removed
    by shutil.rmtree's descriptor-based walk (it never follows a link inside). Nothing there: done."""
    import shutil

    p = os.fspath(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    except OSError as e:
        raise PpspecError(
            f"cannot remove {what}: {e.strerror or e}",
            where=p[:200],
            fix="check the path and its permissions",
            exit_code=exit_code,
        ) from None
    try:
        if stat.S_ISDIR(st.st_mode):
            if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - every Linux Python has it
                raise OSError(errno.ENOTSUP, "this platform's rmtree may follow symbolic links")
            shutil.rmtree(p)
        else:
            os.unlink(p)
    except FileNotFoundError:
        return
    except OSError as e:
        raise PpspecError(
            f"cannot remove {what}: {e.strerror or e}",
            where=p[:200],
            fix="check the path and its permissions (another user's entry in a shared directory cannot be removed: "
            "choose your own --out)",
            exit_code=exit_code,
        ) from None


def make_dirs(
    path: str | os.PathLike[str], *, what: str = "directory", mode: int = 0o755, exit_code: int = EXIT_REFUSED
) -> None:
    """mkdir -p; one error naming the path when it cannot be made (or is not a directory)."""
    p = os.fspath(path)
    try:
        os.makedirs(p, mode=mode, exist_ok=True)
    except OSError as e:
        raise PpspecError(
            f"cannot create {what}: {e.strerror or e}",
            where=p[:200],
            fix="choose a writable path (an existing directory you can write to)",
            exit_code=exit_code,
        ) from None


def open_log(path: str | os.PathLike[str], *, what: str = "log file", exit_code: int = EXIT_REFUSED) -> Any:
    """A fresh text file at `path` for a log (line-buffered). Never written THROUGH what was there: an
    existing entry (a regular file, or a symbolic link planted by another user) is unlinked, never
    truncated or followed, and the new file is created exclusively (O_EXCL|O_NOFOLLOW), so a link
    to someone else's file can never truncate it. A device, FIFO or directory there is refused."""
    p = os.fspath(path)
    kind = _existing_kind(p)
    if kind is not None and kind != "a symbolic link":
        raise PpspecError(
            f"cannot write {what}: {p[:200]} is {kind}",
            where=p[:200],
            fix="remove it, or choose another output directory",
            exit_code=exit_code,
        )
    try:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        fd = os.open(
            p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644
        )
    except OSError as e:
        raise PpspecError(
            f"cannot write {what}: {e.strerror or e}",
            where=p[:200],
            fix="choose a writable path (an existing directory you can write to)",
            exit_code=exit_code,
        ) from None
    return os.fdopen(fd, "w", encoding="utf-8", errors="replace", buffering=1)


def set_mode(path: str | os.PathLike[str], mode: int) -> None:
    """chmod that never follows a symbolic link (a link is left as it is)."""
    if not os.path.islink(path):
        os.chmod(path, mode)


def rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """os.rename (atomic within one file system); OSError as os.rename raises it."""
    os.rename(src, dst)


def symlink(target: str | os.PathLike[str], name: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:
    """Create the symbolic link `name` -> `target` (never replacing what is at `name`)."""
    os.symlink(target, name, dir_fd=dir_fd)


def remove_if_unchanged(path: str | os.PathLike[str], ident: tuple[int, int, float]) -> bool:
    """Unlink `path` only while it is still the entry `ident` = (st_dev, st_ino, st_ctime) seen
    earlier (lstat: never followed): an entry replaced meanwhile is left alone. True when removed."""
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino, st.st_ctime) != ident:
            return False
        os.unlink(path)
        return True
    except OSError:
        return False
