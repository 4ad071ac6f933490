"""The one sanitiser for every byte bound for a terminal.

Text that reaches ppspec's standard output or error can come from a hostile server, checkpoint,
profile or adapter pack. Shown raw, it can act on the terminal instead of being read: ESC and CSI
sequences (colours, cursor moves, screen clears), OSC sequences (window titles, hyperlinks, an OSC 52
write to the clipboard), C1 controls (0x80-0x9f, which some terminals take as ESC [), a carriage
return or backspace that overwrites what came before, and Unicode bidi overrides and zero-width
characters that make a line read differently from what it holds. This module is the one place that
makes such text inert:

- `clean(text, limit=None)`: every C0/C1 control except newline and tab, DEL, every Unicode format
  character (bidi overrides and isolates, zero-width space/joiners, BOM, ...), line/paragraph
  separators, private-use characters and lone surrogates are shown as `\\xNN` / `\\uXXXX`; with
  `limit`, text longer than that is cut and says how much was left out. Backslashes are kept, so
  `clean` is idempotent.
- `install()`: this process's stdout and stderr go through `clean` and `redact` (every `print`, every
  progress line, the engine-log pump, click's usage errors), stderr writes bounded to MAX_WRITE.
- `console(stderr=False)`: the only rich console ppspec prints through. It never interprets a string
  as rich markup or emoji (a `[/bold]` in pack text is just text); styling comes only from
  `styled(template, *values)`, whose template is ppspec's own and whose values are escaped; every
  segment it renders (table cells, titles, Text objects) is cleaned; its own colour codes reach the
  terminal through the redacting channel, never through `clean`.

JSON output is unaffected: `json.dumps` already escapes every control character (and, with its
default ensure_ascii, every non-ASCII one), so `clean` finds nothing to change in it.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
import unicodedata
from typing import Any

from ppspec_cli.io import redact

#: The most characters one write to stderr may carry (a hostile engine log line, an error holding
#: a server's answer): the rest is cut with a note.
MAX_WRITE = 16_000
#: The most characters of one part of an error message (what / where / fix).
MAX_ERROR_PART = 4_000

#: ASCII text needs cleaning only for these (C0 but tab and newline, DEL).
_ASCII_BAD = re.compile("[\x00-\x08\x0b-\x1f\x7f]")

_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def _bad(ch: str) -> bool:
    return ch not in "\n\t" and unicodedata.category(ch) in _BAD_CATEGORIES


def _needs(s: str) -> bool:
    if s.isascii():
        return _ASCII_BAD.search(s) is not None
    return any(_bad(ch) for ch in s)


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def clean(text: Any, limit: int | None = None) -> str:
    """`text` (made a str) safe for a terminal: see the module doc. `limit`: at most that many
    characters of the input are kept (the rest is cut and counted)."""
    s = text if isinstance(text, str) else str(text)
    cut = 0
    if limit is not None and len(s) > limit:
        cut = len(s) - limit
        s = s[:limit]
    if _needs(s):
        s = "".join(_escape(ch) if _bad(ch) else ch for ch in s)
    if cut:
        s += f"... ({cut} more characters not shown)"
    return s


def one_line(text: Any, limit: int = 200) -> str:
    """`clean` for a value shown inside a sentence: newlines and tabs escaped too, bounded."""
    return clean(text, limit).replace("\n", "\\n").replace("\t", "\\t")


def escape_markup(text: Any) -> str:
    """`clean`, then rich markup escaped: a value inside a `styled` template."""
    from rich.markup import escape

    return escape(clean(text))


# ---- streams -------------------------------------------------------------------------------


def _text_only(s: Any) -> None:
    """A text stream takes str only, as io.TextIOWrapper does. Libraries probe a stream by writing
    b"" to it and treat one that accepts bytes as binary (click 8.2+ does, for every --help and usage
    error): accepting them would print the bytes' repr."""
    if not isinstance(s, str):
        raise TypeError(f"write() argument must be str, not {type(s).__name__}")


#: The standard streams found closed or broken (a reader gone: `ppspec adapters list | head -1`,
#: `ppspec check p >&-`): from then on what is written to them is discarded, never an error, and the
#: command's own exit code stands (never 1, which means a failed check, nor a traceback).
BROKEN: set[str] = set()


