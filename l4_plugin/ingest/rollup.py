"""Per-node rollups: one accumulator per (line kind, stage, iteration) while files are read.

The per-line work is a few dict lookups: the line kind (shared object from ``LineParser``), its
cached role (stage switch / iteration marker), and the accumulator. Timestamps are not parsed per
line: each accumulator keeps a reference to the raw line whose timestamp its first and last
occurrence inherit, and only those are parsed at the end (``resolve_timestamps``).
Python tracebacks are joined: the ``Traceback`` line and its indented frames are absorbed into the
exception line that closes them, which is where the information is; that line's kept record
carries the whole block as its message. Likewise the lines that continue an error record
(``continuations`` in ``stages.yaml``: a c10::Error's hints and C++ stack, torchrun's failure
summary) are appended to it instead of becoming events of their own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain, compress, islice, pairwise, repeat
from itertools import count as counting
from operator import itemgetter, lt, ne, not_
from typing import Any

from l4_plugin.ingest.header import (
    PREFIX_RANKS,
    RANK_SHAPES,
    digit_shape,
    rank_prefix_cached,
    second_of,
)
from l4_plugin.ingest.parser import KindSpec, LineKind
from l4_plugin.ingest.reader import Block
from l4_plugin.ingest.stages import NO_ROLE, STAGE_ORDER, IterationRule, Role, StageRules
from l4_plugin.ingest.timeline import UNPLACED, MarkKey, Timeline
from l4_plugin.records import Level
from l4_plugin.stacks import TB_FRAME

KEEP_LEVELS = frozenset(level.name for level in Level if level.is_flagged)
KEEP_EMITTERS = frozenset({"kernel", "slurm", "syslog"})
MAX_KEPT_PER_GROUP = 50  # lines kept per (node, kind, bucket) for l4-lines
RARE_SAMPLE = 3  # first lines of every group, kept in case the template is rare in the job
MAX_TRACEBACK_LINES = 200
_TB_CONTINUATION = ("During handling of the above", "The above exception", "Traceback (most")
_TB_OPENERS = ("Traceback (most recent call last)", 'File "')
# Ray prints a remote task's traceback with its header replaced by where it ran
# (``RayTaskError.__str__``: "ray::WorkerDict.init_model() (pid=4591, ip=10.0.0.2, …)"): a
# traceback's header all the same, in a chain and at its start.
_RAY_TB_HEADER = re.compile(r"ray::[\w.<>-]+\(\) \(pid=")
# Where a paste left frames out of a traceback ("...", "…", "[...]" on a line of its own).
_ELISIONS = frozenset(("...", "....", "…", "[...]", "[…]", "(...)"))
# IPython's (a notebook's) traceback (IPython/core/ultratb.py): its header names the exception
# first ("RuntimeError      Traceback (most recent call last)"); each frame is where it ran
# ("Cell In[8], line 1", "File ~/x.py:36, in train(self)"; before IPython 8
# "<ipython-input-8-…> in <module>", "/usr/lib/x.py in f(a)"), then its numbered source lines,
# the current one arrowed ("----> 1 …", "-> 1539 …"); blank lines between frames.
_IPY_TB_HEADER = re.compile(r"[A-Za-z_][\w.]*\s{2,}Traceback \(most recent call last\)")
# torchrun's failure summary quotes each failed rank's traceback as a row of its table
# (torch/distributed/elastic/multiprocessing/errors: "  traceback : ${message}", the message's
# later lines indented two more): a traceback whose header follows the row's label.
_TB_ROW = re.compile(r"traceback\s*:\s*Traceback \(most recent call last\)")
#: A traceback still open in a scan: its lines, first position, kind, byte offset, IPython's.
_OpenTraceback = tuple[list[str] | None, int, "LineKind | None", int | None, bool]
_NO_TB: _OpenTraceback = (None, 0, None, None, False)
_IPY_TB_LINE = re.compile(
    r"Cell In\[\d+\], line \d+|File \S.*:\d+, in \S|<ipython-input-[^>]*> in \S|\S+\.pyx? in \S"
    r"|-*> ?\d+ |\[\.\.\. skipping hidden \d+ frame"
)
_CHAINED = (
    "During handling of the above exception",
    "The above exception was the direct cause",
    # torch's ExceptionWrapper: an error a DataLoader worker (or a replica) raised, re-raised
    # in the main process with the worker's traceback in its message.
    "Original Traceback (most recent call last)",
    # Exceptions that quote another process's traceback in their message: torch.distributed
    # checkpoint's CheckpointException (one per failed rank), torch.multiprocessing.spawn's
    # ProcessRaisedException.
    "Traceback (most recent call last): (RANK ",
    "-- Process ",
)
# Records that the continuation lines after them join (``stages.yaml`` continuations): errors,
# and warnings, which c10 prints with the same C++ stack (TORCH_WARN, a TCPStore recv failure).
_LAST_ERROR = "Last error:"
_OPEN_LEVELS = frozenset(level.name for level in Level if level >= Level.WARNING)
# Lines of a file without iteration markers wait for the job timeline, keyed by the second they
# were printed in. The timestamp is read at most every SLOT_EVERY lines (always for the lines
# that are kept, errors and kernel lines): one-second slots only split groups, the group's own
# first line places it. Any year will do for splitting.
SLOT_EVERY = 16
_SLOT_YEAR = 2000
_UNPLACED = {s: UNPLACED + s for s in STAGE_ORDER}
#: A run of at least this many lines of one key is looked at in bulk (``_runs``).
BULK_RUN = 4
_NO_RUNS: dict[int, int] = {}
_MAX_READ = 65_536  # texts ``KindCache.values`` remembers per conversion before it starts over


@dataclass(slots=True)
class KeptLine:
    """A raw line (or joined traceback) that may go to ``l4-lines``."""

    path: str
    line: int
    message: str
    ts_ref: str | None
    rank: int | None
    flags: tuple[str, ...] = ()
    offset: int | None = None

    def __reduce__(self) -> tuple[type[KeptLine], tuple[object, ...]]:
        # A constructor call per object: far cheaper to unpickle than slots state.
        return KeptLine, (
            self.path,
            self.line,
            self.message,
            self.ts_ref,
            self.rank,
            self.flags,
            self.offset,
        )


@dataclass(slots=True)
class Group:
    """Occurrences of one line kind on one node in one stage / iteration."""

    count: int
    first_pos: int
    last_pos: int
    first_ts_ref: str | None
    last_ts_ref: str | None
    message: str
    path: str
    ranks: set[int] = field(default_factory=set)
    kept: list[KeptLine] = field(default_factory=list)
    #: Iteration markers: the durations they state (sum in whole nanoseconds, so that any
    #: grouping of the additions gives the same total; how many lines stated one).
    seconds_ns: int = 0
    seconds_n: int = 0

    def __reduce__(self) -> tuple[type[Group], tuple[object, ...]]:
        return Group, (
            self.count,
            self.first_pos,
            self.last_pos,
            self.first_ts_ref,
            self.last_ts_ref,
            self.message,
            self.path,
            self.ranks,
            self.kept,
            self.seconds_ns,
            self.seconds_n,
        )


@dataclass(slots=True)
class Run:
    """Timeless error/warning lines of a marker-less file between two stamped lines."""

    before: str | None  # the stamped line before the run (None: none yet in its file)
    before_pos: int
    after: str | None = None  # the stamped line after it, once read
    after_pos: int = 0
    #: A traceback the file ends with, no stamped line after it: the process key
    #: (``process_key``) of its file, whose other streams tell when the process was last alive.
    last_words: str | None = None


GroupKey = tuple[LineKind, str, int | None]


@dataclass(slots=True)
class FilePartial:
    """The rollup of consecutive files of one node, line kinds named by their masked line
    (``LineKind.key``), so it can travel between processes.

    ``kinds`` lists the files' distinct kinds in first-seen order (the order Drain must see them
    in); ``marks`` their timeline transitions in recording order. A worker process makes one per
    run of a node's files in its batch; ``NodeRollup.absorb`` merges them in job order.
    """

    node: str
    kinds: list[str]
    groups: dict[tuple[str, str, int | None], Group]
    runs: list[Run]
    marks: list[tuple[MarkKey, str]]
    lines: int
    last_iteration: int | None
    problems: list[str] = field(default_factory=list)
    specs: list[KindSpec] = field(default_factory=list)
    worker: int = 0
    size: int = 0
    #: CPU seconds its worker spent on it, and the worker's peak RSS (KiB) after it.
    cpu: float = 0.0
    rss_kb: int = 0
    files: int = 1  # consecutive files of the node it covers
    #: Groups a chained traceback took back to nothing (see ``NodeRollup.vanished``) and kept
    #: lines appended past their cap (a file ending in a traceback), by group key.
    vanished: list[tuple[tuple[str, str, int | None], int, str | None, set[int]]] = field(
        default_factory=list
    )
    forced: list[tuple[tuple[str, str, int | None], KeptLine]] = field(default_factory=list)
    #: Files cut at a read limit (``errors.FileCutError.cut``).
    cut: list[str] = field(default_factory=list)
    #: The last stamped line of each file, by the process that wrote it (``NodeRollup.ends``).
    ends: dict[str, list[str]] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Callable[..., FilePartial], tuple[object, ...]]:
        # Sent from a worker to the reducer: columns of plain values instead of one object per
        # group and kept line, which the reducer unpickled one constructor call at a time.
        return _unpack_partial, (
            self.node,
            self.kinds,
            _pack_groups(self.groups),
            [(r.before, r.before_pos, r.after, r.after_pos, r.last_words) for r in self.runs],
            self.ends,
            self.marks,
            self.lines,
            self.last_iteration,
            self.problems,
            self.specs,
            (self.worker, self.size, self.cpu, self.rss_kb, self.files),
            self.vanished,
            _pack_forced(self.groups, self.forced),
            self.cut,
        )


#: ``FilePartial.groups`` as columns: group keys (kind, stage, iteration), then one column per
#: ``Group`` field, then the kept lines of every group one after the other (``kept_n`` each) as
#: one column per ``KeptLine`` field.
_PackedGroups = tuple[list[Any], ...]


def _pack_groups(groups: dict[tuple[str, str, int | None], Group]) -> _PackedGroups:
    """``groups`` as a tuple of flat lists (see ``_PackedGroups``)."""
    values = groups.values()
    kept = [k for g in values for k in g.kept]
    return (
        list(groups),
        [g.count for g in values],
        [g.first_pos for g in values],
        [g.last_pos for g in values],
        [g.first_ts_ref for g in values],
        [g.last_ts_ref for g in values],
        [g.message for g in values],
        [g.path for g in values],
        [g.ranks for g in values],
        [g.seconds_ns for g in values],
        [g.seconds_n for g in values],
        [len(g.kept) for g in values],
        [k.path for k in kept],
        [k.line for k in kept],
        [k.message for k in kept],
        [k.ts_ref for k in kept],
        [k.rank for k in kept],
        [k.flags for k in kept],
        [k.offset for k in kept],
    )


def _unpack_groups(packed: _PackedGroups) -> dict[tuple[str, str, int | None], Group]:
    """The inverse of ``_pack_groups``: new ``Group`` and ``KeptLine`` objects."""
    keys, *fields, kept_n = packed[:12]
    kept = list(map(KeptLine, *packed[12:]))
    groups: dict[tuple[str, str, int | None], Group] = {}
    at = 0
    for key, count, fp, lp, fts, lts, msg, path, ranks, sns, sn, n in zip(
        keys, *fields, kept_n, strict=True
    ):
        groups[key] = Group(count, fp, lp, fts, lts, msg, path, ranks, kept[at : at + n], sns, sn)
        at += n
    return groups


def _pack_forced(
    groups: dict[tuple[str, str, int | None], Group],
    forced: list[tuple[tuple[str, str, int | None], KeptLine]],
) -> list[tuple[tuple[str, str, int | None], int, KeptLine | None]]:
    """``forced`` with each kept line named by its index in its group's kept lines (the same
    object after unpacking, as ``absorb`` requires), or carried whole when it is not there."""
    out: list[tuple[tuple[str, str, int | None], int, KeptLine | None]] = []
    for key, line in forced:
        group = groups.get(key)
        at = next((i for i, k in enumerate(group.kept) if k is line), -1) if group else -1
        out.append((key, at, None if at >= 0 else line))
    return out


def _unpack_partial(
    node: str,
    kinds: list[str],
    packed: _PackedGroups,
    runs: list[tuple[str | None, int, str | None, int, str | None]],
    ends: dict[str, list[str]],
    marks: list[tuple[MarkKey, str]],
    lines: int,
    last_iteration: int | None,
    problems: list[str],
    specs: list[KindSpec],
    tally: tuple[int, int, float, int, int],
    vanished: list[tuple[tuple[str, str, int | None], int, str | None, set[int]]],
    forced: list[tuple[tuple[str, str, int | None], int, KeptLine | None]],
    cut: list[str],
) -> FilePartial:
    """A ``FilePartial`` from what its ``__reduce__`` sent."""
    groups = _unpack_groups(packed)
    worker, size, cpu, rss_kb, files = tally
    return FilePartial(
        node,
        kinds,
        groups,
        [Run(*r) for r in runs],
        marks,
        lines,
        last_iteration,
        problems,
        specs,
        worker,
        size,
        cpu,
        rss_kb,
        files,
        vanished,
        [(key, line if line is not None else groups[key].kept[at]) for key, at, line in forced],
        cut,
        ends,
    )


#: Lines of one read block with their kinds; ``block.offset(base + i)`` is line i's byte offset;
#: optionally (a fifth item) the lines' dedup keys (``LineParser.feed_keyed``; None: none).
Chunk = (
    tuple[list[str], list[LineKind], Block | None, int]
    | tuple[list[str], list[LineKind], Block | None, int, list[str] | None]
)
#: Called for every raw line by ``scan(..., sink=...)`` (``--full``): position, raw line, kind,
#: stage, iteration, timestamp reference, rank, byte offset.
LineSink = Callable[[int, str, LineKind, str, int | None, str | None, int | None, int | None], None]


#: What the scan needs to know of a line kind, computed once per distinct kind: its lane in the
#: scan loop (``_PLAIN``, ``_MARKER`` or 0), its role, whether it continues an open error record,
#: opens one though it has no error level, starts a Python traceback, is kept like an error
#: (``KEEP_LEVELS`` / ``KEEP_EMITTERS``), has an error level, has a timestamp, may start with a
#: rank prefix (the last two: the kind's own attributes).
Traits = tuple[int, Role, bool, bool, bool, bool, bool, bool, bool, bool]
#: Lanes: a line of no role and none of the other traits only counts in its group; an iteration
#: marker of none of them also moves its file's iteration. Any other line takes the general path.
_PLAIN = 1
_MARKER = 2


class KindCache:
    """The ``Traits`` of each line kind, shared by every rollup that uses the same
    ``LineParser``'s kinds (a worker's files, a whole job): training logs repeat a few thousand
    kinds, so the stage rules' regexes run once per kind, never per line."""

    def __init__(self) -> None:
        self.traits: dict[LineKind, Traits] = {}
        #: Kinds below the keep level whose groups keep no sample lines any more: the owner
        #: (``workers.Scanner``) knows each is printed too often to be rare in the job.
        self.frequent: set[LineKind] = set()
        #: Values read from iteration markers by their text, per conversion (``values``).
        self.read: dict[str, dict[str, int]] = {}

    def values(self, texts: list[str], unit: str) -> list[int]:
        """What the scan loop reads from each text: ``int`` of it (``unit`` "int"), or a
        duration in seconds ("s") or milliseconds ("ms") in whole nanoseconds, the way the loop
        adds it (``round(seconds * 1e9)``). Remembered by text: marker lines repeat them (an
        iteration's number on each rank, a duration to one decimal), a lookup costs less."""
        known = self.read.get(unit)
        if known is None or len(known) > _MAX_READ:
            known = self.read[unit] = {}
        for text in set(texts).difference(known):
            if unit == "int":
                known[text] = int(text)
                continue
            seconds = float(text)
            if unit == "ms":
                seconds = seconds / 1000.0
            known[text] = round(seconds * 1e9)
        return list(map(known.__getitem__, texts))

    def compute(self, kind: LineKind, rules: StageRules) -> Traits:
        """The traits of ``kind`` (cached)."""
        traits = self.traits.get(kind)
        if traits is None:
            body = kind.body
            role = rules.role(body)
            # NCCL writes its header on every line: its WARN is a message of its own (its INFO
            # return trace, "net.cc:1298 -> 6", continues the warning it explains).
            cont = rules.continues(body) and not (
                kind.emitter == "nccl" and kind.level in _OPEN_LEVELS
            )
            opener = rules.opens(body)
            is_tb = (
                body.startswith(_TB_OPENERS)
                or _RAY_TB_HEADER.match(body) is not None
                or _IPY_TB_HEADER.match(body) is not None
                or _TB_ROW.match(body) is not None
            )
            keep = kept_like_errors(kind)
            open_level = kind.level in _OPEN_LEVELS
            # A line with nothing after its labels (a collector's stamp, "3: ", an empty line
            # between two ranks' interleaved traces) neither continues nor closes a record.
            blank = not body.strip()
            lane = 0  # the general path
            if not (cont or opener or is_tb or keep or open_level or blank):
                if role is NO_ROLE:
                    lane = _PLAIN
                elif role.iteration is not None:
                    lane = _MARKER
            traits = self.traits[kind] = (
                lane,
                role,
                cont,
                opener,
                is_tb,
                keep,
                open_level,
                kind.has_timestamp,
                kind.rank_prefix,
                blank,
            )
        return traits


