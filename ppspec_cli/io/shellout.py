"""Lines ppspec prints for a shell: one function renders them, so each stays ONE inert line when pasted.

Whatever a profile, a checkpoint config or a server put into a value (newlines, quotes, `$(...)`,
control characters, terminal escapes, bidi overrides):

- `command(argv, env)` -> one `VAR=value ... cmd arg ...` line; a printable value is single-quoted
  (shlex.quote), a value with any non-printable character is rebuilt at run time by
  `"$(printf '%b' '\\0ooo...')"` from octal escapes, so the printed line holds only printable
  characters and the command still receives the exact bytes. (Command substitution drops trailing
  newlines: a value ending in a newline loses them.)
- `comment(text, width=None)` -> one `# ...` line (with a terminal's width: several, wrapped between
  words, each starting with `#`); every non-printable character is shown as an escape
  (`\\n`, `\\x1b`, `\\u202e`), so a finding's text can neither end the comment nor drive the terminal.
- `printable(text)` -> the same escaping without the `#`, for log lines.
- `beside_python(name)` / `ppspec_argv()` -> how to name this installation's own commands (a venv's
  bin/ is often not on PATH: `bash dev.sh` never activates .venv), so a printed line works as pasted.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with every non-printable character as a visible escape: one line, no terminal control."""
    out = []
    for ch in str(text):
        if ch.isprintable() and ch != "\\" or ch == " ":
            out.append(ch)
        elif ch == "\\":
            out.append("\\\\")
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}")
    return "".join(out)


def comment(text: str, width: int | None = None) -> str:
    """One `#` comment line carrying `text` (escaped: it cannot break out of the comment). With
    `width` (a terminal's: io.terminal.wrap_width), a longer one is wrapped between words into
    several `#` lines, each as inert, none cut inside a word."""
    line = "# " + printable(text)
    if width is None or len(line) <= width:
        return line
    import textwrap

    return "\n".join(
        textwrap.wrap(line, width=width, subsequent_indent="#   ", break_long_words=False, break_on_hyphens=False)
    )


def _bytes(value: str) -> bytes:
    """The bytes a value stands for: UTF-8, an undecodable byte (surrogateescape's U+DC80-U+DCFF)
    as itself, any other lone surrogate as its three bytes (no encoding holds it as text)."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def quote(value: str) -> str:
    """One shell word that evaluates to exactly `value` and prints as printable characters only,
    each one the terminal's encoding can show (in an ASCII-only locale a non-ASCII value is rebuilt
    by printf too: shown as the encoding's escapes inside quotes it would be another value)."""
    from ppspec_cli.io.terminal import encodable

    value = str(value)
    if value.isprintable() and encodable(value):
        return shlex.quote(value)
    octal = "".join(f"\\0{b:03o}" if not (0x20 <= b < 0x7F) or b in (0x27, 0x5C) else chr(b) for b in _bytes(value))
    return "\"$(printf '%b' '" + octal + "')\""


def command(
    argv: Iterable[str], env: Mapping[str, str] | None = None, env_refs: Mapping[str, str] | None = None
) -> str:
    """`VAR=value ... cmd args` on one line; `env_refs` are copied from the caller's variables by
    reference (`VAR="${NAME}"`), so a secret's value is never printed."""
    parts = [f"{k}={quote(v)}" for k, v in sorted((env or {}).items())]
    parts += [f'{k}="${{{ref}}}"' for k, ref in sorted((env_refs or {}).items())]
    return " ".join(parts + [quote(a) for a in argv])


def beside_python(name: str) -> str | None:
    """The executable `name` next to this Python (a venv's bin/), if there is one."""
    exe = Path(sys.executable).with_name(name)
    return str(exe) if os.access(exe, os.X_OK) else None


def ppspec_argv() -> list[str]:
    """How a pasted line runs this ppspec: the console script beside this Python, else (a source
    checkout without it) `python -m ppspec_cli.cli`."""
    exe = beside_python("ppspec")
    return [exe] if exe else [sys.executable, "-m", "ppspec_cli.cli"]
