"""Flight Recorder dumps and ``py-spy dump`` stacks beside a job's logs, read within limits.

What a hung job leaves besides its logs (docs/hangs.md says how to produce them):

- PyTorch's Flight Recorder writes one file per rank, named by a prefix and the rank
  (``TORCH_FR_DUMP_TEMP_FILE``, default ``/tmp/nccl_trace_rank_``; a ``.json`` twin when written
  by ``_dump_fr_trace_json``): a mapping with ``version``, ``pg_config`` (each process group's
  members), ``pg_status`` (its last enqueued, started and completed sequence numbers) and
  ``entries`` (the last collectives). The default form is a pickle: it is read by an unpickler
  that builds plain containers and scalars only (``load_plain_pickle``: any class, function or
  persistent id is refused before it is looked up, so an arbitrary pickle runs no code), and a
  walk that bounds what it may hold.
- ``py-spy dump --pid P`` prints each thread's frames innermost first (``Thread 123 (idle):
  "MainThread"`` then ``    name (file:line)``); ``--json`` prints a list of threads with their
  ``frames``.

A dump is recognised by its content, not its name. Its rank is the number its file name ends
with (torch names dumps ``<prefix><rank>``) or the ``rank<k>`` in a stack's name; its node is
the first folder of its path that is a node of the job (or a node's name in the file name);
its attempt is an ``attempt_<k>`` folder of its path. Pure of the store: paths in, records
(:mod:`l4_plugin.traces`) out; a file that cannot be read is a one-line problem, never fatal.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from l4_plugin.limits import ReadLimits, human_size
from l4_plugin.traces import (
    KEPT_COLLECTIVES,
    KEPT_FRAMES,
    Collective,
    GroupTrace,
    JobDumps,
    RankStack,
    RankTrace,
)

#: The most bytes of one dump read (a Flight Recorder of 2,000 entries with frames is a few MB).
MAX_DUMP_BYTES = 64 << 20
#: Values a dump may hold (every container, key and scalar counted once per reference).
MAX_VALUES = 1_000_000
#: How deep a dump's containers may nest (a real one nests five deep).
MAX_DEPTH = 32
#: Process groups kept per rank (the ones with the latest collectives).
KEPT_GROUPS = 16
#: Bytes of a file read to tell what it is.
SNIFF_BYTES = 512

_PICKLE = re.compile(rb"\x80[\x02-\x05]")
_PYSPY_PROCESS = re.compile(r"^Process \d+: ")
_PYSPY_THREAD = re.compile(r'^Thread (\S+) \(([\w+ ]+)\)(?:: "(.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^ {4}(\S.*?) \((.+?)(?::(\d+))?\)\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TRAILING_NUMBER = re.compile(r"(\d+)$")
_STACK_RANK = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
_ATTEMPT = re.compile(r"^attempt[-_]?(\d+)$", re.IGNORECASE)
_NUMBERS = re.compile(r"-?\d+")
_DUMP_SUFFIXES = (".json", ".pkl", ".pickle", ".pt", ".trace")


class DumpError(ValueError):
    """A file that looked like a dump and is not one L4 can read (the message says why)."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, sets, strings, bytes, numbers, booleans and None only:
    every opcode that would name a class or function goes through ``find_class`` (``GLOBAL``,
    ``STACK_GLOBAL``, ``INST``, ``OBJ``, the extension registry), and a persistent id through
    ``persistent_load``; both refuse, so nothing is imported and nothing is called."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}, refused: not a plain dump")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("uses a persistent id, refused: not a plain dump")


def load_plain_pickle(data: bytes) -> Any:
    """The value of a pickle of plain containers and scalars; ``DumpError`` for any other
    pickle (one that names a class or function), a broken one or one holding too much."""
    try:
        value = _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # any malformed stream: the unpickler raises many kinds
        raise DumpError(f"not a plain pickle ({type(exc).__name__}: {str(exc)[:120]})") from None
    check_plain(value)
    return value