class NodeRollup:
    """Accumulates every file of one node."""

    def __init__(
        self,
        node: str,
        rules: StageRules,
        timeline: Timeline | None = None,
        cache: KindCache | None = None,
    ) -> None:
        self.node = node
        self.rules = rules
        self.timeline = timeline if timeline is not None else Timeline()
        # Runs of timeless error/warning lines in files without iteration markers, by run id:
        # such a line takes the time of the nearer stamped neighbour in its file (``time_ref``).
        self.runs: list[Run] = []
        self.groups: dict[GroupKey, Group] = {}
        self.lines = 0
        self.cache = cache if cache is not None else KindCache()
        self.last_iteration: int | None = None
        # A marker of a rule that is no fallback was seen in one of the node's files scanned so
        # far (``IterationRule.fallback``): a trainer's progress on stderr, the engine's count on
        # stdout are one rank's two files.
        self.counted = False
        # What ``absorb`` needs to give exactly the result of scanning the files into one
        # rollup: a group created and taken back to nothing by a chained traceback (deleted
        # here; an earlier part of the node keeps it, with this last position, time and rank),
        # and the kept line of a file ending inside a traceback (appended past the cap).
        self.vanished: list[tuple[GroupKey, int, str | None, set[int]]] = []
        self.forced: list[tuple[GroupKey, KeptLine]] = []
        # The last stamped line of each file, by ``process_key``: a process's stdout and stderr
        # are two files; a traceback its stderr ends with was printed when it was last alive.
        self.ends: dict[str, list[str]] = {}

    def absorb(
        self, part: FilePartial, kind_of: Callable[[str], LineKind], timeline: Timeline
    ) -> None:
        """Merge one file's partial rollup (``FilePartial``), files in job order.

        The result is what scanning the file into this rollup would have given: counts and
        ranks add up, the first file keeps the group's first position, time and exemplar, the
        last one sets its last, kept lines fill up to the group's cap in file order, run ids
        continue this node's numbering and the file's transitions go to the job's timeline.
        """
        offset = len(self.runs)
        self.runs.extend(part.runs)
        for key, refs in part.ends.items():
            self.ends.setdefault(key, []).extend(refs)
        groups = self.groups
        for (key, stage, it), last_pos, last_ts_ref, ranks in part.vanished:
            if offset and it is not None and it < 0:
                it -= offset
            have = groups.get((kind_of(key), stage, it))
            if have is not None:
                have.last_pos, have.last_ts_ref = last_pos, last_ts_ref
                have.ranks |= ranks
        for (key, stage, it), group in part.groups.items():
            kind = kind_of(key)
            if offset and it is not None and it < 0:
                it -= offset
            gk = (kind, stage, it)
            have = groups.get(gk)
            if have is None:
                groups[gk] = group
            else:
                _add(have, group, kept_cap(kind))
        for (key, stage, it), kept in part.forced:
            if offset and it is not None and it < 0:
                it -= offset
            have = groups.get((kind_of(key), stage, it))
            if have is not None and not any(k is kept for k in have.kept):
                have.kept.append(kept)
        for mark, ref in part.marks:
            timeline.mark(mark, ref)
        self.lines += part.lines
        if part.last_iteration is not None:
            self.last_iteration = max(
                part.last_iteration, self.last_iteration or part.last_iteration
            )

    def partial(self, kinds: Iterable[LineKind]) -> FilePartial:
        """This rollup (one file scanned into a fresh ``NodeRollup``) as a ``FilePartial``:
        kinds by their masked line, so it can travel between processes."""
        return FilePartial(
            node=self.node,
            kinds=[k.key for k in kinds],
            groups={(k.key, s, it): g for (k, s, it), g in self.groups.items()},
            runs=self.runs,
            marks=list(self.timeline.marks.items()),
            lines=self.lines,
            last_iteration=self.last_iteration,
            vanished=[((k.key, s, it), p, r, ranks) for (k, s, it), p, r, ranks in self.vanished],
            forced=[((k.key, s, it), kept) for (k, s, it), kept in self.forced],
            ends=self.ends,
        )

    def scan(
        self,
        path: str,
        rank: int | None,
        chunks: Iterable[Chunk],
        long_lines: set[int] | None = None,
        sink: LineSink | None = None,
    ) -> None:
        """Add one file, given its lines and their kinds chunk by chunk (in file order).

        ``sink`` (the ``--full`` pass) sees every raw line with the stage and iteration it was
        tagged with, traceback frames included.

        Until the file prints an iteration marker of its own, its lines are keyed
        ``(kind, "?" + its own stage, second)`` and placed on the job's timeline when the job is
        written (:mod:`l4_plugin.ingest.timeline`); the sink sees the same key.
        """
        groups = self.groups
        timeline = self.timeline
        entered = _Entries()
        slot: int | None = None
        slot_ref: str | None = None
        slot_pos = -SLOT_EVERY
        open_run: int | None = None
        waiting: list[int] = []  # runs still waiting for a stamped line after them
        # The last stamped line of each stream (a line's rank) of the file; the one a timeline
        # transition takes (``mark_ref``) and the stream it is of.
        streams: dict[int | None, str] = {}
        mark_ref: str | None = None
        ref_rank: int | None = rank
        tb_runs: set[int] = set()  # the runs timeless tracebacks opened
        stamp_pos = 0
        # The traceback just closed, while a chained one ("During handling of the above
        # exception…") may still follow: (group key, group, its kept line, message, first
        # position, byte offset, the Traceback line's kind).
        chain: tuple[GroupKey, Group, KeptLine | None, str, int, int | None, LineKind] | None = None
        traits_of = self.cache.traits.get
        marked = timeline.marks
        rank_spans = RANK_SHAPES.get
        prefix_rank = PREFIX_RANKS.get
        compute = self.cache.compute
        frequent = self.cache.frequent
        rules = self.rules
        runs = self.runs
        stage = "init"
        iteration: int | None = None
        counted = self.counted  # a marker of a rule that is no fallback was seen (IterationRule)
        training = False
        ts_ref: str | None = None
        ts_shape: str | None = None  # the key of ts_ref (None: not known)
        pos = 0
        tb: list[str] | None = None
        tb_start = 0
        tb_offset: int | None = None
        tb_kind: LineKind | None = None
        ipython = False  # the open traceback is IPython's (its frames are shaped otherwise)
        # Whose the open traceback is, and the others' still open: ranks of one stream print
        # their tracebacks at once (srun -l, mpirun, torchrun's --tee of several local ranks);
        # a line of another rank neither continues nor closes this one's.
        tb_rank = rank
        pending: dict[int | None, _OpenTraceback] = {}
        # The error record that continuation lines are joined to (None: nothing is open).
        open_group: Group | None = None
        open_kept: KeptLine | None = None
        open_first = False
        open_lines = 0
        # The record just took NCCL's "Last error:": the next line of the same stream is that
        # error's own words, whatever they say (NCCL's last warning, bare).
        last_error = False
        last_error_rank: int | None = None
        # ... or an error whose message ends announcing more ("Error recorded from
        # training_loop: From /job:worker/replica:0/task:0:"): its next line, when that line
        # has no level and no time of its own, is the rest of the message.
        said_more = False
        for chunk in chunks:
            lines, kinds, block, base = chunk[:4]
            if not base and block is not None and block.ref is not None:
                # Another host's stamped line of a shared file came before this block: the
                # time the file had reached (``hosts.host_blocks``), taken as a stamped line's
                # own would be by the timeless lines after it (not by the timeline's marks).
                ts_ref, ts_shape, stamp_pos = block.ref, None, pos
                for i in waiting:
                    runs[i].after, runs[i].after_pos = block.ref, pos + 1
                waiting.clear()
                open_run = None
            # Each line's dedup key, a finer digit shape whose hash is already computed: the
            # key of the per-shape caches (rank prefixes, iteration markers) when there is one.
            keys = chunk[4] if len(chunk) > 4 else None
            shapes: list[str] | list[None] = keys if keys is not None else [None] * len(lines)
            # index of a line in its block: base + pos - first (no enumerate in the hot loop)
            first = pos + 1 - base
            rows = zip(lines, kinds, shapes, strict=True)
            # Runs of lines of one key (so of one kind and shape) by their first line's index:
            # a marker line that starts one takes the rest of it in bulk (``_marker_columns``).
            run_ends = _runs(keys, BULK_RUN) if keys is not None and sink is None else _NO_RUNS
            for raw, kind, shape in rows:
                pos += 1
                traits = traits_of(kind)
                if traits is None:
                    traits = compute(kind, rules)
                lane, role, cont, opener, is_tb, keep, open_level, stamped, prefixed, blank = traits
                if prefixed:
                    # ``rank_prefix_cached``, inlined for a shape whose spans are known: the
                    # rank's own digits, or a launcher prefix's cached rank.
                    spans = rank_spans(shape) if shape is not None else None
                    if spans is None:
                        line_rank, prefix_end = rank_prefix_cached(raw, shape)
                    elif spans[0] == 1:
                        line_rank, prefix_end = int(raw[spans[1] : spans[2]]), spans[3]
                    elif (
                        spans[0] == 2
                        and (line_rank := prefix_rank(raw[spans[1] : spans[2]])) is not None
                    ):
                        prefix_end = spans[3]
                    else:
                        line_rank, prefix_end = rank_prefix_cached(raw, shape)
                    if line_rank is None:
                        line_rank = rank
                else:
                    line_rank, prefix_end = rank, 0
                if line_rank != tb_rank and (tb is not None or pending):
                    if tb is not None:
                        pending[tb_rank] = (tb, tb_start, tb_kind, tb_offset, ipython)
                    tb, tb_start, tb_kind, tb_offset, ipython = pending.pop(line_rank, _NO_TB)
                    tb_rank = line_rank
                if stamped:
                    ts_ref, ts_shape = raw, shape
                    stamp_pos = pos
                    streams[line_rank] = mark_ref = raw
                    ref_rank = line_rank
                    if waiting:
                        for i in waiting:
                            runs[i].after, runs[i].after_pos = raw, pos
                        waiting.clear()
                        open_run = None
                elif line_rank != ref_rank:
                    # A timeless line of another stream of a shared file (a rank's output in
                    # the launcher's log) marks a transition no later than its own stream's
                    # last stamp says: a rank's stdout, buffered, reaches the file after the
                    # agent reported its death, yet its steps came before. (Its lines keep the
                    # file's time: they are not evidence before it was written.)
                    mark_ref = streams.get(line_rank, ts_ref)
                    ref_rank = line_rank
                if lane and tb is None and chain is None and not last_error:
                    # The simple lane, most lines of a log: a plain line or an iteration marker
                    # that nothing before it absorbs only adds to its group (what the general
                    # path below does for such a line, without the cases it cannot be in).
                    seconds: float | None = None
                    if lane == _MARKER:
                        # (the _MARKER lane is the kinds whose role has an iteration rule)
                        marker = role.iteration
                        assert marker is not None
                        # ``marker.read``, inlined for a known shape that states seconds,
                        # milliseconds (Megatron's) or nothing: the number's and the duration's
                        # spans, and the unit (``stages._in_seconds``'s arithmetic for ms).
                        read = marker.shape_spans.get(shape) if shape is not None else None
                        if read is not None and read[4] != "per_s":
                            number = int(raw[read[0] : read[1]]) if read[0] >= 0 else None
                            if read[2] >= 0:
                                seconds = float(raw[read[2] : read[3]])
                                if read[4] == "ms":
                                    seconds = seconds / 1000.0
                        else:
                            number, seconds = marker.read(
                                raw, digit_shape(raw) if shape is None else shape
                            )
                        if marker.fallback:
                            number = None if counted else number
                        else:
                            counted = True
                        if (number is not None and number != iteration) or stage != "training":
                            if number is not None:
                                iteration = number
                            stage = "training"
                            # ``_enter``, inlined; ``Timeline.mark`` keeps a transition's
                            # first reference only, so a known one needs no call.
                            entered_key = (stage, iteration)
                            again = entered.get(entered_key, 0)
                            entered[entered_key] = again + 1
                            mark_key = (stage, iteration, again)
                            if mark_key not in marked:
                                timeline.mark(mark_key, mark_ref)
                        training = True
                    if iteration is None or stage == "checkpointing":  # _unplaced, inlined
                        if (
                            ts_ref is not slot_ref
                            and ts_ref is not None
                            and pos - slot_pos >= SLOT_EVERY
                        ):
                            slot_ref, slot_pos = ts_ref, pos
                            second = second_of(ts_ref, _SLOT_YEAR, ts_shape)
                            if second is not None:
                                slot = second
                        key = (kind, _UNPLACED[stage], slot)
                    else:
                        key = (kind, stage, iteration)
                    group = groups.get(key)
                    if group is None:
                        group = groups[key] = Group(1, pos, pos, ts_ref, ts_ref, raw, path)
                    else:
                        group.count += 1
                        group.last_pos = pos
                        group.last_ts_ref = ts_ref
                    if line_rank is not None:
                        group.ranks.add(line_rank)
                    if seconds is not None:
                        group.seconds_ns += round(seconds * 1e9)
                        group.seconds_n += 1
                    kept = group.kept
                    if len(kept) < RARE_SAMPLE and kind not in frequent:
                        flags = ("truncated",) if long_lines and pos in long_lines else ()
                        at = block.offset(pos - first) if block is not None else None
                        kept.append(KeptLine(path, pos, raw, ts_ref, line_rank, flags, at))
                    open_group = None
                    if sink is not None:
                        tag, at_it = _tag(stage, iteration, slot)
                        sink(pos, raw, kind, tag, at_it, ts_ref, line_rank, _at(block, pos - first))
                        continue
                    if lane != _MARKER or not run_ends or pending:
                        # (a rank's traceback still open: each line may be that rank's)
                        continue
                    end = run_ends.get(pos - first - base)
                    if end is None or iteration is None:
                        continue
                    # The rest of a run of marker lines of this one shape: each adds to its
                    # iteration's group as the lines above would (same kind, traits and spans;
                    # only their digits differ), their values read in bulk.
                    run = lines[pos - first - base + 1 : end]
                    assert marker is not None and shape is not None
                    numbered = not (marker.fallback and counted)
                    bulk = _marker_columns(run, marker, shape, numbered, rank, prefixed, self.cache)
                    if bulk is None:
                        continue
                    columns, ref_rank = bulk
                    iteration = _add_markers(
                        self, kind, run, columns, pos, iteration, ts_ref, stamped, streams,
                        entered, kind not in frequent, (path, long_lines, block, first),
                    )  # fmt: skip
                    pos += len(run)
                    if stamped:
                        ts_ref = mark_ref = run[-1]
                        ts_shape, stamp_pos = shape, pos
                    else:
                        mark_ref = streams.get(ref_rank, ts_ref)
                    next(islice(rows, len(run) - 1, None))
                    continue
                # A line absorbed into the record it continues: a traceback's frames, or the
                # continuation lines of the error record just before (``continuations``).
                absorbed = False
                after_last = (
                    last_error
                    and not blank
                    and line_rank == last_error_rank
                    and not (kind.emitter == "nccl" and kind.level in _OPEN_LEVELS)
                    and not (said_more and (kind.level is not None or kind.has_timestamp))
                )
                last_error = last_error and blank
                said_more = said_more and last_error
                if chain is not None and tb is None:
                    body = _after_prefix(raw, prefix_end)
                    # (the kind's body: the message past a collector's or a pod log's time)
                    if body.startswith(_CHAINED) or kind.body.startswith(_CHAINED):
                        # A chained exception: one record, identified by the exception that
                        # ends it. The first one's occurrence is taken back.
                        key0, group0, kept0, message0, tb_start, tb_offset, tb_kind = chain
                        # (named by the exception that closed it, should the file end first)
                        tb_kind = key0[0]
                        group0.count -= 1
                        if kept0 is not None and kept0 in group0.kept:
                            group0.kept.remove(kept0)
                        if group0.count <= 0 and groups.get(key0) is group0:
                            del groups[key0]
                            self.vanished.append(
                                (key0, group0.last_pos, group0.last_ts_ref, group0.ranks)
                            )
                        if open_group is group0:
                            open_group = open_kept = None
                        tb = [*message0.split("\n"), raw]
                        tb_rank = line_rank
                        chain = None
                        if sink is not None:
                            tag, at_it = _tag(stage, iteration, slot)
                            sink(pos, raw, kind, tag, at_it, ts_ref, line_rank, tb_offset)
                        continue
                    if body.strip():
                        chain = None
                if tb is not None:
                    body = _after_prefix(raw, prefix_end)
                    if (
                        not body
                        or (body[0] in " \t^~" and not _raised_below(body, tb[-1], prefix_end))
                        or body.startswith(_TB_CONTINUATION)
                        or kind.body.startswith(_TB_CONTINUATION)
                        or _RAY_TB_HEADER.match(body) is not None
                        or (
                            kind.has_timestamp
                            and _stamped_indent(raw, prefix_end)
                            and not _stamped_raise(raw, tb[-1], prefix_end)
                        )
                        # (a frame a paste left unindented: a quoted excerpt dedented)
                        or (body[0] == "F" and TB_FRAME.match(body) is not None)
                        or (ipython and _IPY_TB_LINE.match(body) is not None)
                        or body.rstrip() in _ELISIONS
                    ) and len(tb) < MAX_TRACEBACK_LINES:
                        tb.append(raw)
                        absorbed = True
                elif (
                    is_tb
                    # (a faulthandler dump's frame continues the crash it follows)
                    and not (cont and open_group is not None)
                    and (
                        _opens_traceback(kind.body, _after_prefix(raw, prefix_end))
                        # (an indented frame under a shipper's stamp: the same, its header cut)
                        or (kind.has_timestamp and _stamped_indent(raw, prefix_end))
                    )
                ):
                    # A traceback, or the indented frames of one whose header was cut off (a
                    # pasted excerpt): one record either way, named by the exception ending it.
                    tb, tb_start, tb_kind, tb_rank = [raw], pos, kind, line_rank
                    ipython = _IPY_TB_HEADER.match(kind.body) is not None
                    tb_offset = _at(block, pos - first)
                    # A timeless traceback is a run of its own: when its file ends with it, it
                    # was printed when its process died, not at the stamp before it.
                    open_run = None
                    if sink is not None:
                        tag, at_it = _tag(stage, iteration, slot)
                        sink(pos, raw, kind, tag, at_it, ts_ref, line_rank, tb_offset)
                    continue
                elif (
                    open_group is not None
                    and (cont or after_last)
                    and open_lines < MAX_TRACEBACK_LINES
                ):
                    last_error, last_error_rank = cont and kind.body == _LAST_ERROR, line_rank
                    open_lines += 1
                    if open_kept is not None:
                        open_kept.message += "\n" + raw
                    if open_first:
                        open_group.message += "\n" + raw
                    absorbed = True
                if absorbed:
                    if sink is not None:
                        at = _at(block, pos - first)
                        tag, at_it = _tag(stage, iteration, slot)
                        sink(pos, raw, kind, tag, at_it, ts_ref, line_rank, at)
                    continue
                then: str | None = None
                seconds = None
                if role is not NO_ROLE:
                    stage_before, iteration_before = stage, iteration
                    if role.iteration is not None:
                        number, seconds = role.iteration.read(
                            raw, digit_shape(raw) if shape is None else shape
                        )
                        if role.iteration.fallback:
                            number = None if counted else number
                        else:
                            counted = True
                        if number is not None:
                            iteration = number
                        stage, training = "training", True
                    elif role.stage is not None:
                        stage = rules.next_stage(stage, role.stage, training)
                        training = training or stage == "training"
                        # A finished save returns to what follows it; also a save this file saw
                        # begin where its rank prints no progress of its own (its save lines are
                        # its only marks), not a lone "saved" line before training.
                        if stage == role.stage and (training or stage_before == stage):
                            then = role.then
                    if (iteration != iteration_before or stage != stage_before) and stage != "init":
                        _enter(timeline, entered, stage, iteration, mark_ref)
                unplaced = iteration is None or stage == "checkpointing"  # _unplaced, inlined
                if (
                    unplaced
                    and ts_ref is not slot_ref
                    and ts_ref is not None
                    and (keep or pos - slot_pos >= SLOT_EVERY)
                ):
                    slot_ref, slot_pos = ts_ref, pos
                    second = second_of(ts_ref, _SLOT_YEAR, ts_shape)
                    if second is not None:
                        slot = second
                if unplaced:
                    key_stage, key_it = _UNPLACED[stage], slot
                    if keep and not kind.has_timestamp:
                        if open_run is None:
                            open_run = len(runs)
                            waiting.append(open_run)
                            runs.append(Run(ts_ref, stamp_pos))
                            if tb is not None:
                                tb_runs.add(open_run)
                        key_it = -1 - open_run
                else:
                    key_stage, key_it = stage, iteration
                if sink is not None:
                    sink(
                        pos,
                        raw,
                        kind,
                        key_stage,
                        key_it,
                        ts_ref,
                        line_rank,
                        _at(block, pos - first),
                    )
                message = raw
                first_pos = pos
                joined = tb is not None
                if tb is not None:
                    message = "\n".join([*tb, raw])
                    first_pos = tb_start
                    tb = None
                key = (kind, key_stage, key_it)
                group = groups.get(key)
                if group is None:
                    group = groups[key] = Group(
                        1,
                        first_pos,
                        pos,
                        ts_ref,
                        ts_ref,
                        message,
                        path,
                    )
                else:
                    group.count += 1
                    group.last_pos = pos
                    group.last_ts_ref = ts_ref
                if line_rank is not None:
                    group.ranks.add(line_rank)
                if seconds is not None:
                    group.seconds_ns += round(seconds * 1e9)
                    group.seconds_n += 1
                kept = group.kept
                n_kept = len(kept)
                if (n_kept < RARE_SAMPLE and kind not in frequent) or (
                    keep and n_kept < MAX_KEPT_PER_GROUP
                ):
                    flags = ("truncated",) if long_lines and pos in long_lines else ()
                    if joined:
                        offset = tb_offset
                    else:
                        offset = block.offset(pos - first) if block is not None else None
                    kept.append(
                        KeptLine(path, first_pos, message, ts_ref, line_rank, flags, offset)
                    )
                    this_kept: KeptLine | None = kept[-1]
                else:
                    this_kept = None
                if joined and tb_kind is not None:
                    chain = (key, group, this_kept, message, first_pos, tb_offset, tb_kind)
                if joined or opener or open_level:
                    open_group, open_kept = group, this_kept
                    open_first, open_lines = group.count == 1, 0
                    if open_level and not joined and kind.body.endswith(":"):
                        last_error = said_more = True
                        last_error_rank = line_rank
                elif not blank:
                    open_group = open_kept = None
                if then is not None and then != stage:
                    stage = then
                    _enter(timeline, entered, stage, iteration, mark_ref)
        if tb is not None:
            pending[tb_rank] = (tb, tb_start, tb_kind, tb_offset, ipython)
        for tb_owner, (tb, tb_start, tb_kind, tb_offset, _) in pending.items():
            if tb is None or tb_kind is None:
                continue
            # The file ends inside a traceback (the process died while printing it): keep the
            # block as one record under its Traceback line rather than lose it.
            message = "\n".join(tb)
            tb_key = (tb_kind, *_tag(stage, iteration, slot))
            if _unplaced(stage, iteration):
                runs.append(Run(ts_ref, stamp_pos, last_words=process_key(path)))
                tb_key = (tb_kind, _UNPLACED[stage], -len(runs))
            group = groups.get(tb_key)
            if group is None:
                group = groups[tb_key] = Group(0, tb_start, tb_start, ts_ref, ts_ref, message, path)
            group.count += 1
            group.last_pos = tb_start
            if tb_owner is not None:
                group.ranks.add(tb_owner)
            held = KeptLine(path, tb_start, message, ts_ref, tb_owner, (), tb_offset)
            group.kept.append(held)
            self.forced.append((tb_key, held))
        owner = process_key(path)
        if ts_ref is not None:
            self.ends.setdefault(owner, []).append(ts_ref)
        for i in waiting:  # the tracebacks the file ends with (one may quote another)
            if i in tb_runs:
                runs[i].last_words = owner
        self.lines += pos
        self.counted = counted
        if iteration is not None:
            self.last_iteration = max(iteration, self.last_iteration or iteration)


