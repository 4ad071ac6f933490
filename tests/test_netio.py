"""ppspec's one HTTP layer (ppspec_cli/io/netio.py) against hostile loopback servers written with raw
sockets: a server that drips its headers or its body cannot hold an exchange past its total
deadline, bodies are cut at their bound, a loopback host never goes through a proxy, non-HTTP
answers and unresolvable hosts are each their own error; verify's client and serve's health wait
both use it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import netio
from ppspec_cli.running.serve import health_ok, port_free
from ppspec_cli.verify.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures" / "bad"))
from ppspec_attacks import RawServer, drip  # noqa: E402


@pytest.fixture
def raw():
    made = []

    def make(behave):
        s = RawServer(behave)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _call_bounded(fn):
    """Run fn in a thread; a generous join bound guards against a hang (not a speed target)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(_capture(fn)), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the exchange outlived its total deadline (still running after 60 s)"
    return out[0]


def _capture(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the caller checks the type
        return e


@pytest.mark.parametrize(
    "prefix",
    [b"HTTP/1.1 200 OK\r\nX-Slow: ", b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n"],
    ids=["drips-headers", "drips-body"],
)
def test_a_dripping_server_cannot_outlive_the_total_deadline(raw, prefix):
    srv = raw(drip(prefix))
    err = _call_bounded(lambda: netio.Http(srv.url).request("GET", srv.url + "/health", deadline=0.5, limit=1 << 30))
    assert isinstance(err, netio.NetError) and err.kind == "timeout", err
    err = _call_bounded(lambda: Client(srv.url).health(timeout=0.5))
    assert isinstance(err, PpspecError) and "did not answer within 0.5 s" in err.what and err.exit_code == 1
    assert _call_bounded(lambda: health_ok(srv.url, timeout=0.5)) is False


def test_body_is_cut_at_its_bound(raw):
    srv = raw(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n", b"y" * 65536))
    err = _call_bounded(lambda: netio.Http(srv.url).request("GET", srv.url + "/metrics", deadline=30, limit=1 << 20))
    assert isinstance(err, netio.NetError) and err.kind == "too-large"


def test_not_http_is_a_protocol_error(raw):
    srv = raw(lambda conn, stop: conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"))
    err = _call_bounded(lambda: Client(srv.url, timeout=10).models())
    assert isinstance(err, PpspecError) and "valid HTTP" in err.what and err.exit_code == 1


def test_loopback_never_goes_through_a_proxy(raw, monkeypatch):
    ok = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 28\r\n\r\n{"data": [{"id": "m"}]}     '
    srv = raw(lambda conn, stop: conn.sendall(ok))
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # a proxy that is not there
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert _call_bounded(lambda: Client(srv.url, timeout=10).models()) == ["m"]
    assert _call_bounded(lambda: health_ok(srv.url, timeout=10)) is True


def test_a_plain_http_poll_loads_no_ca_bundle(raw, monkeypatch):
    """serve's /health wait makes a client per poll (4 a second while the engine starts): each one
    used to load the CA bundle for a TLS context its transport threw away (~20 ms of CPU a poll,
    seconds per engine start). A plain-HTTP exchange loads none now; an https URL's client still
    has no TLS context of its own (httpcore's default, which verifies, is made on connecting)."""
    import ssl

    loads: list = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(
        ssl.SSLContext, "load_verify_locations", lambda self, *a, **k: loads.append(a) or real(self, *a, **k)
    )
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    srv = raw(lambda conn, stop: conn.sendall(ok))
    assert all(_call_bounded(lambda: health_ok(srv.url, timeout=10)) for _ in range(3))
    assert loads == []
    tls = netio.Http("https://gw.example")
    assert loads == [] and tls._client._transport._pool._ssl_context is None  # noqa: SLF001 - the pool's own field
    tls.close()


def test_redirects_are_answers_not_followed(raw):
    seen = []

    def behave(conn, stop):
        seen.append(1)
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://evil.example/steal\r\nContent-Length: 0\r\n\r\n")

    srv = raw(behave)
    err = _call_bounded(lambda: Client(srv.url, timeout=10).models())
    assert isinstance(err, PpspecError) and "redirect (302)" in err.what and len(seen) == 1


def test_unresolvable_and_empty_hosts_have_their_own_message():
    err = _call_bounded(
        lambda: netio.Http("http://no-such-host.invalid:8000").request(
            "GET", "http://no-such-host.invalid:8000/health", deadline=20, limit=10
        )
    )
    assert isinstance(err, netio.NetError) and err.kind in ("dns", "timeout"), err
    for host, needle in (("", "empty"), ("no-such-host.invalid", "does not resolve"), ("  ", "empty")):
        with pytest.raises(PpspecError, match=needle) as ei:
            port_free(host, 8000)
        assert "in use" not in ei.value.what and ei.value.where == "server.host"