def check_plain(value: Any) -> None:
    """``DumpError`` unless ``value`` is plain data within ``MAX_VALUES`` and ``MAX_DEPTH``
    (walked without recursion: a pickle's shared references count each time they are met)."""
    budget = MAX_VALUES
    todo: list[tuple[Any, int]] = [(value, 0)]
    while todo:
        item, depth = todo.pop()
        budget -= 1
        if budget < 0:
            raise DumpError(f"holds more than {MAX_VALUES:,} values")
        if depth > MAX_DEPTH:
            raise DumpError(f"nests deeper than {MAX_DEPTH}")
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for kv in item.items() for v in kv)
        elif isinstance(item, list | tuple | set | frozenset):
            todo.extend((v, depth + 1) for v in item)
        elif not isinstance(item, str | bytes | bytearray | int | float | bool | type(None)):
            raise DumpError(f"holds a {type(item).__name__}, not plain data")


def load_json(data: bytes) -> Any:
    """A JSON dump's value; ``DumpError`` when it is no JSON or holds too much."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise DumpError(f"not JSON ({str(exc)[:120]})") from None
    check_plain(value)
    return value


def is_stack_text(lines: Sequence[str]) -> bool:
    """Whether a text file's first lines are ``py-spy dump``'s (``Process N: cmd`` then
    ``Python vX.Y``): such a file is a stack dump, not a log (``jobdir`` asks)."""
    head = [_ANSI.sub("", line).strip() for line in lines[:3]]
    return len(head) >= 2 and bool(_PYSPY_PROCESS.match(head[0])) and head[1].startswith("Python v")


def is_candidate(path: Path) -> bool:
    """Whether a file the log discovery does not read may be a dump (by its name's suffix:
    none, or one a dump is saved with)."""
    suffix = path.suffix.lower()
    return not suffix or suffix in _DUMP_SUFFIXES or bool(_TRAILING_NUMBER.search(suffix))


def read_dumps(
    job_dir: Path,
    candidates: Iterable[Path],
    nodes: Collection[str],
    limits: ReadLimits | None = None,
) -> JobDumps:
    """The traces and stacks among ``candidates`` (files of ``job_dir``), placed on ``nodes``.

    A file outside the job, not regular, over ``MAX_DUMP_BYTES`` or the per-file limit, or
    past the job's limit (with the logs' own bytes not counted) is skipped with a problem; so
    is one that looks like a dump and cannot be read."""
    limits = limits or ReadLimits()
    root = job_dir.resolve()
    traces: list[RankTrace] = []
    stacks: list[RankStack] = []
    problems: list[str] = []
    total = 0
    for path in sorted(set(candidates)):
        relative = path.relative_to(job_dir).as_posix()
        data = _read(path, root, limits, limits.max_job_size - total)
        if isinstance(data, str):
            if data:
                problems.append(f"dump {relative} skipped: {data}")
            continue
        total += len(data)
        try:
            found = _parse(data, relative, nodes)
        except DumpError as exc:
            problems.append(f"dump {relative} not read: {exc}")
            continue
        if found is None:
            continue
        if isinstance(found, RankTrace):
            traces.append(found)
        else:
            stacks.extend(found)
    return JobDumps(
        tuple(_one_per_rank(traces)), tuple(_one_per_process(stacks)), (), tuple(problems)
    )


def _read(path: Path, root: Path, limits: ReadLimits, left: int) -> bytes | str:
    """The bytes of a dump candidate, or why not ("" for a file that is no dump at all)."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            target = path.resolve(strict=True)
            if not target.is_relative_to(root):
                return f"a link to {target}, outside the job directory"
            st = os.stat(target)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return ""
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
            if _sniff(head) is None:
                return ""
            most = min(MAX_DUMP_BYTES, limits.max_file_size)
            if st.st_size > most:
                return f"{human_size(st.st_size)}, over the dump limit of {human_size(most)}"
            if st.st_size > left:
                return "over the per-job limit — hint: raise --max-job-size"
            return head + fh.read(most - len(head))
    except (OSError, RuntimeError) as exc:
        return f"cannot open: {getattr(exc, 'strerror', None) or exc}"


