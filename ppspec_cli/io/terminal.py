"""Text bound for a terminal: the one sanitiser for untrusted text (server answers, checkpoint and
pack strings, profile values) shown in tables, findings and progress lines."""

from __future__ import annotations

import unicodedata

from rich.markup import escape


def safe(text: object) -> str:
    """User-controlled text for the terminal: rich markup escaped, control and bidi/format
    characters (RTL overrides, zero-width) shown as \\uXXXX instead of acting on the display."""
    out = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        if ch not in "\n\t" and (cat in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return escape("".join(out))
