"""serve's /dev/shm cleanup rule (ppspec_cli/running/serve/residue.py), without an engine.

The rule's directory is pointed at a private directory inside /dev/shm (tmpfs, like the real one;
a live `ppspec serve` elsewhere sees only a directory there, never a candidate). Only the test of
Python's own semaphores reads the real /dev/shm, and removes nothing there.
"""

from __future__ import annotations

import json
import mmap
import multiprocessing
import os
import secrets
import shutil
import tempfile
import time
import types
from pathlib import Path

import pytest

from ppspec_cli.running.serve import residue


@pytest.fixture
def shm(monkeypatch):
    d = Path(tempfile.mkdtemp(prefix="ppspec-test-", dir="/dev/shm"))
    try:
        monkeypatch.setattr(residue, "SHM_DIR", d)
        monkeypatch.setattr(residue, "SETTLE_S", 0.0)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def sem_name() -> str:  # Python multiprocessing's semaphore shape
    return "sem.mp-" + secrets.token_hex(4)


def psm_name() -> str:  # multiprocessing.shared_memory's shape
    return "psm_" + secrets.token_hex(4)


def make(d: Path, name: str) -> Path:
    p = d / name
    p.write_bytes(b"\0" * 64)
    return p


def test_entry_that_appeared_during_the_run_and_was_never_seen_is_removed(shm, tmp_path):
    """The leftover of a SIGKILLed tree: a semaphore and a segment no look of the tracker caught."""
    before = residue.shm_snapshot()
    cpushm = f"vllm_dist_{secrets.token_hex(16)}-pp:0-[0-1]-cpushm_1"  # the CPU workers' communicator
    left = [make(shm, sem_name()), make(shm, psm_name()), make(shm, cpushm), make(shm, "29511-pp:0-[0-1]-cpushm_0")]
    residue.remove_engine_shm(tmp_path, set(), before)
    assert [p.name for p in left if p.exists()] == []


def test_entries_in_use_are_kept_mapped_open_or_under_a_deleted_name(shm, tmp_path):
    before = residue.shm_snapshot()
    mapped, held = make(shm, psm_name()), make(shm, psm_name())
    # a POSIX semaphore as glibc creates it: mapped under a temporary name, then linked to its own
    tmp = make(shm, "sem.Xy12Zq")
    linked = shm / sem_name()
    with open(mapped, "r+b") as fm, open(held, "rb"), open(tmp, "r+b") as ft:
        mm, mt = mmap.mmap(fm.fileno(), 64), mmap.mmap(ft.fileno(), 64)
        os.link(tmp, linked)
        tmp.unlink()
        try:
            residue.remove_engine_shm(tmp_path, {mapped.name, held.name, linked.name}, before)
            assert mapped.exists() and held.exists() and linked.exists()
        finally:
            mm.close()
            mt.close()
    residue.remove_engine_shm(tmp_path, set(), before)  # nobody uses them any more
    assert not mapped.exists() and not held.exists() and not linked.exists()


def test_symlink_preexisting_foreign_shape_and_other_users_entries_are_kept(shm, tmp_path):
    target = make(shm, "target-of-a-link")
    link = shm / psm_name()
    link.symlink_to(target)
    pre = make(shm, sem_name())
    before = residue.shm_snapshot()
    foreign = [
        make(shm, n)
        for n in (
            "vllm_offload_x.mmap",
            "psm_" + secrets.token_hex(5),
            "sem.mp-" + secrets.token_hex(5),
            "mp-" + secrets.token_hex(4),
            "sem.Ab12Cd",
            "vllm_dist_x-pp:0-[0-1]-cpushm_0.bak",
        )
    ]
    other = make(shm, sem_name())
    os.chown(other, os.getuid() + 4242, -1)
    recorded_other = make(shm, "recorded-but-not-ours")
    os.chown(recorded_other, os.getuid() + 4242, -1)
    residue.remove_engine_shm(tmp_path, {recorded_other.name}, before)
    assert pre.exists(), "in the snapshot before the engine started"
    assert link.is_symlink() and target.exists()
    assert all(p.exists() for p in foreign), "names vLLM's engine processes do not create are taken only when tracked"
    assert other.exists() and recorded_other.exists()
    residue.remove_engine_shm(tmp_path, set(), before - {pre.name})  # the snapshot is what kept it
    assert not pre.exists()


def test_tracked_entry_of_any_name_is_removed_and_the_record_dropped(shm, tmp_path):
    before = residue.shm_snapshot()
    tracked = make(shm, "vllm_some_ring_buffer")
    (tmp_path / residue.SHM_RECORD).write_text("{}")
    residue.remove_engine_shm(tmp_path, {tracked.name}, before)
    assert not tracked.exists() and not (tmp_path / residue.SHM_RECORD).exists()


