"""User-supplied text in our messages: quoted, and never able to drive a terminal.

Events and conditions are printed by `kubectl describe` as they are: a newline, an escape
sequence or a bidi override (U+202E) copied from a tenant's object would forge lines,
colour the terminal or reverse what an operator reads. `printable` escapes every control,
format and line/paragraph-separator character; `quoted` is for one user string inside a
message.
"""

from __future__ import annotations

import unicodedata

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with every character that is not plainly printable escaped (\\x1b, \\u202e, ...)."""
    if text.isprintable():
        return text
    return "".join(
        _escape(c) if c != " " and unicodedata.category(c) in _UNSAFE_CATEGORIES else c for c in text
    )


def quoted(value: str) -> str:
    """One user-supplied string inside a message: in double quotes, escaped."""
    return '"' + printable(value).replace('"', '\\"') + '"'
