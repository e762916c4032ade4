"""Logs written as JSON lines, read as the text lines the rest of ingest knows.

A platform's collector often stores one JSON object per line (Docker's json-file driver, Fluent
Bit / Vector outputs, a training platform's own shipper): the message, its time, the host and
the rank are fields, found here by their usual names. Each object becomes one text line that
carries the same facts where the header parser looks for them::

    [rank216]: 2025-09-12T07:15:57.072099Z INFO <message>

A rank field becomes the launcher's ``[rankN]:`` prefix (as torchrun prefixes what a rank
prints; a message that carries that prefix already keeps its own); the object's time (the
collector's, in UTC) comes first after it, so it is the line's time; a level field follows; the
message keeps its own header after that (a framework's stamp, a level). A message that
continues a record (indented: a traceback's frames) gets no time or level, so it stays part of
its record. A kernel line (``stream: kernel``) is written
as syslog writes one, so it is read as a kernel line of its host. The host field is not
rendered: a file of one host's lines is that host's (``host_of``), and a file that mixes hosts
gets the ``host: `` label that launchers such as pdsh use, which routes each line to its host
(:mod:`l4_plugin.ingest.hosts`).

A file is read this way when most of its first lines are JSON objects with a message field; a
line that is not one stays as it is.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from l4_plugin.ingest.terminal import last_frame, without_ansi

# A launcher's rank prefix a message may carry already (torchrun --tee, --role default).
_RANK_PREFIX = re.compile(r"\[(?:rank|default)\d+\]: ?")
_MESSAGE = ("msg", "message", "log", "MESSAGE", "text", "line", "@message", "event")
_TIME = ("ts", "time", "timestamp", "@timestamp", "t", "asctime", "created", "datetime", "date")
_HOST = (
    "host",
    "hostname",
    "host.name",
    "node",
    "nodename",
    "node_name",
    "_HOSTNAME",
    "kubernetes.pod_name",
    "pod",
    "pod_name",
)
_RANK = ("rank", "global_rank", "RANK", "process_rank")
_LEVEL = ("level", "levelname", "severity", "lvl", "log.level", "loglevel")
_STREAM = ("stream", "source", "_TRANSPORT", "channel")
_KERNEL = frozenset({"kernel", "kern", "dmesg"})
#: Lines sampled to decide whether a file is JSON lines, and the share that must be objects.
SAMPLE_LINES = 20
#: Lines read to tell a file of one host's lines from one of several hosts'.
HOST_SAMPLE = 5000
_SHARE = 0.8
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _field(obj: dict[str, Any], names: tuple[str, ...]) -> Any:
    """The first of ``names`` the object has (a dotted name also as nested objects)."""
    for name in names:
        if name in obj:
            return obj[name]
        if "." in name:
            head, _, tail = name.partition(".")
            inner = obj.get(head)
            if isinstance(inner, dict) and tail in inner:
                return inner[tail]
    return None


def _object(line: str) -> dict[str, Any] | None:
    """The JSON object of a line with a message field, else None."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or _field(obj, _MESSAGE) is None:
        return None
    return obj


def is_json_lines(lines: Iterable[str]) -> bool:
    """Whether the first non-blank lines are mostly JSON objects with a message field."""
    seen = hits = 0
    for line in lines:
        if not line.strip():
            continue
        seen += 1
        hits += _object(line) is not None
        if seen >= SAMPLE_LINES:
            break
    return seen > 0 and hits >= _SHARE * seen