def _sniff(head: bytes) -> str | None:
    """What a file's first bytes say it may be: ``pickle``, ``json`` or ``stack`` (py-spy's
    text); None for anything else."""
    if _PICKLE.match(head):
        return "pickle"
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        return "json"
    lines = head.decode("utf-8", "replace").splitlines()
    return "stack" if is_stack_text(lines) else None


def _parse(
    data: bytes, relative: str, nodes: Collection[str]
) -> RankTrace | list[RankStack] | None:
    """A file's trace or stacks; None for JSON that is neither; ``DumpError`` for a dump L4
    cannot read (a pickle is taken for a dump: torch writes its traces as pickles)."""
    kind = _sniff(data[:SNIFF_BYTES])
    node, attempt = place(relative, nodes)
    if kind == "stack":
        return stacks_from_text(data.decode("utf-8", "replace"), relative, node, attempt)
    if kind == "json":
        try:
            value = load_json(data)
        except DumpError:
            return None  # some other file of the job
    else:
        value = load_plain_pickle(data)
    if isinstance(value, list) and value and all(_is_thread(t) for t in value):
        return stacks_from_json(value, relative, node, attempt)
    if isinstance(value, Mapping) and _is_trace(value):
        rank = _trace_rank(value, relative)
        if rank is None:
            raise DumpError("a Flight Recorder dump whose file name ends with no rank")
        return trace_from_dump(value, rank, node, attempt, relative)
    if kind == "pickle":
        raise DumpError("a pickle that is no Flight Recorder dump")
    return None


def _is_thread(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("frames"), list)


def _is_trace(value: Mapping[Any, Any]) -> bool:
    return "version" in value and ("entries" in value or "pg_status" in value)


def _trace_rank(value: Mapping[Any, Any], relative: str) -> int | None:
    own = value.get("rank")
    if isinstance(own, int) and not isinstance(own, bool):
        return own
    stem = relative.rsplit("/", 1)[-1]
    for suffix in _DUMP_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    m = _TRAILING_NUMBER.search(stem)
    return int(m.group(1)) if m else None


def place(relative: str, nodes: Collection[str]) -> tuple[str | None, int | None]:
    """(node, attempt) of a dump from its path: the first folder that is a node of the job,
    else a node named in the file name (the longest); the ``attempt_<k>`` folder nearest the
    file."""
    parts = relative.split("/")
    node = next((p for p in parts[:-1] if p in nodes), None)
    if node is None:
        named = [n for n in nodes if n and n in parts[-1]]
        node = max(named, key=len) if named else None
    attempt = None
    for part in parts[:-1]:
        m = _ATTEMPT.match(part)
        if m:
            attempt = int(m.group(1))
    return node, attempt


def _one_per_rank(traces: list[RankTrace]) -> list[RankTrace]:
    """One trace per (attempt, rank): a pickle and its JSON twin say the same; the pickle (it
    has frames, and is what torch writes by default) is listed first by name, the richer kept."""
    best: dict[tuple[int | None, int], RankTrace] = {}
    for t in traces:
        key = (t.attempt, t.rank)
        have = best.get(key)
        if have is None or _size(t) > _size(have):
            best[key] = t
    return sorted(best.values(), key=lambda t: (t.attempt or 0, t.rank, t.file))


def _size(t: RankTrace) -> int:
    return sum(len(g.entries) for g in t.groups)


def _one_per_process(stacks: list[RankStack]) -> list[RankStack]:
    """One stack per process: ``py-spy dump`` and its ``--json`` twin of one process say
    the same (the first by name kept)."""
    seen: dict[tuple[int | None, str | None, int | None, int | None], RankStack] = {}
    for s in stacks:
        key = (s.attempt, s.node, s.rank, s.pid)
        if s.pid is None and s.rank is None:
            key = (s.attempt, s.node, None, hash(s.file))
        seen.setdefault(key, s)
    return sorted(
        seen.values(), key=lambda s: (s.attempt or 0, s.rank if s.rank is not None else -1, s.file)
    )