_STREAM_NAMES = frozenset({"stdout", "stderr", "out", "err", "output", "error", "console", "log"})


def process_key(path: str) -> str:
    """Which process wrote a file, as far as its path tells: torchrun ``--log-dir`` writes a
    rank's ``stdout.log`` and ``stderr.log`` into one directory, Slurm a task's ``%j-%t.out``
    and ``.err`` under one stem; other files are a process each."""
    folder, _, name = path.replace("\\", "/").rpartition("/")
    stem = name.split(".", 1)[0]
    return folder if stem.lower() in _STREAM_NAMES else f"{folder}/{stem}"


def time_ref(rollup: NodeRollup, key_it: int | None, group: Group) -> str | None:
    """The stamped line whose time an unplaced group takes: for a run of timeless error or
    warning lines (negative ``key_it``), the nearer of the stamped lines around it in its file
    (an error block is printed together; the line before may be hours older), else its own.

    A timeless traceback its file ends with is the process's last words: it takes the last
    stamp the process printed on any of its streams, when that is later (a rank's stderr holds
    a few start-up warnings and the traceback; its stdout went on to the step it died in)."""
    if key_it is None or key_it >= 0:
        return group.first_ts_ref
    run = rollup.runs[-1 - key_it]
    if run.after is None and run.last_words is not None:
        alive = _latest(rollup.ends.get(run.last_words, ()))
        if alive is not None and (run.before is None or _second(alive[0]) > _second(run.before)):
            return alive[0]
    if run.after is not None and (
        run.before is None or run.after_pos - group.first_pos < group.first_pos - run.before_pos
    ):
        return run.after
    return run.before


