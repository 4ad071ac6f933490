"""HTTP for ppspec (verify's client, serve's health wait): httpx with a TOTAL deadline per exchange.

httpx's timeouts are per socket operation: a server that sends one byte of its headers or body every
second never trips them. Here every socket operation of an exchange (connect, TLS, each read and
write) gets at most the time left until the exchange's deadline, so `request(..., deadline=10)`
returns or fails within ~10 s whatever the server does. Also:

- no proxy for a loopback host (a cluster's `http_proxy` must not swallow health checks of a local
  engine); for other hosts the environment's proxy settings apply, through the same deadline;
- redirects are never followed (one could carry the API key to another host): a 3xx is an answer;
- bodies are streamed and cut at `limit` bytes (a hostile server cannot fill memory);
- every failure is one `NetError` with a `kind`: "dns" (empty or unresolvable host), "refused",
  "timeout", "protocol" (not HTTP), "too-large", "connect".
"""

from __future__ import annotations

import ipaddress
import json as _json
import socket
import ssl
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable

import httpcore
import httpx


class NetError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    body: bytes


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class DeadlineExceeded(Exception):
    """A total deadline passed. Deliberately not an httpx/httpcore error: clients that retry
    timeouts (huggingface_hub retries a stalled download 5 times, a second apart) let it through."""


#: Bytes of status line and headers an exchange may read beyond its body limit.
HEADER_ALLOWANCE = 1 << 20
#: The most one socket operation waits when neither a deadline nor a timeout bounds it.
OP_TIMEOUT = 60.0


class LimitExceeded(Exception):
    """More bytes arrived than a clock's `limit`. Like DeadlineExceeded, not an httpx error: no
    client retries it."""


class Clock:
    """A total deadline and a byte budget shared by the socket operations of one exchange
    (netio.Http) or of all the hub exchanges for one checkpoint (checkpoint.load_hub).
    `deadline` is time.monotonic() based; `limit` bounds the bytes read from the network
    (headers and bodies together) until `reset`."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.limit = float("inf")
        self.used = 0

    def reset(self, deadline_s: float, limit: float) -> None:
        """Start a new budget: `deadline_s` seconds from now, `limit` bytes."""
        self.deadline = time.monotonic() + deadline_s
        self.limit = limit
        self.used = 0

    def clear(self) -> None:
        self.deadline = float("inf")
        self.limit = float("inf")
        self.used = 0

    def count(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise LimitExceeded(f"more than {self.limit:.0f} bytes")

    def over(self) -> bool:
        return self.used > self.limit

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def left(self, timeout: float | None) -> float:
        """Seconds one socket operation may take: never more than the time left, and always finite
        (a socket refuses an infinite timeout with OverflowError): with no deadline set and no
        timeout asked for, one operation gets OP_TIMEOUT."""
        rest = self.deadline - time.monotonic()
        if rest <= 0:
            raise DeadlineExceeded("total deadline passed")
        if timeout is None or not timeout < float("inf"):
            timeout = OP_TIMEOUT
        return min(timeout, rest)

    def run(self, timed_out: type[Exception], op: Callable[[float], Any], timeout: float | None) -> Any:
        """`op(seconds)` with at most the time left; its own timeout at the deadline is the deadline's."""
        try:
            return op(self.left(timeout))
        except timed_out:
            if self.expired():
                raise DeadlineExceeded("total deadline passed") from None
            raise


class _Stream:
    """A network stream whose every operation gets at most the time left on the clock."""

    def __init__(self, inner: Any, clock: Clock, timed_out: type[Exception]):
        self._inner, self._clock, self._timed_out = inner, clock, timed_out

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._clock.run(self._timed_out, lambda t: self._inner.read(max_bytes, t), timeout)
        self._clock.count(len(data))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._clock.run(self._timed_out, lambda t: self._inner.write(buffer, t), timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        inner = self._clock.run(
            self._timed_out, lambda t: self._inner.start_tls(ssl_context, server_hostname, t), timeout
        )
        return _Stream(inner, self._clock, self._timed_out)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """A network backend for httpcore (httpx) or httpcore2 (httpx2, which huggingface_hub runs on):
    the one place where a total deadline becomes per-socket-operation timeouts."""

    def __init__(self, clock: Clock, core: Any):
        self._inner, self._clock, self._timed_out = core.SyncBackend(), clock, core.TimeoutException

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        inner = self._clock.run(
            self._timed_out, lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options), timeout
        )
        return _Stream(inner, self._clock, self._timed_out)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_pool(core: Any, clock: Clock, proxy: str | None, **kw: Any) -> Any:
    """httpcore's (or httpcore2's) connection pool, direct or through `proxy`, on the deadline backend."""
    backend = _Backend(clock, core)
    if not proxy:
        return core.ConnectionPool(network_backend=backend, **kw)
    parts = urllib.parse.urlsplit(proxy)
    if parts.username is not None:  # credentials in the proxy URL go as Proxy-Authorization, as httpx does
        kw["proxy_auth"] = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        proxy = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
    return core.HTTPProxy(proxy_url=proxy, network_backend=backend, **kw)


