"""The roll call between a multi-node launch's ppspec processes (ppspec_cli/running/rollcall.py), on loopback."""

from __future__ import annotations

import socket
import time

import pytest
from enginehelpers import free_port

from ppspec_cli.errors import PpspecError
from ppspec_cli.running import rollcall


def until(cond, deadline_s: float = 15.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("condition not met before the deadline")


@pytest.fixture
def head():
    h = rollcall.Head(3, "127.0.0.1", free_port())
    yield h
    h.close()


def test_join_missing_lost(head):
    assert head.missing() == [1, 2] and head.lost() is None
    w1 = rollcall.Worker(1, 3, "127.0.0.1", head.port)
    assert w1.join(10)
    until(lambda: head.missing() == [2])
    w2 = rollcall.Worker(2, 3, "127.0.0.1", head.port)
    assert w2.join(10)
    until(lambda: head.missing() == [])
    w1.close()  # node 1's ppspec goes away
    assert "node 1 was lost (its ppspec closed the connection" in until(head.lost)
    assert head.missing() == [1]
    assert "node(s) 1 never joined" in head.never_joined("h")
    assert w2.lost() is None
    head.close()  # the head goes away: node 2 notices
    assert "the head (node 0) was lost (its ppspec closed the connection" in until(w2.lost)
    w2.close()


def test_hostile_or_wrong_hellos_are_refused(head):
    for hello in (
        b"GET / HTTP/1.1\r\n\r\n",
        b"ppspec-rollcall/1 0 3\n",
        b"ppspec-rollcall/1 3 3\n",
        b"ppspec-rollcall/1 1 2\n",
        b"x" * 5000,
        b"ppspec-rollcall/1 -1 3\n",
    ):
        with socket.create_connection(("127.0.0.1", head.port), timeout=5) as s:
            s.sendall(hello)
            s.settimeout(15)
            assert s.recv(16) in (b"no\n", b"")
    assert head.missing() == [1, 2] and head.lost() is None
    assert "node(s) 1, 2 never joined the head at 10.0.0.1" in head.never_joined("10.0.0.1")
    w = rollcall.Worker(1, 3, "127.0.0.1", head.port)
    assert w.join(10)
    dup = rollcall.Worker(1, 3, "127.0.0.1", head.port)
    assert not dup.join(10) and dup.refused  # a second node 1 is refused at once
    w.close()


def test_silent_peer_is_lost(head, monkeypatch):
    """A node whose machine died sends nothing, not even a FIN: silence is loss."""
    monkeypatch.setattr(rollcall, "LOST_AFTER_S", 1.0)
    s = socket.create_connection(("127.0.0.1", head.port), timeout=5)
    s.sendall(b"ppspec-rollcall/1 2 3\n")
    assert s.recv(3) == b"ok\n"
    assert "node 2 was lost (no heartbeat for 1s)" in until(head.lost)
    s.close()


def test_join_gives_up_at_the_deadline_and_port_in_use_is_an_error():
    port = free_port()
    w = rollcall.Worker(1, 2, "127.0.0.1", port)
    w.start(1.5)  # in the background, as serve does
    assert "the head (node 0) at 127.0.0.1 did not answer" in until(w.lost)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen(1)
        with pytest.raises(PpspecError, match="launch.master_port \\+ 1"):
            rollcall.Head(2, "127.0.0.1", port)