def _gone(e: OSError) -> bool:
    return isinstance(e, BrokenPipeError) or e.errno in (errno.EPIPE, errno.EBADF)


def _discard(inner: Any, name: str) -> None:
    """The stream's reader is gone: its descriptor now points at /dev/null (so later writes and the
    interpreter's own flush at exit succeed without a word) and its buffer is dropped."""
    BROKEN.add(name)
    try:
        fd = inner.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def guarded_write(inner: Any, text: str, name: str) -> None:
    """Write (and flush, when asked) to a standard stream; a closed or broken one is discarded."""
    if name in BROKEN:
        return
    try:
        inner.write(text)
    except OSError as e:
        if not _gone(e):
            raise
        _discard(inner, name)
    except ValueError:  # "I/O operation on closed file": the stream object was closed
        BROKEN.add(name)


def guarded_flush(inner: Any, name: str) -> None:
    if name in BROKEN:
        return
    try:
        inner.flush()
    except OSError as e:
        if not _gone(e):
            raise
        _discard(inner, name)
    except ValueError:
        BROKEN.add(name)


def encodable(text: str, stream: Any = None) -> bool:
    """Whether standard output's encoding (or `stream`'s) can write `text` as it is: in an ASCII-only
    locale it cannot write `é`, and would print an escape in its place."""
    s = stream if stream is not None else sys.stdout
    s = getattr(s, "inner", s)
    enc = getattr(s, "encoding", None) or "utf-8"
    try:
        text.encode(enc)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class _TermStream(io.TextIOBase):
    """A text stream that cleans and redacts what it forwards (sys.stdout/sys.stderr after install)."""

    def __init__(self, inner: Any, bound: int | None, name: str = "stdout"):
        self.inner = inner
        self._bound = bound
        self.name_ = name

    def write(self, s: str) -> int:
        _text_only(s)
        guarded_write(self.inner, redact.redact(clean(s, self._bound)), self.name_)
        return len(s)

    def flush(self) -> None:
        guarded_flush(self.inner, self.name_)

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "backslashreplace"

    def writable(self) -> bool:
        return True