def _second(ref: str) -> float:
    second = second_of(ref, _SLOT_YEAR, None)
    return -math.inf if second is None else second


def _latest(refs: Iterable[str]) -> tuple[str, float] | None:
    """The latest of stamped lines, with its second (None: none has a time)."""
    best: tuple[str, float] | None = None
    for ref in refs:
        t = _second(ref)
        if t > -math.inf and (best is None or t > best[1]):
            best = (ref, t)
    return best


def _unplaced(stage: str, iteration: int | None) -> bool:
    """A line waits for the job timeline: its file has no iteration marker yet, or it is inside
    a checkpoint save whose end another rank may print ("successfully saved" comes from rank 0)."""
    return iteration is None or stage == "checkpointing"


def _tag(stage: str, iteration: int | None, slot: int | None) -> tuple[str, int | None]:
    """The (stage, iteration) part of a group key: unplaced lines carry their time slot."""
    return (_UNPLACED[stage], slot) if _unplaced(stage, iteration) else (stage, iteration)


def _enter(
    timeline: Timeline,
    entered: _Entries,
    stage: str,
    iteration: int | None,
    ts_ref: str | None,
) -> None:
    """Record a transition of a file's stage machine: the how-many-th time the file entered
    this (stage, iteration) — a re-entry after a checkpoint save is a transition of its own."""
    at = (stage, iteration)
    k = entered.get(at, 0)
    entered[at] = k + 1
    timeline.mark((stage, iteration, k), ts_ref)  # kept by the first file that reaches it


