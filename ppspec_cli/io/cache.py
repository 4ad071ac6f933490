"""ppspec's caches (demo models, the install-keyed cache: knowledge/installcache.py) and default run dirs:
under one root owned by the user (io/settings.cache_root: $PPSPEC_CACHE, else the per-user cache
directory), never trusted when someone else could have put something there.

`owned_dir(*parts)` creates the directory (0700) if missing and refuses, naming the path, a cache
root (a link's target) or sub-directory (never a link) that is not a directory, is not owned by
this user, or is writable by the group or by others: a file planted there by another user (a demo model, an
option-name list) would otherwise reach the engine. `check_owned(path)` holds the same for a file
read back from the cache. Inside an owned directory nobody else can swap a file in, so a file that
passes the check stays the one read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ppspec_cli.errors import EXIT_USAGE, PpspecError
from ppspec_cli.io.settings import cache_root

_FIX = (
    "use a cache directory of your own: unset PPSPEC_CACHE (the default is per-user) or point it at a directory "
    "only you can write (chmod 700)"
)


def _refuse(p: Path | str, why: str) -> PpspecError:
    return PpspecError(
        f"ppspec's cache {p} {why}; ppspec does not use it", where=str(p), fix=_FIX, exit_code=EXIT_USAGE
    )


def check_owned(p: Path, *, directory: bool, shown: str | None = None) -> None:
    """Refuse `p` unless it is (a directory / a regular file) of this user, not group/world writable.
    `shown`: how the message names it (a link's name and its target)."""
    name = shown or p
    try:
        st = os.lstat(p)
    except OSError as e:
        raise _refuse(name, f"cannot be inspected ({e.strerror or e})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(name, "is a symbolic link")
    if directory and not stat.S_ISDIR(st.st_mode):
        raise _refuse(name, "is not a directory")
    if not directory and not stat.S_ISREG(st.st_mode):
        raise _refuse(name, "is not a regular file")
    if st.st_uid != os.geteuid():
        raise _refuse(name, f"is owned by another user (uid {st.st_uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(
            name,
            f"is writable by {'others' if st.st_mode & stat.S_IWOTH else 'its group'} (mode "
            f"{stat.S_IMODE(st.st_mode):o})",
        )


def owned_dir(*parts: str, create: bool = True) -> Path:
    """cache_root()/parts..., each level created 0700 when missing and checked (check_owned)."""
    p = cache_root()
    shown: str | None = None
    if os.path.islink(p):
        if not os.path.exists(p):
            raise _refuse(p, "is a symbolic link to nothing")
        shown = f"{p} (a link to {os.path.realpath(p)})"
        p = Path(
            os.path.realpath(p)
        )  # the root may be a link of the user's (~/.cache on /scratch): its target is judged
    for part in ("", *parts):
        p = p / part if part else p
        if create and not os.path.lexists(p):
            try:
                os.makedirs(p, mode=0o700, exist_ok=True)
            except OSError as e:
                raise PpspecError(
                    f"cannot create ppspec's cache {p}: {e.strerror or e}", where=str(p), fix=_FIX, exit_code=EXIT_USAGE
                ) from None
        elif not os.path.lexists(p):
            return cache_root().joinpath(*parts)
        check_owned(p, directory=True, shown=shown if not part else None)
    return p


def owned_file(path: Path) -> bool:
    """True when `path` exists and passes check_owned (False: it does not exist; a planted one is refused)."""
    if not os.path.lexists(path):
        return False
    check_owned(path, directory=False)
    return True