def trace_from_dump(
    dump: Mapping[Any, Any], rank: int, node: str | None, attempt: int | None, file: str
) -> RankTrace:
    """A rank's trace from its dump (pickle or JSON: the same keys, numbers as text in JSON's
    ``pg_status``): per process group, its members, status and last ``KEPT_COLLECTIVES``
    collectives (point-to-point ops have their own sequence and are left out)."""
    members = _members(dump.get("pg_config"))
    raw_status = dump.get("pg_status")
    status: Mapping[Any, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    per: dict[str, list[Collective]] = {}
    names: dict[str, str] = {}
    pg_names: dict[str, str] = {}
    for raw in dump.get("entries") or ():
        if not isinstance(raw, Mapping):
            continue
        entry = _collective(raw)
        if entry is None:
            continue
        pg = str(raw.get("pg_id", ""))
        group = raw.get("process_group")
        if isinstance(group, list | tuple) and len(group) == 2:
            pg_names[pg], names[pg] = str(group[0]), str(group[1])
        per.setdefault(pg, []).append(entry)
    groups = [
        _group(pg, per.get(pg, []), names.get(pg, ""), pg_names.get(pg, pg), members, status)
        for pg in sorted(set(per) | {str(k) for k in status}, key=_pg_order)
    ]
    groups.sort(key=lambda g: -(g.last_enqueued if g.last_enqueued is not None else -1))
    kept = sorted(groups[:KEPT_GROUPS], key=lambda g: _pg_order(g.pg))
    return RankTrace(rank, node, attempt, file, str(dump.get("version", "")), tuple(kept))


def _pg_order(pg: str) -> tuple[int, str]:
    return (int(pg), "") if pg.isdigit() else (1 << 30, pg)


def _group(
    pg: str,
    entries: list[Collective],
    name: str,
    pg_name: str,
    members: Mapping[str, tuple[int, ...]],
    status: Mapping[Any, Any],
) -> GroupTrace:
    raw = status.get(pg)
    own: Mapping[Any, Any] = raw if isinstance(raw, Mapping) else {}
    collectives = sorted(entries, key=lambda e: e.seq)
    ranks = members.get(pg_name) or (
        next(iter(members.values())) if len(members) == 1 else ()
    )  # gloo registers its one group under an empty name
    return GroupTrace(
        pg=pg,
        name=name,
        ranks=ranks,
        last_enqueued=_status(own, "last_enqueued_collective"),
        last_started=_status(own, "last_started_collective"),
        last_completed=_status(own, "last_completed_collective"),
        entries=tuple(collectives[-KEPT_COLLECTIVES:]),
    )


def _status(own: Mapping[Any, Any], key: str) -> int | None:
    value = own.get(key)
    if isinstance(value, str):
        value = value.strip()
        return int(value) if value.lstrip("-").isdigit() and int(value) >= 0 else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _members(raw: Any) -> dict[str, tuple[int, ...]]:
    """Each process group's members from ``pg_config`` (``ranks`` is the text of a list: its
    numbers are read, never evaluated)."""
    out: dict[str, tuple[int, ...]] = {}
    if not isinstance(raw, Mapping):
        return out
    for key, info in raw.items():
        if not isinstance(info, Mapping):
            continue
        ranks = info.get("ranks")
        if isinstance(ranks, str):
            numbers = tuple(int(n) for n in _NUMBERS.findall(ranks)[:1_000_000])
        elif isinstance(ranks, list | tuple):
            numbers = tuple(r for r in ranks if isinstance(r, int) and not isinstance(r, bool))
        else:
            continue
        out[str(info.get("name", key))] = numbers
        out.setdefault(str(key), numbers)
    return out


def _collective(raw: Mapping[Any, Any]) -> Collective | None:
    """A collective entry (point-to-point ops have a sequence of their own: None)."""
    seq = raw.get("collective_seq_id")
    if raw.get("is_p2p") is True or not isinstance(seq, int) or isinstance(seq, bool):
        return None
    shape = "{}->{} {}->{}".format(
        *(
            json.dumps(raw.get(k), separators=(",", ":"), default=str)[:200]
            for k in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes")
        )
    )

    def timed(key: str) -> bool:
        value = raw.get(key)
        return isinstance(value, int) and not isinstance(value, bool) and value > 0

    # The recorder writes the state from its times; a JSON dump writes 0 for a missing time.
    if timed("time_discovered_completed_ns"):
        state = "completed"
    elif timed("time_discovered_started_ns"):
        state = "started"
    else:
        state = str(raw.get("state", "") or "scheduled")[:20]
    return Collective(seq=seq, op=str(raw.get("profiling_name", ""))[:80], state=state, shape=shape)


def stacks_from_text(
    text: str, file: str, node: str | None, attempt: int | None
) -> list[RankStack]:
    """The training thread of each process in ``py-spy dump``'s text (``--subprocesses``
    prints several)."""
    rank = _stack_rank(file)
    out: list[RankStack] = []
    pid: int | None = None
    threads: list[tuple[str, list[str]]] = []

    def close() -> None:
        if threads:
            name, frames = _main_thread(threads)
            out.append(RankStack(rank, node, attempt, file, pid, name, tuple(frames)))
        threads.clear()

    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if _PYSPY_PROCESS.match(line):
            close()
            pid = int(line.split()[1].rstrip(":"))
            continue
        thread = _PYSPY_THREAD.match(line)
        if thread:
            threads.append((thread.group(3) or thread.group(1), []))
            continue
        frame = _PYSPY_FRAME.match(line)
        if frame and threads and len(threads[-1][1]) < KEPT_FRAMES:
            name, where, number = frame.groups()
            threads[-1][1].append(f"{name} ({where}:{number})" if number else f"{name} ({where})")
    close()
    return out


def stacks_from_json(
    value: list[Any], file: str, node: str | None, attempt: int | None
) -> list[RankStack]:
    """The training thread of each process in ``py-spy dump --json`` (a list of threads)."""
    by_pid: dict[int | None, list[tuple[str, list[str]]]] = {}
    for thread in value:
        if not _is_thread(thread):
            continue
        pid = thread.get("pid") if isinstance(thread.get("pid"), int) else None
        name = thread.get("thread_name") or str(thread.get("thread_id", ""))
        frames = [_json_frame(f) for f in thread["frames"][:KEPT_FRAMES] if isinstance(f, Mapping)]
        by_pid.setdefault(pid, []).append((str(name), frames))
    rank = _stack_rank(file)
    out = []
    for pid, threads in by_pid.items():
        name, frames = _main_thread(threads)
        out.append(RankStack(rank, node, attempt, file, pid, name, tuple(frames)))
    return out


def _json_frame(frame: Mapping[Any, Any]) -> str:
    where = frame.get("short_filename") or frame.get("filename") or "?"
    line = frame.get("line")
    name = frame.get("name", "?")
    return f"{name} ({where}:{line})" if isinstance(line, int) and line else f"{name} ({where})"


def _main_thread(threads: list[tuple[str, list[str]]]) -> tuple[str, list[str]]:
    """The thread that runs the training: Python's main thread, else the deepest one."""
    for name, frames in threads:
        if name == "MainThread":
            return name, frames
    return max(threads, key=lambda t: len(t[1]))


def _stack_rank(file: str) -> int | None:
    m = _STACK_RANK.search(file.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def rank_nodes(ranks_by_node: Mapping[str, Collection[int]]) -> tuple[tuple[int, str], ...]:
    """The ranks that one node's log lines alone name, each with its node: a global rank
    (``[rank5]:``) is printed by one node; a local one (``[default1]:``) by every node, and is
    left out."""
    owners: dict[int, set[str]] = {}
    for node, ranks in ranks_by_node.items():
        for r in ranks:
            owners.setdefault(r, set()).add(node)
    return tuple(sorted((r, next(iter(n))) for r, n in owners.items() if len(n) == 1))