def _add(have: Group, later: Group, cap: int) -> None:
    """Merge a later file's group into the same group of the files before it."""
    have.count += later.count
    have.last_pos = later.last_pos
    have.last_ts_ref = later.last_ts_ref
    have.ranks |= later.ranks
    have.seconds_ns += later.seconds_ns
    have.seconds_n += later.seconds_n
    room = cap - len(have.kept)
    if room > 0 and later.kept:
        have.kept.extend(later.kept[:room])


def kept_like_errors(kind: LineKind) -> bool:
    """Whether a kind's lines are kept as errors are (up to ``MAX_KEPT_PER_GROUP`` per group,
    all of them written): an error or warning level, or a kernel, Slurm or syslog line."""
    return kind.level in KEEP_LEVELS or kind.emitter in KEEP_EMITTERS


def kept_cap(kind: LineKind) -> int:
    """How many lines a group of this kind keeps (the condition of ``scan``, as a number)."""
    return MAX_KEPT_PER_GROUP if kept_like_errors(kind) else RARE_SAMPLE


#: A launcher's label a shipper's stamp may precede (``kubectl logs --timestamps`` of a pod whose
#: ranks torchrun prefixes): ``[rank3]: ``, ``[default3]:``, mpirun's ``[1,3]<stderr>:``, or two
#: of them (``--tee``'s copy of a rank's own ``[default1]:[rank25]: ``).
_LABEL_AFTER_STAMP = re.compile(r"(?:\[(?:rank|default)?\d+\]: ?|\[\d+,\d+\]<std(?:out|err)>: ?)+")