def test_entry_taken_into_use_while_settling_is_kept(shm, tmp_path, monkeypatch):
    """Another engine created a segment just now and is handing it to its peers: nobody maps it at
    the first look, a peer has it mapped by the look after the settle."""
    before = residue.shm_snapshot()
    young = make(shm, psm_name())
    held = []

    def peer_attaches(_s: float) -> None:
        f = open(young, "r+b")
        held.append((f, mmap.mmap(f.fileno(), 64)))

    monkeypatch.setattr(residue, "SETTLE_S", 5.0)
    monkeypatch.setattr(residue, "time", types.SimpleNamespace(time=time.time, sleep=peer_attaches))
    residue.remove_engine_shm(tmp_path, set(), before)
    assert held, "the rule waits for a young entry to settle"
    assert young.exists()
    for f, m in held:
        m.close()
        f.close()


def test_tracker_sees_the_real_name_of_a_semaphore_its_process_created(tmp_path):
    """Python's spawn-context lock: its creator maps it only as `sem.XXXXXX (deleted)` (glibc's
    temporary name) — the tracker must still record `sem.mp-…`, the name left after a SIGKILL."""
    lock = multiprocessing.get_context("spawn").Lock()
    name = "sem" + lock._semlock.name.replace("/", ".")
    assert residue.ENGINE_SHM_NAME.fullmatch(name)
    assert (residue.SHM_DIR / name).exists()
    maps = Path("/proc/self/maps").read_text()
    assert f"/dev/shm/{name}" not in maps, "mapped under its own name: this test no longer covers the case"
    rec = tmp_path / residue.SHM_RECORD
    tracker = residue.ShmTracker(os.getpid(), record=rec, before={"x"})
    tracker.scan()
    assert name in tracker.seen
    data = json.loads(rec.read_text())
    assert data["before"] == ["x"] and name in data["seen"]
    del lock


def test_tracker_touches_its_record_at_every_look(shm, tmp_path):
    rec = tmp_path / residue.SHM_RECORD
    tracker = residue.ShmTracker(os.getpid(), record=rec)
    tracker.scan()
    os.utime(rec, (1_000_000, 1_000_000))
    tracker.scan()
    assert rec.stat().st_mtime > 1_000_000
    assert "before" not in json.loads(rec.read_text()), "no snapshot given: the record must not pretend one"


def test_next_serve_cleans_after_a_run_killed_outright(shm, tmp_path):
    """The record of a killed run: its snapshot, what it tracked, and its last touch bound which
    untracked engine-shaped entries are its own."""
    pre = make(shm, psm_name())
    tracked, untracked = make(shm, "vllm_tracked"), make(shm, sem_name())
    rec = tmp_path / residue.SHM_RECORD
    rec.write_text(json.dumps({"before": [pre.name], "seen": [tracked.name, "../etc/passwd"]}))
    residue.remove_recorded_shm(tmp_path)
    assert pre.exists() and not tracked.exists() and not untracked.exists()
    assert not rec.exists()


def test_next_serve_keeps_what_appeared_after_the_killed_run_was_last_alive(shm, tmp_path):
    rec = tmp_path / residue.SHM_RECORD
    rec.write_text(json.dumps({"before": [], "seen": []}))
    last = time.time() - 60
    os.utime(rec, (last, last))
    later = make(shm, sem_name())
    residue.remove_recorded_shm(tmp_path)
    assert later.exists() and not rec.exists()


@pytest.mark.parametrize("text", ['["psm_00000000"]', "not json", '{"seen": 5, "before": {}}'])
def test_next_serve_with_an_old_or_hostile_record_claims_nothing_untracked(shm, tmp_path, text):
    rec = tmp_path / residue.SHM_RECORD
    rec.write_text(text)
    untracked = make(shm, sem_name())
    residue.remove_recorded_shm(tmp_path)
    assert not rec.exists()
    assert untracked.exists()


def test_only_this_engines_entries_are_reported_left(shm, tmp_path):
    """Issue 29: serve's shutdown line named every new /dev/shm entry, other engines' too. Left of
    ours: what our engine used (seen) and an engine-shaped entry nothing uses; another engine's
    segment (held open by a live process), another user's entry and a name of no engine shape
    that we never used are not ours; and what was there before never is."""
    pre = make(shm, psm_name())
    before = residue.shm_snapshot()
    ours_seen, ours_shaped = make(shm, "anything-our-engine-mapped"), make(shm, sem_name())
    theirs = make(shm, psm_name())
    foreign = make(shm, "vllm_offload_x.mmap")
    other_user = make(shm, sem_name())
    os.chown(other_user, os.getuid() + 4242, -1)
    with open(theirs, "rb"):  # a live engine holds it
        left = residue.engine_left({ours_seen.name}, before)
    assert left == sorted([ours_seen.name, ours_shaped.name]), left
    assert pre.name not in left and theirs.name not in left and foreign.name not in left and other_user.name not in left