class _Transport(httpx.HTTPTransport):
    """httpx's transport on a connection pool whose sockets obey the exchange's total deadline."""

    def __init__(self, clock: Clock, proxy: str | None):
        # httpx's own pool, built by its __init__, is replaced right below, and with it the TLS context
        # httpx would make for it: hand it a bare one. Its default loads the CA bundle (certifi), ~20 ms
        # of CPU per client, thrown away: serve's /health poll (a client per poll, 4 a second while
        # the engine starts) spent seconds of CPU per start on it. TLS itself is unchanged: the
        # deadline pool's connections use httpcore's default context, loaded when one is opened.
        super().__init__(verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), trust_env=False)
        self._pool = deadline_pool(httpcore, clock, proxy)


def httpx2_client(clock: Clock, proxy: str | None, **client_kw: Any) -> Any:
    """An httpx2 client (the fork huggingface_hub runs on) whose sockets obey `clock`, TLS as
    httpx2 sets it up by default (system trust store, SSL_CERT_FILE)."""
    import httpcore2
    import httpx2

    class _Transport2(httpx2.HTTPTransport):
        def __init__(self) -> None:
            super().__init__()
            self._pool = deadline_pool(httpcore2, clock, proxy, ssl_context=httpx2.create_ssl_context())

    return httpx2.Client(transport=_Transport2(), **client_kw)


def proxy_for(url: str) -> str | None:
    parts = urllib.parse.urlsplit(url)
    if is_loopback(parts.hostname):
        return None
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _root_cause(e: BaseException) -> BaseException:
    seen = 0
    while (e.__cause__ or e.__context__) is not None and seen < 10:
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
        seen += 1
    return e


class Http:
    """One server's HTTP client. `request` never takes longer than its `deadline`."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self._clock = Clock()
        self._client = httpx.Client(
            transport=_Transport(self._clock, proxy_for(base_url)),
            follow_redirects=False,
            trust_env=False,
            timeout=None,
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        deadline: float,
        limit: int,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        host = urllib.parse.urlsplit(url).hostname
        if not host:
            raise NetError("dns", f"{url} has no host")
        self._clock.reset(deadline, limit + HEADER_ALLOWANCE)
        try:
            hdrs = {"Accept-Encoding": "identity", **(headers or {})}
            body = None
            if json is not None:  # ASCII JSON: a lone surrogate in a value is sent escaped, never a UnicodeEncodeError
                body = _json.dumps(json).encode("ascii")
                hdrs.setdefault("Content-Type", "application/json")
            with self._client.stream(method, url, content=body, headers=hdrs) as resp:
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        raise NetError("too-large", f"{url} sent more than {limit} bytes")
                return Reply(resp.status_code, resp.headers, b"".join(chunks))
        except NetError:
            raise
        except LimitExceeded:
            raise NetError("too-large", f"{url} sent more than {limit} bytes") from None
        except (httpx.TimeoutException, DeadlineExceeded):
            raise NetError("timeout", f"{url} did not answer within {deadline:g} s") from None
        except httpx.ConnectError as e:
            root = _root_cause(e)
            if isinstance(root, socket.gaierror):
                raise NetError("dns", f"cannot resolve the host {host!r}") from None
            if isinstance(root, ConnectionRefusedError) or "refused" in str(e).lower():
                raise NetError("refused", f"connection refused: nothing is listening at {self.base_url}") from None
            raise NetError("connect", f"cannot connect to {url}: {str(e)[:200]}") from None
        except (httpx.RemoteProtocolError, httpx.LocalProtocolError, httpx.DecodingError) as e:
            raise NetError("protocol", f"{url} did not answer with valid HTTP ({str(e)[:160]})") from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as e:
            raise NetError("connect", f"connection to {url} failed: {type(e).__name__}") from None
        finally:
            self._clock.clear()