def _stamped_indent(raw: str, prefix_end: int) -> bool:
    """Whether a line a shipper stamped (``kubectl logs --timestamps``, a collector's time before
    the line as printed) was indented as printed: past the stamp and its one space (and a
    launcher's label after it), more space (a traceback's frame or source line)."""
    printed = _printed(raw, prefix_end)
    return printed is not None and printed[:1] in (" ", "\t")


def _printed(raw: str, prefix_end: int) -> str | None:
    """A stamped line as its process printed it: past the shipper's stamp, the one space after
    it and a launcher's label (None: nothing follows the stamp)."""
    gap = raw.find(" ", prefix_end)
    if gap < 0:
        return None
    label = _LABEL_AFTER_STAMP.match(raw, gap + 1)
    return raw[label.end() if label is not None else gap + 1 :]


def _stamped_raise(raw: str, before: str, prefix_end: int) -> bool:
    """``_raised_below`` of a stamped line: the exception that ends an indented traceback (the
    copy torchrun's failure summary quotes) under a shipper's stamp."""
    printed = _printed(raw, prefix_end)
    return printed is not None and _raised_below(printed, _printed(before, prefix_end) or "", 0)


def _opens_traceback(kind_body: str, body: str) -> bool:
    """Whether a line of a traceback-opening kind opens one: a header (Python's, Ray's,
    IPython's), or a frame whose header was cut off — indented, or unindented where a paste
    dedented it (``body``: the line's text after its rank prefix)."""
    return (
        kind_body[0] in "Tr"
        or body[:1] in (" ", "\t")
        or _TB_ROW.match(kind_body) is not None
        or TB_FRAME.match(body) is not None
        or _IPY_TB_HEADER.match(kind_body) is not None
    )


