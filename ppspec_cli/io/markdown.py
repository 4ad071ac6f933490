"""Text from a record (a bench result, a server's answer, a profile's name) inside Markdown that
ppspec writes: one function, `text`, makes it inert.

A record read back (`bench --resume`) is someone else's text as far as a report is concerned: raw
HTML (`<script>`, `<img onerror=...>`), a link (`[click](javascript:...)`, an autolink `<javascript:...>`),
an image that loads a URL, a table cell broken by `|`, a heading or list started by a line break.
`text(value)` shows such a value literally in every Markdown renderer: control characters and line
breaks as visible escapes (terminal.clean), `&`, `<`, `>` as HTML entities, and every Markdown
punctuation character backslash-escaped. `link_target(name)` is a relative file name ppspec made,
percent-encoded (never a scheme).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from ppspec_cli.io.terminal import clean

#: Inline Markdown punctuation (emphasis, code, links, images, tables, strikethrough): backslash-escaped
#: wherever it stands. `(`, `)` and `!` stay as they are: they make a link or an image only after a
#: `[...]`, and both brackets are escaped (so figures like "1.13x (1.11-1.15)" read as written).
#: A bare `https://...` or `www.` is a link in GitHub's Markdown: its `:` / `.` is escaped.
_INLINE = re.compile(r"([\\`*_\[\]|~])")
_SCHEME = re.compile(r":(?=//)")
#: What starts a block (heading, list item, setext line) when it opens a line and a space follows
#: (`>` needs nothing: it becomes an entity).
_BLOCK_START = re.compile(r"^(\s*)([#+\-=])(?=\s)")
_ORDERED = re.compile(r"^(\s*\d{1,9})([.)])(?=\s)")
_WWW = re.compile(r"(?i)\bwww\.")


def text(value: Any, limit: int = 2000) -> str:
    """`value` as literal Markdown text on one line (see the module doc)."""
    s = clean(value, limit=limit).replace("\r", "\\r").replace("\n", "\\n")
    s = _INLINE.sub(r"\\\1", s)
    s = _SCHEME.sub(r"\\:", s)
    s = _WWW.sub(lambda m: m.group(0)[:3] + "\\.", s)
    s = _BLOCK_START.sub(lambda m: m.group(1) + "\\" + m.group(2), s)
    s = _ORDERED.sub(lambda m: m.group(1) + "\\" + m.group(2), s)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def link_target(name: Any) -> str:
    """A relative file name as a link/image target: percent-encoded, no scheme, no directory."""
    base = str(name).replace("\\", "/").rsplit("/", 1)[-1]
    return urllib.parse.quote(base, safe="")
