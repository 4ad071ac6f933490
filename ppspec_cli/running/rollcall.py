"""The roll call between the `ppspec serve` processes of a multi-node `mp` launch.

vLLM's head waits for every node before it serves, but names none of them, and once serving it
notices a lost node only when the next request fails. So the nodes' ppspec processes keep a small
TCP connection of their own, on launch.master_port + 1 at the head: each worker says which node it
is, and both sides send a heartbeat byte every HEARTBEAT_S. The head can then say which node never
joined, and either side stops its engine within LOST_AFTER_S when the other one is gone.

The head trusts nothing it reads: one bounded hello line, checked against the launch's node count.
"""

from __future__ import annotations

import errno
import select
import socket
import threading
import time

from ppspec_cli.errors import EXIT_REFUSED
from ppspec_cli.planning.rules import rollcall_port  # noqa: F401 - one rule, named in check's findings too

PROTOCOL = b"ppspec-rollcall/1"
HEARTBEAT_S = 2.0
#: A peer silent for this long is lost (a machine that died sends no FIN).
LOST_AFTER_S = 20.0
_HELLO_MAX = 128
_HELLO_TIMEOUT_S = 10.0


class _Peer:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.last_heard = time.monotonic()
        self.closed: str | None = None  # why the connection ended, once it did


def _pump(peer: _Peer, stop: threading.Event) -> None:
    """Send heartbeats, read the other side's, note when it is gone."""
    next_beat = 0.0
    while not stop.is_set() and peer.closed is None:
        now = time.monotonic()
        if now >= next_beat:
            try:
                peer.sock.sendall(b".")
            except OSError:
                peer.closed = "its connection broke"
                break
            next_beat = now + HEARTBEAT_S
        try:
            ready, _, _ = select.select([peer.sock], [], [], 0.5)
        except (OSError, ValueError):
            peer.closed = "its connection broke"
            break
        if ready:
            try:
                data = peer.sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                peer.closed = "its ppspec closed the connection (stopped or failed)"
                break
            peer.last_heard = time.monotonic()
        elif time.monotonic() - peer.last_heard > LOST_AFTER_S:
            peer.closed = f"no heartbeat for {LOST_AFTER_S:.0f}s"
            break
    try:
        peer.sock.close()
    except OSError:
        pass


class Head:
    """Node 0: listens for the workers, knows who joined and who was lost."""

    def __init__(self, nnodes: int, host: str, port: int):
        self.nnodes, self.port = nnodes, port
        self.peers: dict[int, _Peer] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._srv = self._listen(host, port)
        threading.Thread(target=self._accept, daemon=True, name="ppspec-rollcall").start()

    @staticmethod
    def _listen(host: str, port: int) -> socket.socket:
        from ppspec_cli.errors import PpspecError
        from ppspec_cli.io import netinfo

        last: OSError | None = None
        addrs = netinfo.resolve(host) or []
        # The head's own address; all interfaces when it is not local (NAT, aliases), and when the
        # head's name resolves to loopback here (a stock /etc/hosts: 127.0.1.1 HOSTNAME), which the
        # other nodes, resolving the same name to the head's real address, could never reach.
        first = "" if addrs and all(netinfo.is_loopback(a) for a in addrs) else host
        for h in dict.fromkeys((first, "")):
            fam = socket.AF_INET6 if ":" in h else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((h, port))
                s.listen(64)
                return s
            except OSError as e:
                s.close()
                last = e
                if e.errno != errno.EADDRNOTAVAIL:
                    break
        raise PpspecError(
            f"cannot listen for the other nodes on port {port} (launch.master_port + 1): "
            f"{getattr(last, 'strerror', None) or last}",
            where="launch.master_port",
            fix="choose a launch.master_port whose next port is free on the head node (or stop what uses it)",
            exit_code=EXIT_REFUSED,
        )

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._srv], [], [], 0.5)
                if not ready:
                    continue
                sock, _ = self._srv.accept()
            except (OSError, ValueError):
                return
            threading.Thread(target=self._greet, args=(sock,), daemon=True).start()

    def _greet(self, sock: socket.socket) -> None:
        rank = self._hello(sock)
        peer = None
        if rank is not None:
            with self._lock:
                old = self.peers.get(rank)
                if old is None or old.closed is not None:  # a second live node i is refused
                    peer = self.peers[rank] = _Peer(sock)
        try:
            sock.sendall(b"ok\n" if peer is not None else b"no\n")
        except OSError:
            if peer is not None:
                peer.closed = "its connection broke"
        if peer is None or peer.closed is not None:
            sock.close()
            return
        _pump(peer, self._stop)

    def _hello(self, sock: socket.socket) -> int | None:
        sock.settimeout(_HELLO_TIMEOUT_S)
        buf = b""
        try:
            while b"\n" not in buf and len(buf) < _HELLO_MAX:
                chunk = sock.recv(_HELLO_MAX - len(buf))
                if not chunk:
                    return None
                buf += chunk
        except OSError:
            return None
        sock.settimeout(None)
        parts = buf.split(b"\n", 1)[0].split()
        if len(parts) != 3 or parts[0] != PROTOCOL or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        rank, n = int(parts[1]), int(parts[2])
        return rank if n == self.nnodes and 0 < rank < self.nnodes else None

    def missing(self) -> list[int]:
        """Worker ranks that have not joined (or whose connection has ended)."""
        with self._lock:
            return [i for i in range(1, self.nnodes) if i not in self.peers or self.peers[i].closed is not None]

    def lost(self) -> str | None:
        """What went wrong when a node that had joined is gone, else None."""
        with self._lock:
            for i, p in sorted(self.peers.items()):
                if p.closed is not None:
                    return f"node {i} was lost ({p.closed}): the engine cannot run without it"
        return None

    def never_joined(self, addr: str) -> str | None:
        """For a start that timed out: which nodes never reached the head."""
        missing = self.missing()
        if not missing:
            return None
        names = ", ".join(str(i) for i in missing)
        return (
            f"node(s) {names} never joined the head at {addr} (ports {self.port - 1} and {self.port}): start "
            "`ppspec serve PROFILE --node-rank N` there with the same ppspec, vLLM and profile, and check that it "
            "reaches those ports"
        )

    def close(self) -> None:
        self._stop.set()
        try:
            self._srv.close()
        except OSError:
            pass
        with self._lock:
            for p in self.peers.values():
                try:
                    p.sock.close()
                except OSError:
                    pass


