"""One file, several nodes: which host each line of an interleaved stream came from.

A launcher or collector often writes the lines of many nodes into one file, and says on each line
whose it is: pdsh / clush (DeepSpeed's multi-node runner) ``worker-3: …``, a ``host: N out:``
label (host and rank), ``kubectl logs --prefix`` ``[pod/trainer-worker-3/pytorch] …``, Ray's
``(RayTrainWorker pid=42, ip=10.0.0.5) …``. An mpirun or ``srun -l`` stdout names only the rank
(``[1,N]<stdout>:``, ``N: ``), but every rank announces its host at start-up in NCCL's
``host:pid:tid [dev] NCCL INFO`` prefix, so rank → host comes from the same file.

:func:`plan` reads the start of a file and says whether it is such a stream (at least two hosts,
most lines labelled); :meth:`HostRouter.route` then gives each line its host — an unlabelled
line (a traceback's frame, a continuation) belongs to the host of the line before it. Pure: lines
in, hosts out; the job directory's discovery (:mod:`l4_plugin.ingest.jobdir`) turns one such file
into one stream per host.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat

from l4_plugin.ingest.header import (
    digit_shape,
    outer_labels,
    parse_header,
    rank_prefix,
    rank_prefix_cached,
)
from l4_plugin.ingest.identity import subject
from l4_plugin.ingest.logfile import Route
from l4_plugin.ingest.reader import Block
from l4_plugin.records import JOB_NODE

# A host name as launchers print it: with a digit, a dot or a hyphen (never a level word such as
# "INFO:" or a sentence's first word), or an IPv4 address.
# A counter a training loop prints as a label ("rank3:", "step12:", "epoch2:") is not one ("gpu017"
# may be a host).
_COUNTER = r"(?!(?i:(?:local_?)?rank|step|epoch|iter(?:ation)?|batch|layer)[-_]?\d)"
_HOSTNAME = (
    _COUNTER + r"(?:[A-Za-z][\w-]*\d[\w.-]*|[A-Za-z][\w-]*-[\w.-]+|[A-Za-z][\w-]*(?:\.[\w-]+)+)"
)
# pdsh / clush "host: message"; the "host: N out: message" label carries the rank too.
_HOST_LABEL = re.compile(
    r"(" + _HOSTNAME + r"|\d{1,3}(?:\.\d{1,3}){3}): (?:(\d{1,6}) (?:out|err): )?"
)
# NCCL's own prefix: "host:pid:tid [dev] NCCL INFO …"
_NCCL_HOST = re.compile(r"([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL ")
_SAMPLE = 5000
_LOOK = 64  # lines after which a file none of whose lines is labelled is one node's
_LABELLED_SHARE = 0.8
# Ray's log monitor labels every line it forwards, so its labels decide with fewer of them: the
# driver prints its own tables, bars and errors between the workers' lines.
_RAY_SHARE = 0.3
_MIN_LINES_PER_HOST = 2
_UNLABELLED: dict[bytes, bool] = {}  # by digit shape: the line names no host
_MAX_SHAPES = 65_536


def line_label(line: str) -> tuple[str | None, int | None, int]:
    """(host, rank, end) of the label that says which node printed ``line``; host None when the
    line names none (``end`` is where the rest of the line starts)."""
    _, host, end = outer_labels(line)
    if host is not None:
        return host, None, end
    m = _HOST_LABEL.match(line)
    if m is not None:
        return m.group(1), int(m.group(2)) if m.group(2) else None, m.end()
    return None, None, 0


@dataclass
class HostRouter:
    """Gives every line of an interleaved stream its host (see the module docstring).

    ``carry``: an unlabelled line belongs to the host of the line before (a pdsh or mpirun
    stream); without it (Ray's log monitor labels every line it forwards, so an unlabelled line
    is the driver's own) it belongs to the job (``JOB_NODE``)."""

    hosts: tuple[str, ...]
    rank_host: dict[int, str] = field(default_factory=dict)
    by_rank: bool = False
    last: str | None = None
    carry: bool = True

    def route(self, line: str) -> tuple[str | None, str]:
        """(host, text) of ``line``: the host it belongs to (that of the line before when it
        names none; None before the first labelled line) and the line less its host label, as
        the node's own log would have printed it."""
        if self.by_rank:
            rank, _ = rank_prefix(line)
            if rank is not None:
                self.last = self.rank_host.get(rank, self.last)
            return self.last, line
        host, _, end = line_label(line)
        if host is not None:
            self.last = host
            return host, line[end:]
        if not self.carry and line.strip():
            return JOB_NODE, line
        return self.last, line


def plan(
    lines: Iterable[str], sample: int = _SAMPLE, own_rank: int | None = None
) -> HostRouter | None:
    """A router when the first ``sample`` lines are an interleaved stream of two or more hosts
    (most lines labelled by host, or ranks whose NCCL prefix names their host); else None.

    ``own_rank``: the rank the file's name gives it. A file so named whose first ``_LOOK``
    lines all carry that one rank's launcher prefix is that rank's own log (torchrun's
    ``--log-dir`` files, a per-rank redirect of a prefixed stream), decided there instead of
    reading the sample through: a stream of several ranks is not named for one of them."""
    tally = _Tally()
    head = itertools.islice(lines, sample)
    for read, line in enumerate(head, 1):
        tally.add(line)
        if tally.labelled or tally.ranked:
            if _tally_rest(tally, head, sample - read, own_rank):
                return None
            break
        if tally.seen == _LOOK:
            return None  # the usual file of one node: decided after a few lines, whatever its size
    return tally.router()


class _Tally:
    """What :func:`plan` counts over the lines it reads."""

    __slots__ = ("by_ray", "hosts", "labelled", "rank_host", "ranked", "ranks", "seen")

    def __init__(self) -> None:
        self.seen = 0  # lines that are not blank
        self.labelled = 0  # lines that name their host
        self.by_ray = 0  # of them, by Ray's "(Worker pid=…, ip=…)" label
        self.ranked = 0  # lines that name no host but a rank
        self.hosts: Counter[str] = Counter()
        self.rank_host: dict[int, str] = {}  # each rank's host, from its first NCCL prefix
        self.ranks: set[int] = set()  # the ranks the ranked lines name

    def add(self, line: str) -> None:
        """Count one line of the sample."""
        if not line.strip():
            return
        self.seen += 1
        # Most lines name no host: known from the line's digit shape after its first line
        # (``line_label``'s regexes treat all digits alike), a dict lookup instead of regexes.
        if line[:1] == "[" and not line.startswith("[pod/"):
            unlabelled: bool | None = True  # a launcher's "[rank3]:": no host label starts so
            shape = b""
        else:
            shape = digit_shape(line)
            unlabelled = _UNLABELLED.get(shape)
        host = None if unlabelled else line_label(line)[0]
        if unlabelled is None:
            if len(_UNLABELLED) >= _MAX_SHAPES:
                _UNLABELLED.clear()
            _UNLABELLED[shape] = host is None
        if host is not None:
            self.labelled += 1
            self.hosts[host] += 1
            self.by_ray += line[:1] == "("
            return
        rank, after = rank_prefix_cached(line, shape or None)
        if rank is not None:
            self.ranked += 1
            self.ranks.add(rank)
            if rank not in self.rank_host:  # else the ``setdefault`` of its host changes nothing
                m = _NCCL_HOST.match(line, after)
                if m is not None:
                    self.rank_host[rank] = m.group(1)

    def router(self) -> HostRouter | None:
        """The decision over the lines counted."""
        if self.seen == 0:
            return None
        real = tuple(sorted(h for h, n in self.hosts.items() if n >= _MIN_LINES_PER_HOST))
        ray = self.by_ray >= _LABELLED_SHARE * self.labelled
        if len(real) >= 2 and self.labelled >= _LABELLED_SHARE * self.seen:
            # Ray's driver output: every forwarded line labelled, the rest the driver's own.
            return HostRouter(real, carry=not ray)
        if len(real) >= 2 and ray and self.labelled >= _RAY_SHARE * self.seen:
            return HostRouter(real, carry=False)
        by_rank = tuple(sorted(set(self.rank_host.values())))
        if len(by_rank) >= 2 and self.ranked >= _LABELLED_SHARE * self.seen:
            return HostRouter(by_rank, self.rank_host, by_rank=True)
        return None


_CHUNK = 512  # lines :func:`plan` counts at a time once some line is labelled or ranked ...
_FIRST_CHUNK = 32  # ... after chunks of 32, 64, 128 and 256 (the early stop is checked after each)


def _tally_rest(tally: _Tally, head: Iterator[str], left: int, own_rank: int | None) -> bool:
    """Count the rest of the sample (at most ``left`` lines), a chunk at a time, and stop early
    once no share can reach its threshold (``_RAY_SHARE`` of labelled lines, ``_LABELLED_SHARE``
    of ranked ones) even if every line left counted for it:
    the decision is then None whatever those lines say (and None on the lines counted). True
    when it stopped once ``_LOOK`` lines were all ``own_rank``'s (see ``plan``): no stream."""
    size = _FIRST_CHUNK  # small first: most files of one node stop after a few dozen lines
    while left > 0:
        chunk = list(itertools.islice(head, min(left, size)))
        if not chunk:
            return False
        size = min(2 * size, _CHUNK)
        left -= len(chunk)
        _tally_chunk(tally, chunk)
        if _own_log(tally, own_rank):
            return True
        total = tally.seen + left
        if tally.labelled + left < _RAY_SHARE * total and (
            tally.ranked + left < _LABELLED_SHARE * total
        ):
            return False
    return False


def _own_log(tally: _Tally, own_rank: int | None) -> bool:
    return (
        own_rank is not None
        and tally.seen >= _LOOK
        and tally.ranked == tally.seen
        and not tally.labelled
        and tally.ranks == {own_rank}
    )


def _tally_chunk(tally: _Tally, chunk: list[str]) -> None:
    """``tally.add`` of each line of ``chunk``.

    When most lines start with the launcher prefix of the first one, alone ("[rankN]:" or
    "[defaultN]:", ``_fast_prefix``): ``add`` would find each such line unlabelled (it starts
    with "[") and of rank N where the prefix ends, so their runs are counted at once and only
    the first NCCL prefix of rank N is read; the other lines, found at C speed, are added one
    by one in their place."""
    prefix = _fast_prefix(chunk[0])
    if prefix is None:
        for line in chunk:
            tally.add(line)
        return
    text = prefix[0]
    starts = list(map(str.startswith, chunk, repeat(text)))
    if starts.count(False) > len(chunk) // 16:  # interleaved ranks: line by line
        for line in chunk:
            tally.add(line)
        return
    nested = map(str.startswith, chunk, repeat(text + "["))
    others = sorted(
        itertools.chain(
            itertools.compress(itertools.count(), map(operator.not_, starts)),
            itertools.compress(itertools.count(), nested),
        )
    )
    done = 0
    for i in others:
        _tally_run(tally, chunk[done:i], prefix)
        tally.add(chunk[i])
        done = i + 1
    _tally_run(tally, chunk[done:], prefix)


def _tally_run(tally: _Tally, lines: list[str], prefix: tuple[str, int]) -> None:
    """Count ``lines``, each starting with the launcher prefix ``prefix`` alone: unlabelled, of
    its rank; the rank's host from the first NCCL prefix after it, as ``_Tally.add`` reads it."""
    text, rank = prefix
    tally.seen += len(lines)
    tally.ranked += len(lines)
    if lines:
        tally.ranks.add(rank)
    if rank in tally.rank_host:
        return
    for line in lines:
        if "] NCCL " in line:  # every match of _NCCL_HOST holds it
            m = _NCCL_HOST.match(line, len(text))
            if m is not None:
                tally.rank_host[rank] = m.group(1)
                return


def _fast_prefix(line: str) -> tuple[str, int] | None:
    """(prefix, N) when ``line`` starts with "[rankN]:" or "[defaultN]:" alone (not followed
    by another "["): the prefixes ``rank_prefix_cached`` reads without its regexes, with the
    same tests, so that every line starting with that prefix text has rank N there."""
    if line.startswith("[rank"):
        start, most = 5, 12
    elif line.startswith("[default"):
        start, most = 8, 15
    else:
        return None
    end = line.find("]:", start)
    if start < end < most and line[start:end].isdecimal() and line[end + 2 : end + 3] != "[":
        return line[: end + 2], int(line[start:end])
    return None


def host_blocks(
    blocks: Iterable[Block], router: HostRouter, host: str, names: dict[str, str] | None = None
) -> Iterator[Block]:
    """The blocks of an interleaved stream less every line of another host, each kept line less
    its host label; the byte offsets stay those of the file (line numbers become the host's).
    ``names``: a label -> the host it is (an address a Ray label gives).

    Ray's driver log (a router that does not ``carry``) forwards what each worker printed as it
    arrives, most of it without a time of its own: such a line was printed when the file says,
    not at the worker's last stamp, which may be an hour older (a worker's "SIGTERM received"
    as the job ends). A block then starts where another host's stamped line came between two of
    this host's lines, and carries that line (``Block.ref``)."""
    timed = not router.carry
    pending: str | None = None  # another host's latest stamped line since this host's last
    for block in blocks:
        lines: list[str] = []
        offsets: list[int | None] = []
        ref: str | None = None
        for i, line in enumerate(block.lines):
            owner, text = router.route(line)
            if names and owner is not None:
                owner = names.get(owner, owner)
            if owner == host:
                if pending is not None:
                    if lines:
                        yield Block(lines, offsets=offsets, ref=ref)
                        lines, offsets = [], []
                    ref, pending = pending, None
                lines.append(text)
                offsets.append(block.offset(i))
            elif timed and _stamped(text):
                pending = text
        if lines:
            yield Block(lines, offsets=offsets, ref=ref)


_STAMPED: dict[bytes, bool] = {}  # by digit shape: the line has a time of its own


def _stamped(text: str) -> bool:
    """Whether ``text`` has a time of its own (by the header parser, once per digit shape)."""
    shape = digit_shape(text)
    found = _STAMPED.get(shape)
    if found is None:
        found = parse_header(text).timestamp is not None
        if len(_STAMPED) < _MAX_SHAPES:
            _STAMPED[shape] = found
    return found


def subject_blocks(blocks: Iterable[Block], names: dict[str, str], host: str) -> Iterator[Block]:
    """The lines of a job's own file that report about ``host`` (or, for ``JOB_NODE``, those
    that report about none of the job's hosts), as they are."""
    for block in blocks:
        lines: list[str] = []
        offsets: list[int | None] = []
        for i, line in enumerate(block.lines):
            if (subject(line, names) or JOB_NODE) == host:
                lines.append(line)
                offsets.append(block.offset(i))
        if lines:
            yield Block(lines, offsets=offsets)


def for_host(blocks: Iterable[Block], host: str, route: Route | None = None) -> Iterator[Block]:
    """The lines of ``host`` in a shared file: by ``route`` (see ``Route``); by label, with the
    router planned on the stream's own first lines."""
    names = dict(route.names) if route is not None else {}
    if route is not None and route.by == "subject":
        yield from subject_blocks(blocks, names, host)
        return
    head: list[Block] = []
    seen = 0
    it = iter(blocks)
    for block in it:
        head.append(block)
        seen += len(block.lines)
        if seen >= _SAMPLE:
            break
    router = plan(line for b in head for line in b.lines) or HostRouter((host,))
    yield from host_blocks(itertools.chain(head, it), router, host, names)
