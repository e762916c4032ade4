"""What L4 prints to a terminal holds no control characters and no URL credentials.

Log lines, templates, file names and error messages can carry terminal escape sequences (colour,
cursor movement, window titles, hyperlinks) and other C0/C1 control characters; printed raw they
repaint the terminal or hide text. ``safe_text`` removes them (whole escape sequences, not just
the ESC byte) and the bidirectional overrides that reorder what is shown; newline and tab stay.
The stored documents keep the original text: only what is printed is cleaned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.text import Text

# CSI (ESC [ … final), OSC (ESC ] … BEL or ST), DCS/SOS/PM/APC (ESC P|X|^|_ … ST), two-byte
# escapes (ESC + one byte), and the 8-bit CSI (0x9b …).
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b\][0-9;]*"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
)
_UNSAFE = [
    *(c for c in range(0x20) if c not in (0x09, 0x0A)),
    0x7F,
    *range(0x80, 0xA0),
    *range(0x202A, 0x202F),  # LRE, RLE, PDF, LRO, RLO
    *range(0x2066, 0x206A),  # LRI, RLI, FSI, PDI
]
_DROP: dict[int, None] = dict.fromkeys(_UNSAFE)
#: The same characters as JSON escapes (``--json -``): the document is unchanged once parsed.
JSON_ESCAPES: dict[int, str] = {c: f"\\u{c:04x}" for c in _UNSAFE if c >= 0x7F}


# ``scheme://user:password@`` anywhere in a text (a log line, an exception from a client).
_URL_CREDENTIALS = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/?#@]+@")


def safe_text(text: str) -> str:
    """``text`` without escape sequences and control characters other than newline and tab,
    and with the credentials of any URL in it replaced by ``***``."""
    if "@" in text:
        text = _URL_CREDENTIALS.sub(r"\1***@", text)
    if text.isprintable():
        return text
    return _ESCAPES.sub("", text).translate(_DROP)


class SafeConsole(Console):
    """A rich ``Console`` that cleans every text segment (``safe_text``) before styling it.

    Rich's own control segments (a status spinner's cursor moves) and the styles it renders
    are kept; only the text that came from data is cleaned.
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """``Console.print`` with strings and ``Text`` cleaned before rich parses them."""
        super().print(*(_clean(o) for o in objects), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        cleaned = (
            seg if seg.control else Segment(safe_text(seg.text), seg.style, seg.control)
            for seg in buffer
        )
        rendered: str = super()._render_buffer(cleaned)
        return rendered


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, Text) and not value.plain.isprintable():
        copy = value.copy()
        copy.plain = safe_text(value.plain)
        return copy
    return value


def safe_print(*values: Any, file: Any = None) -> None:
    """``print`` for plain lines (``warning: …``, ``error: …``), cleaned with ``safe_text``."""
    print(*(safe_text(str(v)) for v in values), file=file)
