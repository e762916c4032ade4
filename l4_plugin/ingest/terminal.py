"""What a terminal shows of a line: colours and cursor moves drawn, not text; a bar redrawn
with carriage returns shown as its last frame. Shared by the file reader and the JSON-lines
reader, so a line reads the same whichever way it was stored."""

from __future__ import annotations

import re

from l4_plugin.ingest.header import prefix_end

#: ANSI escape sequences: CSI (colours, cursor moves), OSC (titles, links) and two-byte ones.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


def without_ansi(text: str) -> str:
    """``text`` less its escape sequences (torchtitan's coloured step line, rich handlers)."""
    return ANSI.sub("", text) if "\x1b" in text else text


def last_frame(line: str) -> str:
    """A line redrawn with ``\\r`` (a tqdm bar) as a terminal shows it: its last non-empty
    frame, under the labels its first frame began with (``labelled``)."""
    frames = [f for f in line.split("\r") if f]
    if not frames:
        return ""
    return labelled(frames[0], frames[-1]) if len(frames) > 1 else frames[0]


def labelled(first: str, shown: str) -> str:
    """``shown``, the last frame of a redrawn line whose first frame is ``first``, under the
    labels ``first`` begins with (``header.prefix_end``: a collector's, Ray's worker prefix, a
    launcher's rank prefix). A launcher or collector labels what it reads a newline at a time,
    so a bar's frames share the one label at the start of the line; it says who printed every
    frame (the terminal's redraw covers it, the file does not)."""
    end = prefix_end(first)
    if end == 0 or shown.startswith(first[:end]):
        return shown
    return first[:end] + shown
