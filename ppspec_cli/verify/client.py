"""A small OpenAI-compatible client for the four endpoints verify needs (`/health`, `/v1/models`,
`/v1/completions`, `/metrics`), on ppspec's one HTTP layer (netio: httpx with total deadlines,
no proxy for loopback, no redirects, bounded bodies). Every failure becomes one PpspecError naming
the endpoint; the API key is read from an environment variable and never appears in messages.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.io import env as env_io
from ppspec_cli.io import netio, redact, safeio

DEFAULT_ENDPOINT = "http://127.0.0.1:8000"
MAX_JSON_BYTES = 32 << 20
MAX_METRICS_BYTES = 16 << 20  # vLLM's page is tens of KiB; a page this large is not vLLM's
_START_HINT = (
    "start the server with `ppspec serve PROFILE`, or pass --endpoint URL for a server that is already running"
)


def normalize_endpoint(endpoint: str | None) -> str:
    """Check an endpoint URL (http/https only, a host, no query) and return it without a trailing '/'."""
    url = (endpoint or DEFAULT_ENDPOINT).strip()
    if "://" not in url:
        url = "http://" + url
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:  # e.g. an unclosed IPv6 bracket
        raise PpspecError(
            f"endpoint is not a URL ({e})",
            where="--endpoint",
            fix="use a URL like http://127.0.0.1:8000 or http://[::1]:8000",
        ) from None
    if parts.scheme not in ("http", "https"):
        raise PpspecError(
            f"endpoint scheme {parts.scheme!r} is not supported",
            where="--endpoint",
            fix="use an http:// or https:// URL, e.g. http://127.0.0.1:8000",
        )
    if not parts.hostname:
        raise PpspecError("endpoint has no host", where="--endpoint", fix="use a URL like http://127.0.0.1:8000")
    if parts.query or parts.fragment:
        raise PpspecError(
            "endpoint must not carry a query or fragment",
            where="--endpoint",
            fix="pass only scheme://host:port[/prefix]",
        )
    if parts.username or parts.password:
        raise PpspecError(
            "endpoint must not embed credentials",
            where="--endpoint",
            fix="remove user:password@ from the URL and put the API key in an environment variable (--api-key-env "
            "NAME)",
        )
    try:
        port = parts.port  # urllib raises ValueError for a port that is not 0-65535
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:  # port 0 is "any port" to bind, never a server's
        raise PpspecError(
            "endpoint port is not a number in 1-65535", where="--endpoint", fix="use a URL like http://127.0.0.1:8000"
        )
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def endpoint_from_host_port(host: str, port: int, scheme: str = "http") -> str:
    """The URL a client uses to reach a server bound to host:port (wildcard binds -> loopback)."""
    h = host.strip()
    if h in ("", "0.0.0.0"):
        h = "127.0.0.1"
    elif h in ("::", "[::]"):
        h = "::1"
    h = h.strip("[]")
    if ":" in h:
        h = f"[{h}]"
    return f"{scheme}://{h}:{port}"


@dataclass
class Completion:
    text: str
    completion_tokens: int | None
    prompt_tokens: int | None
    finish_reason: str | None
    model: str | None
    #: The generated token ids, when asked for (`extra={"return_token_ids": True}`) and answered.
    token_ids: list[int] | None = None


def _token_ids(v: Any) -> list[int] | None:
    if isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        return v
    return None


class Client:
    """OpenAI-compatible client for one vLLM server."""

    def __init__(self, endpoint: str | None = None, *, api_key_env: str | None = None, timeout: float = 120.0):
        self.endpoint = normalize_endpoint(endpoint)
        self.api_key_env = api_key_env
        self.timeout = timeout
        self._api_key: str | None = None
        if api_key_env:
            key = env_io.get(api_key_env)
            if not key:
                raise PpspecError(
                    f"environment variable {api_key_env} is not set (it should hold the server's API key)",
                    where=f"environment variable {api_key_env}",
                    fix=f"export {api_key_env}=... before running, or drop --api-key-env if the server has no key",
                )
            self._api_key = key
            redact.register(key)  # whatever the server echoes of it is redacted everywhere
        self._http = netio.Http(self.endpoint)  # total deadlines, no proxy for loopback, no redirects

    def __repr__(self) -> str:  # the key stays out of any repr that ends up in a log
        return f"Client(endpoint={self.endpoint!r}, api_key_env={self.api_key_env!r})"

    # -- transport -----------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return self.endpoint + path

    def _request(
        self, method: str, path: str, body: dict | None = None, *, limit: int, timeout: float | None = None
    ) -> tuple[int, bytes]:
        url = self.url(path)
        headers = {"Accept": "application/json, text/plain;q=0.9, */*;q=0.1"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        t = self.timeout if timeout is None else timeout
        try:
            reply = self._http.request(method, url, json=body, headers=headers, deadline=t, limit=limit)
        except netio.NetError as e:
            fix = {
                "timeout": "the server may be overloaded or wedged: check its log; raise the timeout for long "
                "generations",
                "refused": _START_HINT,
                "dns": "check the host name in --endpoint",
                "protocol": "check that --endpoint points at a vLLM OpenAI-compatible server (and http vs https)",
                "too-large": "check that --endpoint is a vLLM server",
            }.get(e.kind, _START_HINT)
            raise PpspecError(e.message, where=url, fix=fix, exit_code=EXIT_REFUSED) from None
        if 300 <= reply.status < 400:
            where_to = reply.headers.get("location", "")
            raise PpspecError(
                f"{url} answered with a redirect ({reply.status})" + (f" to {where_to[:200]}" if where_to else ""),
                where=url,
                fix="pass the final server URL with --endpoint (ppspec does not follow redirects)",
                exit_code=EXIT_REFUSED,
            )
        if reply.status >= 400:
            raise self._http_error(url, reply.status, reply.body[:4096].decode("utf-8", "replace"))
        return reply.status, reply.body

    def _http_error(self, url: str, code: int, detail: str) -> PpspecError:
        detail = " ".join(detail.split())
        if self._api_key:  # redact before cutting, so a key straddling the cut cannot leak its start
            detail = detail.replace(self._api_key, "***")
        detail = detail[:300]
        if code in (401, 403):
            fix = (
                f"check that ${self.api_key_env} holds the key the server was started with"
                if self.api_key_env
                else "the server wants an API key: pass --api-key-env NAME (the environment variable holding it)"
            )
            return PpspecError(
                f"{url} refused the request: HTTP {code} (authentication)", where=url, fix=fix, exit_code=EXIT_REFUSED
            )
        if code == 404:
            return PpspecError(
                f"{url} does not exist on this server (HTTP 404)",
                where=url,
                fix="check that --endpoint points at a vLLM OpenAI-compatible server (without /v1)",
                exit_code=EXIT_REFUSED,
            )
        return PpspecError(
            f"{url} answered HTTP {code}" + (f": {detail}" if detail else ""),
            where=url,
            fix="check the server log for the cause",
            exit_code=EXIT_REFUSED,
        )

    def _json(self, method: str, path: str, body: dict | None = None, *, timeout: float | None = None) -> Any:
        _, payload = self._request(method, path, body, limit=MAX_JSON_BYTES, timeout=timeout)
        # nesting bounded, strict numbers: a hostile server's `[[[[...` is one message, not a RecursionError
        return safeio.parse_json(
            payload,
            what=f"the answer of {self.url(path)}",
            where=self.url(path),
            fix="check that --endpoint points at a vLLM OpenAI-compatible server",
            exit_code=EXIT_REFUSED,
        )

    # -- endpoints -----------------------------------------------------------------------------

    def health(self, *, timeout: float | None = 10.0) -> None:
        """Raise unless `/health` answers 200."""
        self._request("GET", "/health", limit=1 << 20, timeout=timeout)

    def models(self, *, timeout: float = 30.0) -> list[str]:
        """Model ids the server serves (`/v1/models`)."""
        doc = self._json("GET", "/v1/models", timeout=timeout)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise PpspecError(
                f"{self.url('/v1/models')} returned JSON without a `data` list",
                where=self.url("/v1/models"),
                fix="check that --endpoint points at an OpenAI-compatible server",
                exit_code=EXIT_REFUSED,
            )
        return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def complete(
        self,
        model: str,
        prompt: str | list[int],
        *,
        max_tokens: int,
        seed: int = 0,
        timeout: float | None = None,
        extra: dict | None = None,
    ) -> Completion:
        """One greedy completion (temperature 0) of at most max_tokens tokens. `extra`: more body
        fields (e.g. `return_token_ids`), never overriding the greedy settings."""
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "top_p": 1.0,
            "n": 1,
            "seed": seed,
            "stream": False,
        }
        for k, v in (extra or {}).items():
            body.setdefault(k, v)
        doc = self._json("POST", "/v1/completions", body, timeout=timeout)
        url = self.url("/v1/completions")
        try:
            choice = doc["choices"][0]
            text = choice["text"]
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            err = doc.get("error") if isinstance(doc, dict) else None
            msg = err.get("message") if isinstance(err, dict) else None
            raise PpspecError(
                f"{url} returned no completion" + (f": {msg}" if isinstance(msg, str) else ""),
                where=url,
                fix="check the server log; the model name must be one /v1/models lists",
                exit_code=EXIT_REFUSED,
            ) from None
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        ct = usage.get("completion_tokens")
        pt = usage.get("prompt_tokens")
        return Completion(
            text=text,
            completion_tokens=ct if isinstance(ct, int) else None,
            prompt_tokens=pt if isinstance(pt, int) else None,
            finish_reason=choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
            model=doc.get("model") if isinstance(doc.get("model"), str) else None,
            token_ids=_token_ids(choice.get("token_ids")),
        )

    def metrics(self) -> str:
        """The raw Prometheus text of `/metrics`."""
        _, payload = self._request("GET", "/metrics", limit=MAX_METRICS_BYTES, timeout=30.0)
        return payload.decode("utf-8", "replace")

    def server_info(self) -> dict | None:
        """vLLM's dev-mode `/server_info` (the resolved engine config); None when not exposed."""
        try:
            doc = self._json("GET", "/server_info?config_format=json", timeout=10.0)
        except PpspecError:
            return None
        return doc if isinstance(doc, dict) else None
