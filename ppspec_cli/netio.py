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
import socket
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

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


class _Clock:
    """The deadline of the exchange in progress (one exchange at a time per client)."""

    def __init__(self) -> None:
        self.deadline = float("inf")

    def left(self, timeout: float | None) -> float:
        rest = self.deadline - time.monotonic()
        if rest <= 0:
            raise TimeoutError("total deadline passed")
        return rest if timeout is None else min(timeout, rest)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, clock: _Clock):
        self._inner, self._clock = inner, clock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            t = self._clock.left(timeout)
        except TimeoutError:
            raise httpcore.ReadTimeout("total deadline passed") from None
        return self._inner.read(max_bytes, t)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            t = self._clock.left(timeout)
        except TimeoutError:
            raise httpcore.WriteTimeout("total deadline passed") from None
        self._inner.write(buffer, t)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, self._clock.left(timeout)), self._clock)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.SyncBackend):
    def __init__(self, clock: _Clock):
        self._clock = clock

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        try:
            t = self._clock.left(timeout)
        except TimeoutError:
            raise httpcore.ConnectTimeout("total deadline passed") from None
        return _Stream(super().connect_tcp(host, port, t, local_address, socket_options), self._clock)


class _Transport(httpx.HTTPTransport):
    """httpx's transport on a connection pool whose sockets obey the exchange's total deadline."""

    def __init__(self, clock: _Clock, proxy: str | None):
        super().__init__(trust_env=False)
        backend = _Backend(clock)
        if proxy:
            self._pool = httpcore.HTTPProxy(proxy_url=proxy, network_backend=backend)
        else:
            self._pool = httpcore.ConnectionPool(network_backend=backend)


def _proxy_for(url: str) -> str | None:
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
        self._clock = _Clock()
        self._client = httpx.Client(transport=_Transport(self._clock, _proxy_for(base_url)), follow_redirects=False, trust_env=False, timeout=None)

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, url: str, *, deadline: float, limit: int, json: Any = None, headers: dict[str, str] | None = None) -> Reply:
        host = urllib.parse.urlsplit(url).hostname
        if not host:
            raise NetError("dns", f"{url} has no host")
        self._clock.deadline = time.monotonic() + deadline
        try:
            hdrs = {"Accept-Encoding": "identity", **(headers or {})}
            with self._client.stream(method, url, json=json, headers=hdrs) as resp:
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
        except httpx.TimeoutException:
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
            self._clock.deadline = float("inf")