#: An exception's line as a traceback ends with it ("KeyError: <class 'type'>"), indented.
_INDENTED_RAISE = re.compile(
    r"([ \t]+)(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b(?::|\s*$)"
)


def _raised_below(body: str, before: str, prefix_end: int) -> bool:
    """Whether ``body``, an indented line inside a traceback, is the exception that ends it: a
    paste that shifted the whole traceback right indents its exception too, but less than the
    frame's source line or carets above it (Python prints them deeper than both)."""
    raised = _INDENTED_RAISE.match(body)
    if raised is None:
        return False
    above = _after_prefix(before, prefix_end)
    return len(raised.group(1)) < len(above) - len(above.lstrip(" \t"))


def _after_prefix(raw: str, prefix_end: int) -> str:
    """A line's text after its rank prefix, less the one space that separates the two
    (``[rank0]: Traceback``, ``[rank0]:   File …``): what is left of the indent is the line's."""
    if prefix_end and raw[prefix_end : prefix_end + 1] == " ":
        return raw[prefix_end + 1 :]
    return raw[prefix_end:]


def _at(block: Block | None, i: int) -> int | None:
    return block.offset(i) if block is not None else None


def _runs(keys: list[str], least: int) -> dict[int, int]:
    """Where each run of at least ``least`` equal consecutive ``keys`` ends, by the index of its
    first key (the change points found at C speed: a Python step per run, not per key)."""
    starts = [0, *compress(counting(1), map(ne, keys, islice(keys, 1, None))), len(keys)]
    return {a: b for a, b in pairwise(starts) if b - a >= least}


#: A run's ranks, iteration numbers and stated durations (whole nanoseconds), one per line.
#: (Numbers None: the iteration does not change: the rule's numbers do not count, or it has
#: none.)
_Columns = tuple[list[int | None], list[int] | None, Iterable[int | None]]


