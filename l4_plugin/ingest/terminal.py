"""What a terminal shows of a line: colours and cursor moves drawn, not text; a bar redrawn
with carriage returns shown as its last frame. Shared by the file reader and the JSON-lines
reader, so a line reads the same whichever way it was stored."""

from __future__ import annotations

import re

#: ANSI escape sequences: CSI (colours, cursor moves), OSC (titles, links) and two-byte ones.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def without_ansi(text: str) -> str:
    """``text`` less its escape sequences (torchtitan's coloured step line, rich handlers)."""
    return ANSI.sub("", text) if "\x1b" in text else text


def last_frame(line: str) -> str:
    """A line redrawn with ``\\r`` (a tqdm bar) as a terminal shows it: its last non-empty
    frame."""
    frames = [f for f in line.split("\r") if f]
    return frames[-1] if frames else ""
