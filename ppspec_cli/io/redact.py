"""No secret anywhere: the one redaction layer every message, table, report, log line and file of
ppspec passes through, and the one rule for which names hold secrets.

- `is_secret_name(name)`: does an environment variable or engine option name hold a secret? Names
  are split into words (`_`, `-`, `.`, camelCase); a secret word (TOKEN, SECRET, PASSWORD, APIKEY,
  CREDENTIALS, ...) anywhere, a word ending in one (HFTOKEN, MYAPIKEY), or a last word KEY/PASS/PWD
  (API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASS) makes it a secret. Words that merely contain one
  (TOKENIZERS, MAX_NUM_BATCHED_TOKENS, SSL_KEYFILE, PWD itself) do not.
- `register(value)`: from then on `redact` replaces that value with `***`. ppspec registers the
  values of every secret-named variable of its environment at start, the API key it reads, and
  anything else it learns is secret. Values shorter than 6 characters are not registered (they
  would redact ordinary words; such a "secret" protects nothing anyway).
- `redact(text)`: every registered value replaced, longest first.
- `install()`: standard output and error of this process go through `redact` (console tables,
  messages, logs), whatever writes to them.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

MASK = "***"
MIN_SECRET_LEN = 6

_SECRET_WORDS = {
    "TOKEN",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWORDS",
    "PASSWD",
    "PASSPHRASE",
    "APIKEY",
    "APIKEYS",
    "ACCESSKEY",
    "SECRETKEY",
    "PRIVATEKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "AUTHTOKEN",
    "BEARER",
    "COOKIE",
    "SESSIONKEY",
    "SIGNINGKEY",
    "CLIENTSECRET",
}
_SECRET_SUFFIXES = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY")
_LAST_WORDS = {"KEY", "KEYS", "PASS", "PWD", "PW", "PAT"}
_NOT_SECRET = {"PWD", "OLDPWD", "PASS"}
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def words(name: str) -> list[str]:
    return [w.upper() for w in re.split(r"[^A-Za-z0-9]+", _CAMEL.sub("_", name)) if w]


def is_secret_name(name: str) -> bool:
    """True when an environment variable or option name holds a secret (see the module doc)."""
    ws = words(name)
    if not ws or "_".join(ws) in _NOT_SECRET:
        return False
    if any(w in _SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in ws):
        return True
    return len(ws) > 1 and ws[-1] in _LAST_WORDS


_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def register(value: Any) -> None:
    global _pattern
    if isinstance(value, str) and len(value) >= MIN_SECRET_LEN and value not in _secrets:
        _secrets.add(value)
        _pattern = re.compile("|".join(re.escape(s) for s in sorted(_secrets, key=len, reverse=True)))


def register_url(url: str | None) -> None:
    """A URL's credentials (`scheme://user:password@host`): the `user:password@` part is registered
    whatever its length (with its `@` it is distinctive), and the password alone when it is long
    enough, so neither reaches a file (bench.json, a report) or the terminal."""
    global _pattern
    if not url or "@" not in url:
        return
    import urllib.parse

    try:
        netloc = urllib.parse.urlsplit(url).netloc
    except ValueError:
        return
    userinfo, at, _host = netloc.rpartition("@")
    if not at or not userinfo:
        return
    _secrets.add(userinfo + "@")
    _pattern = re.compile("|".join(re.escape(s) for s in sorted(_secrets, key=len, reverse=True)))
    register(urllib.parse.unquote(userinfo.partition(":")[2]))


def register_env(environ: Mapping[str, str] | None = None) -> None:
    """Register the value of every secret-named variable of `environ` (default: this process's)."""
    for k, v in (os.environ if environ is None else environ).items():
        if is_secret_name(k):
            register(v)


def redact(text: str) -> str:
    if _pattern is None or not text:
        return text
    return _pattern.sub(MASK, text)


def redact_data(obj: Any) -> Any:
    """`redact` applied to every string of a JSON-like structure (keys included)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact_data(k): redact_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_data(v) for v in obj]
    return obj


class _Redacting(io.TextIOBase):
    """A text stream that redacts what it forwards."""

    def __init__(self, inner: Any):
        self._inner = inner

    def write(self, s: str) -> int:
        self._inner.write(redact(s))
        return len(s)

    def flush(self) -> None:
        self._inner.flush()

    def isatty(self) -> bool:
        return self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", "utf-8")

    def writable(self) -> bool:
        return True


def install() -> None:
    """Route this process's stdout and stderr through `redact` (idempotent)."""
    register_env()
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Redacting):
            setattr(sys, name, _Redacting(stream))