class Worker:
    """Node i > 0: joins the head's roll call and notices when the head is gone."""

    def __init__(self, rank: int, nnodes: int, head: str, port: int):
        self.rank, self.nnodes, self.head, self.port = rank, nnodes, head, port
        self.peer: _Peer | None = None
        self.refused = False  # the head said no: another node has this rank, or the launch differs
        self.failed: str | None = None  # why joining failed (start() in the background)
        self._stop = threading.Event()

    def start(self, deadline_s: float) -> None:
        """Join in the background (the engine starts meanwhile); lost() reports a failed join."""

        def run() -> None:
            if self.join(deadline_s, cancelled=self._stop.is_set) or self._stop.is_set():
                return
            if self.refused:
                self.failed = (
                    f"the head at {self.head} refused node {self.rank}: another node already runs as node {self.rank}, "
                    "or this profile's topology.nodes differs from the head's"
                )
            else:
                self.failed = (
                    f"the head (node 0) at {self.head} did not answer on port {self.port} within {deadline_s:.0f}s: "
                    "start "
                    "`ppspec serve PROFILE --node-rank 0` there, and check that this node reaches ports "
                    f"{self.port - 1} and {self.port}"
                )

        threading.Thread(target=run, daemon=True, name="ppspec-rollcall-join").start()

    def join(self, deadline_s: float, cancelled=lambda: False) -> bool:
        """Connect and say who we are, retrying until the head answers or the deadline passes."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s and not cancelled():
            try:
                sock = socket.create_connection((self.head, self.port), timeout=5)
                sock.sendall(PROTOCOL + f" {self.rank} {self.nnodes}\n".encode())
                sock.settimeout(_HELLO_TIMEOUT_S)
                answer = sock.recv(3)
                sock.settimeout(None)
                if answer == b"ok\n":
                    self.peer = _Peer(sock)
                    threading.Thread(
                        target=_pump, args=(self.peer, self._stop), daemon=True, name="ppspec-rollcall"
                    ).start()
                    return True
                sock.close()
                if answer == b"no\n":
                    self.refused = True
                    return False
            except OSError:
                pass
            time.sleep(1.0)
        return False

    def lost(self) -> str | None:
        """What went wrong when the head is gone (or never answered), else None."""
        if self.failed:
            return self.failed
        if self.peer is None or self.peer.closed is None:
            return None
        return f"the head (node 0) was lost ({self.peer.closed}): this node's engine cannot run without it"

    def close(self) -> None:
        self._stop.set()
        if self.peer is not None:
            try:
                self.peer.sock.close()
            except OSError:
                pass