def _marker_columns(
    run: list[str],
    marker: IterationRule,
    shape: str,
    numbered: bool,
    rank: int | None,
    prefixed: bool,
    cache: KindCache,
) -> tuple[_Columns, int | None] | None:
    """The ranks, numbers and durations of a run of iteration markers of one digit shape, read
    from each line at the spans the shape's first line cached, as the scan loop reads one line
    (``numbered``: the rule's numbers count, ``rank``: the file's), and the last line's rank;
    None when a line needs more than its spans (an uncached shape, a rate, a launcher prefix of
    no known rank). No Python step per line: the texts are cut and converted by ``map``, each
    distinct one once (``KindCache.values``)."""
    read = marker.shape_spans.get(shape)
    if read is None or read[4] == "per_s":
        return None
    last = rank
    ranks: list[int | None] | None = None
    spans = RANK_SHAPES.get(shape) if prefixed else None
    if spans is not None and spans[0]:
        how, a, b, _ = spans
        texts = list(map(itemgetter(slice(a, b)), run))
        if texts.count(texts[0]) == len(texts):  # (most runs: the lines of one rank)
            last = int(texts[0]) if how == 1 else PREFIX_RANKS.get(texts[0])
            if last is None:
                return None
        else:
            named: list[int | None] = (
                list(cache.values(texts, "int")) if how == 1 else list(map(PREFIX_RANKS.get, texts))
            )
            if None in named:
                return None
            ranks, last = named, named[-1]
    elif prefixed and spans is None:
        return None
    if ranks is None:
        ranks = [last] * len(run)
    a, b, c, d, unit = read
    numbers = None
    if numbered and a >= 0:
        numbers = cache.values(list(map(itemgetter(slice(a, b)), run)), "int")
    durations: Iterable[int | None] = repeat(None)
    if c >= 0:
        durations = cache.values(list(map(itemgetter(slice(c, d)), run)), unit)
    return (ranks, numbers, durations), last


def _add_markers(
    rollup: NodeRollup,
    kind: LineKind,
    run: list[str],
    columns: _Columns,
    after: int,
    iteration: int,
    ts_ref: str | None,
    stamped: bool,
    streams: dict[int | None, str],
    entered: _Entries,
    keeping: bool,
    where: tuple[str, set[int] | None, Block | None, int],
) -> int:
    """Add a run of training iteration markers of one kind (lines ``after + 1`` on of their file)
    to their iterations' groups, as ``NodeRollup.scan`` adds each (stage "training" throughout,
    no traceback or record open, the line before them of the run); returns the iteration after
    them. ``ts_ref``: the time reference before the run (each line's own if ``stamped``);
    ``keeping``: the kind's groups keep sample lines; ``where``: the file's path, its truncated
    lines, the block and its first line's position (``scan``'s ``first``).

    A line's iteration is its number (the iteration before the run when it has none), so its
    group's key is known before the loop; the run's transitions are recorded first
    (``_enter_run``): they touch no group."""
    path, long_lines, block, first = where
    groups = rollup.groups
    get = groups.get
    ranks, numbers, durations = columns
    refs = run if stamped else repeat(ts_ref)
    keys: Iterable[GroupKey] = repeat((kind, "training", iteration))
    if numbers is not None:
        _enter_run(rollup, numbers, iteration, run, ranks, (ts_ref, stamped, streams), entered)
        keys = zip(repeat(kind), repeat("training"), numbers)
        iteration = numbers[-1]
    for pos, raw, ref, line_rank, ns, key in zip(
        counting(after + 1), run, refs, ranks, durations, keys
    ):
        group = get(key)
        if group is None:
            group = groups[key] = Group(1, pos, pos, ref, ref, raw, path)
        else:
            group.count += 1
            group.last_pos = pos
            group.last_ts_ref = ref
        if line_rank is not None:
            group.ranks.add(line_rank)
        if ns is not None:
            group.seconds_ns += ns
            group.seconds_n += 1
        if keeping and len(group.kept) < RARE_SAMPLE:
            flags = ("truncated",) if long_lines and pos in long_lines else ()
            at_byte = block.offset(pos - first) if block is not None else None
            group.kept.append(KeptLine(path, pos, raw, ref, line_rank, flags, at_byte))
    if stamped:
        # the last stamped line of each stream: a timeless line of another stream marks by it
        streams.update(zip(ranks, run, strict=True))
    return iteration


def _enter_run(
    rollup: NodeRollup,
    numbers: list[int],
    iteration: int,
    run: list[str],
    ranks: list[int | None],
    refs: tuple[str | None, bool, dict[int | None, str]],
    entered: _Entries,
) -> None:
    """The timeline transitions of a run of markers: each line whose number is not the
    iteration before it enters ("training", number), as ``scan`` records it (``_enter``), with
    the reference ``scan`` keeps in ``mark_ref``: the line itself when stamped, else the last
    stamp of its stream (``streams``), else the file's (``ts_ref``; what ``mark_ref`` equals
    after a timeless line). ``refs``: (ts_ref, stamped, streams).

    The usual run (iterations the file has not entered, rising) is entered at once
    (``_Entries.first_entries``), and its marks looked at only when the node's earlier files
    did not make them all (``Timeline.trained``)."""
    ts_ref, stamped, streams = refs
    timeline = rollup.timeline
    marked = timeline.marks
    if entered.first_entries(numbers):
        if timeline.trained.issuperset(numbers):
            return
        keys = list(zip(repeat("training"), numbers, repeat(0)))
        todo = compress(counting(), map(not_, map(marked.__contains__, keys)))
        for i in todo:
            timeline.mark(keys[i], run[i] if stamped else streams.get(ranks[i], ts_ref))
        return
    for i in compress(counting(), map(ne, numbers, chain((iteration,), numbers))):
        at = ("training", numbers[i])
        again = entered.get(at, 0)
        entered[at] = again + 1
        mark_key = ("training", numbers[i], again)
        if mark_key not in marked:
            timeline.mark(mark_key, run[i] if stamped else streams.get(ranks[i], ts_ref))


class _Entries:
    """How many times a file entered each (stage, iteration) (``_enter``): a dict, except that
    runs of training iterations entered for the first time, rising (``first_entries``), are
    kept as their lists of numbers until a lookup may need them (an iteration not above
    them all: a re-entry), which is rare; most runs are never looked up again."""

    __slots__ = ("counts", "pending", "top")

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int | None], int] = {}
        self.pending: list[list[int]] = []
        self.top: int | None = None  # the highest training iteration entered

    def get(self, at: tuple[str, int | None], default: int) -> int:
        self._flush_for(at)
        return self.counts.get(at, default)

    def __setitem__(self, at: tuple[str, int | None], count: int) -> None:
        self._flush_for(at)
        self.counts[at] = count
        it = at[1]
        if at[0] == "training" and it is not None and (self.top is None or it > self.top):
            self.top = it

    def first_entries(self, numbers: list[int]) -> bool:
        """Enter each of ``numbers`` once, when they rise and the file entered none of them
        (all above ``top``); else False, nothing entered."""
        top = self.top
        if top is not None and numbers[0] <= top:
            return False
        if not all(map(lt, numbers, islice(numbers, 1, None))):
            return False
        self.pending.append(numbers)
        self.top = numbers[-1]
        return True

    def _flush_for(self, at: tuple[str, int | None]) -> None:
        it, top = at[1], self.top
        # (pending runs: a top above them all)
        if (
            self.pending
            and at[0] == "training"
            and it is not None
            and top is not None
            and it <= top
        ):
            for numbers in self.pending:
                self.counts.update(zip(zip(repeat("training"), numbers), repeat(1)))
            self.pending.clear()
