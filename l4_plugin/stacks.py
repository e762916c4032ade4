"""Python stacks in the orders the tools print them.

The interpreter's traceback prints a stack outermost first (``File "P", line N, in F``).
Python's faulthandler — what a process prints when it crashes ("Fatal Python error:
Segmentation fault", with ``faulthandler.enable()``, which torchrun's ``@record`` calls), or on
``dump_traceback_later``'s timeout — prints each thread's stack innermost first and without the
comma (``File "P", line N in F``), under a header naming the thread: "Current thread 0x… (most
recent call first):" for the one that crashed, "Thread 0x…" for the others ("Stack (most recent
call first):" for one thread alone; newer interpreters add the thread's name, older ones leave
out the parenthesis), then "  ..." when it cut a deep stack and "Extension modules: …".

:func:`call_order` gives a record's lines as readers of frames expect a traceback: every
faulthandler stack turned outermost first and, when the dump marks the thread that crashed, the
other threads' stacks left out (they were waiting somewhere, not failing); :func:`bare` tells a
stack printed alone, with nothing saying what happened. Pure.
"""

from __future__ import annotations

import re

#: A frame of either shape, its file and function named (``path``, ``func``).
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+,? in (?P<func>[\w<>.]+)')
#: Where a frame of either shape begins (its function may be cut off).
FRAME_HEAD = re.compile(r'\bFile "[^"]+", line \d+')
#: A traceback's frame as traceback.py prints it (``File "P", line N, in F``, the comma before
#: "in"), its function named.
TB_FRAME = re.compile(r'File "[^"]+", line \d+, in \S')
#: A faulthandler frame ("  File "P", line N in F"): a traceback's has a comma before "in".
DUMP_FRAME = re.compile(r'\bFile "[^"\n]*", line \d+ in [\w<>.$-]+\s*$')
_HEADER = re.compile(
    r"\b(?P<who>Current thread|Thread) 0x[0-9a-fA-F]+(?: [\[<][^\]>\n]*[\]>])?"
    r"(?: \(most recent call first\))?:\s*$"
    r"|\b(?:Stack|Traceback) \(most recent call first\):\s*$"
)
#: The lines of a dump that are neither a frame nor a header (past a label: "[default0]:").
_REST = re.compile(r"(?:^|[\s:\]>])(?:\.\.\.|<no Python frame>|Extension modules: .*)\s*$")


_TB_HEADER = "Traceback (most recent call last):"


def under_frame(frame: re.Match[str], line: str) -> bool:
    """Whether ``line`` is printed under a traceback's frame (``frame``: :data:`FRAME_HEAD`
    found in an earlier line of the same labels): its source line or caret marks, indented past
    where the frame's "File" begins; an exception's line is not, whatever labels both carry."""
    return line[frame.start() : frame.start() + 2].isspace()


def bare(text: str) -> bool:
    """Whether ``text`` is a stack and nothing else: two frames or more and no line that says
    what happened (a dump of a stuck process pasted alone, a traceback cut before its
    exception) — only frames, the lines under them, dump headers, "...", the extension
    modules."""
    lines = [line for line in text.splitlines() if line.strip()]
    if sum(1 for line in lines if FRAME_HEAD.search(line)) < 2:
        return False
    frame: re.Match[str] | None = None
    for line in lines:
        if (head := FRAME_HEAD.search(line)) is not None:
            frame = head
        elif not (
            _HEADER.search(line)
            or _REST.search(line)
            or line.rstrip().endswith(_TB_HEADER)
            or (frame is not None and under_frame(frame, line))
        ):
            return False
    return True


def call_order(text: str) -> list[str]:
    """``text``'s lines, each faulthandler stack in it outermost first (the other threads'
    stacks left out when a "Current thread" is marked); a text without one as it is."""
    lines = text.splitlines()
    if "line " not in text or not any(DUMP_FRAME.search(line) for line in lines):
        return lines
    marked = any((m := _HEADER.search(line)) and m["who"] == "Current thread" for line in lines)
    out: list[str] = []
    run: list[str] = []
    keep = True  # (frames before any header: a pasted stack)
    for line in lines:
        if DUMP_FRAME.search(line):
            run.append(line)
            continue
        if keep:
            out.extend(reversed(run))
        run = []
        header = _HEADER.search(line)
        if header is not None:
            keep = not marked or header["who"] == "Current thread"
        out.append(line)
    if keep:
        out.extend(reversed(run))
    return out


def without_dump(lines: list[str]) -> list[str]:
    """``lines`` less a faulthandler dump's (headers, frames, "...", the extension modules),
    when they hold one; else as they are."""
    if not any(DUMP_FRAME.search(line) for line in lines):
        return lines
    return [x for x in lines if not (DUMP_FRAME.search(x) or _HEADER.search(x) or _REST.search(x))]