def _moment(value: Any) -> datetime.datetime | None:
    """A time field: epoch seconds (or milli-, micro-, nanoseconds) or ISO-8601 text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
        while seconds > 1e11:  # ms, µs, ns since the epoch
            seconds /= 1000.0
        if not math.isfinite(seconds) or seconds <= 0:
            return None
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    if isinstance(value, str):
        text = value.strip()
        try:
            return _moment(float(text))
        except ValueError:
            pass
        try:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if moment.tzinfo is None:
            return moment  # the collector's local time, read as the line's other times are
        return moment.astimezone(datetime.UTC)
    return None


def _rank(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value.strip())
    return None


def render(obj: dict[str, Any], hosts_labelled: bool = False) -> str:
    """The text line of one JSON log object (see the module docstring)."""
    text = str(_field(obj, _MESSAGE))
    message = _shown(text).replace("\n", " ")
    moment = _moment(_field(obj, _TIME))
    host = _field(obj, _HOST)
    label = f"{host}: " if hosts_labelled and host else ""
    stream = str(_field(obj, _STREAM) or "").lower()
    if stream in _KERNEL and moment is not None:
        when = f"{_MONTHS[moment.month - 1]} {moment.day:2d} {moment:%H:%M:%S.%f} {moment.year}"
        return f"{label}{when} {host or 'localhost'} kernel: {message}"
    own = _RANK_PREFIX.match(message)
    if own is not None:
        # torchrun's tee already prefixed the line: its prefix first, as a rank field's would be
        prefix, message = own.group(0), message[own.end() :]
    else:
        rank = _rank(_field(obj, _RANK))
        prefix = f"[rank{rank}]: " if rank is not None else ""
    if not message.strip() or (message[:1] in " \t" and "\r" not in text):
        # A line that continues a record (a traceback's frames, a blank line): as printed, its
        # time is its record's, so the frames stay frames behind the prefix. A bar redrawn with
        # "\r" is none, though its frame begins with tqdm's padding (" 37%|"): the object's
        # time is when its last frame was drawn.
        return f"{label}{prefix}{message}"
    parts = [label, prefix]
    if moment is not None:
        parts.append(_stamp(moment))
    level = _field(obj, _LEVEL)
    if isinstance(level, str) and level.strip().isalpha():
        parts.append(level.strip().upper() + " ")
    parts.append(message)
    return "".join(parts)


def _stamp(moment: datetime.datetime) -> str:
    """A JSON object's time as the line's leading ISO-8601 stamp (``Z`` when in UTC)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + ("Z " if moment.tzinfo else " ")


def _shown(message: str) -> str:
    """What a terminal shows of a message (:mod:`l4_plugin.ingest.terminal`), as ``reader``
    reads a text line: no colours, a bar redrawn with ``\\r`` (tqdm's frames, flushed
    together) its last frame."""
    message = without_ansi(message).rstrip("\r\n")
    return last_frame(message) if "\r" in message else message


def host_of(lines: Iterable[str]) -> tuple[str, ...]:
    """The hosts named by the host fields of the JSON objects among ``lines``, in order."""
    hosts: dict[str, None] = {}
    for line in lines:
        obj = _object(line)
        if obj is not None:
            host = _field(obj, _HOST)
            if isinstance(host, str) and host.strip():
                hosts[host.strip()] = None
    return tuple(hosts)


def error_file(obj: dict[str, Any]) -> list[str] | None:
    """The lines of torchelastic's error file (``TORCHELASTIC_ERROR_FILE``, the ``error.json``
    a worker wrapped in ``@record`` writes when it dies), else None.

    Its ``message`` holds the exception and, in ``extraInfo``, the traceback as printed
    (``py_callstack``) and when it was raised (``timestamp``, epoch seconds): the traceback's
    lines, each that opens or ends a part of it stamped with that time, so the rank's record
    is read as the traceback it printed, at the time it died.
    """
    inner = obj.get("message")
    info = inner.get("extraInfo") if isinstance(inner, dict) else None
    if not isinstance(inner, dict) or not isinstance(info, dict):
        return None
    stack = info.get("py_callstack")
    text = stack if isinstance(stack, str) and stack.strip() else str(inner.get("message", ""))
    moment = _moment(info.get("timestamp"))
    stamp = _stamp(moment) if moment is not None else ""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = _shown(line)
        out.append(line if not line.strip() or line[:1] in " \t" else stamp + line)
    return out


def rendered(lines: list[str], labelled: bool) -> tuple[list[str], list[int]]:
    """Each line that is a JSON log object as its text line (``render``), or its lines (an
    ``error_file``); others unchanged. With each output line, the input line it came from."""
    out: list[str] = []
    sources: list[int] = []
    for i, line in enumerate(lines):
        obj = _object(line) if line[:1] == "{" or line.lstrip()[:1] == "{" else None
        many = error_file(obj) if obj is not None else None
        if many is not None:
            out.extend(many)
            sources.extend([i] * len(many))
            continue
        out.append(render(obj, labelled) if obj is not None else line)
        sources.append(i)
    return out, sources