def _reopen_closed_std() -> None:
    """A standard descriptor closed when ppspec started (`ppspec check p >&-`) is opened on /dev/null:
    else the next file ppspec opens (a lock, a log) would get descriptor 1, and print() would write
    into it (and a child would inherit it as its output). The stream is then discarded (BROKEN)."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        try:
            got = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        except OSError:
            continue
        if got != fd:
            os.dup2(got, fd)
            os.close(got)
        if fd:
            BROKEN.add(name)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False))  # noqa: SIM115


def install() -> None:
    """Route this process's stdout and stderr through `clean` and `redact` (idempotent). A closed or
    broken stdout/stderr is handled here once for every command (BROKEN)."""
    redact.register_env()
    _reopen_closed_std()
    for name, bound in (("stdout", None), ("stderr", MAX_WRITE)):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _TermStream):
            continue
        inner = stream.inner if isinstance(stream, redact._Redacting) else stream  # noqa: SLF001
        try:  # a lone surrogate must reach the terminal escaped, never as UnicodeEncodeError
            inner.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, io.UnsupportedOperation):
            pass
        setattr(sys, name, _TermStream(inner, bound, name))


class _Channel(io.TextIOBase):
    """Where `console()` writes: the current sys.stdout/sys.stderr, past `clean` (the console cleans
    every segment itself, and its own colour codes must stay codes) but never past `redact`."""

    def __init__(self, stderr: bool):
        self._stderr = stderr

    def _target(self) -> Any:
        s = sys.stderr if self._stderr else sys.stdout
        return s.inner if isinstance(s, _TermStream) else s

    def write(self, s: str) -> int:
        _text_only(s)
        guarded_write(self._target(), redact.redact(s), "stderr" if self._stderr else "stdout")
        return len(s)

    def flush(self) -> None:
        guarded_flush(self._target(), "stderr" if self._stderr else "stdout")

    def isatty(self) -> bool:
        try:
            return self._target().isatty()
        except (AttributeError, ValueError):
            return False

    def fileno(self) -> int:
        return self._target().fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target(), "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True


def _console_class() -> type:
    from rich.console import Console
    from rich.segment import Segment

    class TermConsole(Console):
        """A rich console that never parses markup or emoji in a string and cleans every segment."""

        def on_broken_pipe(self) -> None:
            """rich's own handling (stdout to /dev/null, then SystemExit(1)) would exit 1, which
            means a failed check: the stream is discarded instead (BROKEN) and the command goes on."""
            _discard(self.file._target() if isinstance(self.file, _Channel) else self.file, "stdout")  # noqa: SLF001

        def render_str(self, text: str, **kw: Any) -> Any:  # type: ignore[override]
            kw["markup"] = False
            kw["emoji"] = False
            kw["highlight"] = False
            return super().render_str(clean(text), **kw)

        def render(self, renderable: Any, options: Any = None) -> Any:  # type: ignore[override]
            for seg in super().render(renderable, options):
                if seg.control or not _needs(seg.text):
                    yield seg
                else:
                    yield Segment(clean(seg.text), seg.style, seg.control)

    return TermConsole


_TERM_CONSOLE: type | None = None
#: The narrowest terminal a message is laid out for, and the width used when $COLUMNS is unusable
#: (0, negative, not a number, or absurd): `COLUMNS=0` made rich print nothing at all, errors included.
MIN_COLUMNS = 20
FALLBACK_COLUMNS = 80
MAX_COLUMNS = 10_000


def _sane_width() -> int | None:
    """None: let rich size itself ($COLUMNS unset or usable); else the width to use instead."""
    from ppspec_cli.io import env

    raw = env.get("COLUMNS")
    if raw is None:
        return None
    try:
        n = int(raw.strip())
    except ValueError:
        return FALLBACK_COLUMNS
    return None if MIN_COLUMNS <= n <= MAX_COLUMNS else (FALLBACK_COLUMNS if n < MIN_COLUMNS else MAX_COLUMNS)


def console(stderr: bool = False, **kw: Any) -> Any:
    """The rich console for ppspec's human output (see the module doc)."""
    global _TERM_CONSOLE
    if _TERM_CONSOLE is None:
        _TERM_CONSOLE = _console_class()
    kw.setdefault("highlight", False)
    kw.setdefault("soft_wrap", True)
    width = _sane_width()
    if width is not None:
        kw.setdefault("width", width)
    return _TERM_CONSOLE(file=_Channel(stderr), markup=False, emoji=False, **kw)


def styled(template: str, *values: Any) -> Any:
    """A rich Text from ppspec's own markup `template` with `{}` placeholders filled by `values`,
    each cleaned and markup-escaped (a value never becomes markup)."""
    from rich.text import Text

    return Text.from_markup(template.format(*(escape_markup(v) for v in values)), emoji=False)


def plain(text: Any) -> Any:
    """A rich Text holding `text` as it is (cleaned), never markup."""
    from rich.text import Text

    return Text(clean(text))


def safe(text: Any) -> str:
    """User-controlled text inside ppspec's own markup: cleaned and markup-escaped (escape_markup)."""
    return escape_markup(text)


# ---- wrapping ppspec's own lines -----------------------------------------------------------

#: A line's label, whose width the wrapped lines below it are indented by: `ppspec: `, `error: `,
#: `  where: `, `  fix: `, `warning CODE: ` (one word before the colon, or `warning`/`note` and a code).
_LABEL = re.compile(r"^(\s*)((?:[A-Za-z][\w.-]{0,24}|(?:warning|note|info|error) [\w.-]{1,40}): (?=\S))?")


def wrap_width(stderr: bool = True) -> int | None:
    """The width ppspec's own message lines are wrapped at: $COLUMNS when it is set (sane, as the
    rich console takes it), else the terminal's when the stream is one; None for a pipe or a file
    without COLUMNS, where each message stays one line (logs, grep, and the tests' assertions)."""
    from ppspec_cli.io import env

    raw = env.get("COLUMNS")
    if raw is not None:
        return _sane_width() or int(raw.strip())
    stream = sys.stderr if stderr else sys.stdout
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    import shutil

    return max(MIN_COLUMNS, min(MAX_COLUMNS, shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).columns))


