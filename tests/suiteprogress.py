"""A count and an ETA for a long pytest run (issue 43 item 8): `bash dev.sh test` printed bare dots,
30 of 2,773 in its first three minutes (the long engine files run first), with no count and no
idea how long the rest would take.

Registered by tests/conftest.py in the process that reports (the xdist controller, or the only
process): every PPSPEC_PROGRESS_SECONDS (default 60; 0 turns it off) it writes one line,

    progress: 812/2785 tests, 0 failed, 6m10s; about 8m left (2 workers)

when a test finishes, and from a timer thread when none has finished for that long (a long engine
test). The ETA: each file's expected seconds (its duration in the previous run, kept in pytest's
cache; else conftest.LONG_FIRST's figure; else a figure per test), less what its tests took so far,
summed over the files not finished, scaled by how the finished files compared with their
expectation, divided among the workers."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import pytest

#: The pytest cache key holding each file's seconds from the last run that ran it.
CACHE_KEY = "ppspec/file-seconds"
#: Seconds per test of a file nothing else says anything about (the fast set: ~2,000 tests in ~80 s).
PER_TEST_S = 0.05


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _clock(s: float) -> str:
    s = max(0, int(round(s)))
    return f"{s // 60}m{s % 60:02d}s"


@dataclass
class Tally:
    """What the run has done so far; `line()` is the progress line (pure: the tests call it)."""

    expected: dict[str, float]  # file (path as in node ids, or its base name) -> expected seconds
    workers: int = 1
    total: int = 0
    per_file: dict[str, int] = field(default_factory=dict)  # file -> its tests
    done_per_file: dict[str, int] = field(default_factory=dict)
    seconds_per_file: dict[str, float] = field(default_factory=dict)  # setup + call + teardown so far
    done: int = 0
    failed_ids: set[str] = field(default_factory=set)

    def collected(self, nodeids: list[str]) -> None:
        if self.total:  # every xdist worker reports the same collection
            return
        self.total = len(nodeids)
        for n in nodeids:
            f = _file(n)
            self.per_file[f] = self.per_file.get(f, 0) + 1

    def report(self, nodeid: str, when: str, duration: float, failed: bool) -> None:
        f = _file(nodeid)
        self.seconds_per_file[f] = self.seconds_per_file.get(f, 0.0) + max(0.0, duration)
        if failed:  # a test counts once, whichever of setup, call and teardown failed
            self.failed_ids.add(nodeid)
        if when == "teardown":
            self.done += 1
            self.done_per_file[f] = self.done_per_file.get(f, 0) + 1

    @property
    def failed(self) -> int:
        return len(self.failed_ids)

    def _expect(self, f: str) -> float:
        for key in (f, os.path.basename(f)):
            if key in self.expected:
                return float(self.expected[key])
        return PER_TEST_S * self.per_file.get(f, 0)

    def eta(self) -> float | None:
        """Seconds left (None before the collection is known)."""
        if not self.total:
            return None
        finished = [f for f, n in self.per_file.items() if self.done_per_file.get(f, 0) >= n]
        exp_done = sum(self._expect(f) for f in finished)
        act_done = sum(self.seconds_per_file.get(f, 0.0) for f in finished)
        scale = min(3.0, max(0.5, act_done / exp_done)) if exp_done >= 30 else 1.0
        left = 0.0
        for f, n in self.per_file.items():
            if self.done_per_file.get(f, 0) >= n:
                continue
            left += max(self._expect(f) * scale - self.seconds_per_file.get(f, 0.0), 0.0)
        return left / max(1, self.workers)

    def line(self, elapsed: float) -> str:
        eta = self.eta()
        head = f"progress: {self.done}/{self.total or '?'} tests, {self.failed} failed, {_clock(elapsed)}"
        if eta is None or self.done >= self.total:
            return head
        return head + f"; about {_clock(eta)} left ({self.workers} worker{'s' if self.workers != 1 else ''})"


class Progress:
    """The pytest plugin: feeds a Tally from the reports and prints its line (see the module doc)."""

    def __init__(self, config, expected: dict[str, float], interval: float):
        self.config = config
        self.interval = interval
        self.tally = Tally(expected=dict(expected))
        self.t0 = time.monotonic()
        self.last = self.t0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.nodes: set[str] = set()
        self.thread: threading.Thread | None = None

    # -- hooks -------------------------------------------------------------------------------

    def pytest_collection_finish(self, session):  # the only process (no xdist)
        self.tally.collected([it.nodeid for it in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):  # the controller of an xdist run
        self.nodes.add(str(getattr(getattr(node, "gateway", None), "id", id(node))))
        self.tally.workers = max(self.tally.workers, len(self.nodes))
        self.tally.collected(list(ids))

    def pytest_sessionstart(self, session):
        if self.interval > 0:
            self.thread = threading.Thread(target=self._tick, name="ppspec-progress", daemon=True)
            self.thread.start()

    def pytest_runtest_logreport(self, report):
        with self.lock:
            self.tally.report(report.nodeid, report.when, getattr(report, "duration", 0.0) or 0.0, report.failed)
        self._maybe_print()

    def pytest_sessionfinish(self, session):
        self.stop.set()
        cache = getattr(self.config, "cache", None)
        if cache is None:
            return
        old = cache.get(CACHE_KEY, {})
        if not isinstance(old, dict):
            old = {}
        t = self.tally
        finished = {
            f: round(s, 1) for f, s in t.seconds_per_file.items() if t.done_per_file.get(f, 0) >= t.per_file.get(f, 1)
        }
        cache.set(CACHE_KEY, {**old, **finished})

    # -- printing ----------------------------------------------------------------------------

    def _maybe_print(self) -> None:
        now = time.monotonic()
        with self.lock:
            if self.interval <= 0 or now - self.last < self.interval:
                return
            self.last = now
            text = self.tally.line(now - self.t0)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            return
        tr.ensure_newline()
        tr.write_line(text)

    def _tick(self) -> None:
        while not self.stop.wait(min(self.interval, 5.0)):
            self._maybe_print()


def register(config, long_first: dict[str, float]) -> None:
    """From conftest's pytest_configure: in the reporting process only, unless turned off."""
    if os.environ.get("PYTEST_XDIST_WORKER") or config.pluginmanager.has_plugin("ppspec-progress"):
        return
    raw = os.environ.get("PPSPEC_PROGRESS_SECONDS", "60")
    try:
        interval = float(raw)
    except ValueError:
        interval = 60.0
    if interval <= 0:
        return
    cache = getattr(config, "cache", None)
    expected = dict(long_first)
    if cache is not None:
        kept = cache.get(CACHE_KEY, {})
        if isinstance(kept, dict):
            expected.update({k: float(v) for k, v in kept.items() if isinstance(v, (int, float))})
    config.pluginmanager.register(Progress(config, expected, interval), "ppspec-progress")


def pytest_configure(config):
    """Loaded as a plugin elsewhere (`-p suiteprogress` with tests/ on the path): no file estimates."""
    register(config, {})
