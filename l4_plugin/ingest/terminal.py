"""What a terminal shows of a line: colours and cursor moves drawn, not text; a bar redrawn
with carriage returns shown as its last frame; where a line printed after a bar's frame, on its
line, begins. Shared by the file reader, the JSON-lines reader and the parser, so a line reads
the same whichever way it was stored."""

from __future__ import annotations

import re

from l4_plugin.ingest.header import prefix_end

#: ANSI escape sequences: CSI (colours, cursor moves), OSC (titles, links) and two-byte ones.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[@-Z\\-_])")


#: The end of a tqdm frame: "{desc}: NN%|{bar}| n/total [elapsed<remaining, {rate}{postfix}]"
#: (tqdm's ``format_meter``; Lightning's and HF's bars are tqdm's; units "it", "B", "examples").
_FRAME_END = re.compile(
    r"%\|[^|\n]*\|\s*[\d.]+[kMGTP]?/[\d.?]+[kMGTP]? "
    r"\[(?:\d+:)?\d+:\d+<(?:(?:\d+:)?\d+:\d+|\?), [^\]\n]*\]"
)


def glued_at(line: str) -> int:
    """Where the line another writer printed after a bar's frames begins in ``line`` (0: none).

    tqdm draws a frame without a newline and the next one after a carriage return; a line that
    another thread or process prints meanwhile (a NCCL watchdog's error, a logger's record, a
    traceback's first line) lands after the frame, on its line."""
    end = 0
    for match in _FRAME_END.finditer(line):
        end = match.end()
    while end < len(line) and line[end] in " \t":
        end += 1
    return end if end < len(line) else 0


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