def wrap_block(text: str, width: int | None) -> str:
    """Every line of `text` wrapped between words at `width` (never inside a word: a path or URL
    longer than the line keeps its own line), each wrapped part indented under the line's label
    (see _LABEL) so a message reads as one paragraph. `width` None: `text` as it is."""
    if width is None:
        return text
    import textwrap

    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        m = _LABEL.match(line)
        hang = len(m.group(0)) if m else 0
        if hang > width // 2:
            hang = len(m.group(1)) if m else 0
        out += textwrap.wrap(
            line,
            width=width,
            subsequent_indent=" " * hang,
            break_long_words=False,
            break_on_hyphens=False,
            drop_whitespace=True,
        ) or [line]
    return "\n".join(out)


def shell_words(cmd: str) -> list[str]:
    """`cmd` split at the blanks outside quotes, each word as written (quotes kept): joining the
    words with blanks gives `cmd` back (runs of blanks become one)."""
    words, cur, quote = [], [], None
    i = 0
    while i < len(cmd):
        ch = cmd[i]
        if quote is None and ch in " \t":
            if cur:
                words.append("".join(cur))
                cur = []
        else:
            cur.append(ch)
            if ch == "\\" and quote != "'" and i + 1 < len(cmd):
                cur.append(cmd[i + 1])
                i += 1
            elif quote is None and ch in "'\"":
                quote = ch
            elif ch == quote:
                quote = None
        i += 1
    if cur:
        words.append("".join(cur))
    return words


def command_block(label: str, cmd: str, width: int | None, *, indent: int = 4, prefix: int = 0) -> str:
    """`label` and a shell command to copy: on one line when it fits in `width` less `prefix` (what
    the caller prints before it, e.g. 8 for `ppspec: `) or `width` is None; else the label alone
    and the command below it (without a label: from the first line), broken only between words
    with a trailing ` \\` on each line, so the block still pastes into a shell as the one command.
    A word longer than the line (a path, a JSON value) keeps a line of its own."""
    one = f"{label} {cmd}" if label else cmd
    if width is None or len(one) + prefix <= width:
        return one
    lines: list[str] = []
    cur = " " * indent if label else ""
    lead = len(cur)
    for w in shell_words(cmd):
        if len(cur) > lead and len(cur) + 1 + len(w) + 2 > width - (prefix if not lines and not label else 0):
            lines.append(cur + " \\")
            cur = " " * indent + w
            lead = indent
        else:
            cur = (cur + " " + w) if len(cur) > lead else cur + w
    lines.append(cur)
    return "\n".join([label, *lines] if label else lines)


def page(text: str) -> None:
    """`text` on stdout; through a pager (pydoc's: $PAGER, else less) when stdout and stdin are a
    terminal and it is longer than the screen, so a long reference can be read and searched."""
    import shutil

    out = sys.stdout
    try:
        tty = out.isatty() and sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty and text.count("\n") > shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).lines - 1:
        import pydoc

        pydoc.pager(clean(text))
        return
    out.write(text)
    out.flush()


def print_par(console: Any, text: Any, *, hang: int | None = None) -> None:
    """Print a line of ppspec's own (a str or a rich Text from `styled`/`plain`) through `console`,
    wrapped between words at wrap_width (the stream the console writes to), each wrapped part
    indented by `hang` columns (default: the width of the line's label, as wrap_block). Without a
    width (a pipe, no COLUMNS) the line is printed whole."""
    from rich.text import Text

    t = text if isinstance(text, Text) else Text(clean(text))
    # ppspec's own console: the terminal's width (or none); any other (a test's): its own width
    width = wrap_width(stderr=console.file._stderr) if isinstance(console.file, _Channel) else console.width
    if width is None or t.cell_len <= width:
        console.print(t, soft_wrap=True)
        return
    if hang is None:
        m = _LABEL.match(t.plain)
        hang = len(m.group(0)) if m and len(m.group(0)) <= width // 2 else 0
    first = t.wrap(console, width)[0]  # the first line takes the full width, the rest `hang` less
    first.rstrip()
    rest = t[len(first.plain) :]
    rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")) :]
    console.print(first, soft_wrap=True)
    if not rest.plain:
        return
    for line in rest.wrap(console, max(MIN_COLUMNS, width - hang)):
        line.rstrip()
        console.print(Text(" " * hang) + line, soft_wrap=True)
