"""`ppspec bench --out DIR`: the results directory, owned, locked and walked by descriptor.

bench deletes on every fresh run (an arm's previous results) and a second bench would delete the
first one's: so DIR must be the user's alone (io/helddir.HeldDir.claim: created if absent, not a
link, owned by the user ppspec runs as, writable by no one else; root is no exception), it is
locked for the whole run (`bench.lock`: a second bench on the same DIR is refused while the first
runs, exit 1), and `arms/ARM` is created and cleared relative to the descriptors of DIR and
`arms` (never through a link another user planted at `arms`). The load generator writes its
records under `arms/ARM` by path: every component there was created here and only the owner can
write to DIR, so no one else can redirect it.
"""

from __future__ import annotations

from pathlib import Path

from ppspec_cli.io.helddir import HeldDir

LOCK_FILE = "bench.lock"
ARMS = "arms"


class OutDir:
    """bench's results directory, held and locked until `close()`."""

    def __init__(self, held: HeldDir):
        self.held = held
        self.path = held.path

    @classmethod
    def claim(cls, path: Path) -> "OutDir":
        held = HeldDir.claim(path, where="--out", what="the bench results")
        try:
            held.lock(LOCK_FILE, holder="`ppspec bench`")
        except BaseException:
            held.close()
            raise
        return cls(held)

    def arm_path(self, name: str) -> Path:
        return self.path / ARMS / name

    def clear_arm(self, name: str) -> None:
        """Remove an arm's previous results (relative to descriptors: a planted link is unlinked, never followed)."""
        with self.held.sub(ARMS) as arms:
            arms.remove_tree(name)

    def make_arm(self, name: str) -> Path:
        """`arms/NAME`, created by descriptor and checked (a link or another user's directory there is refused)."""
        with self.held.sub(ARMS) as arms, arms.sub(name):
            pass
        return self.arm_path(name)

    def close(self) -> None:
        self.held.close()
