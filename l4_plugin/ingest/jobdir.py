"""A job directory: which files are logs, which node and rank each belongs to, and ``job.yaml``.

Layouts (ARCHITECTURE.md, *Job directories*): ``JOB/<node>/<any>.log[.gz]`` (node = first
directory level) and
``JOB/<node>[-_.]rank<k>.log[.gz]``; ``--node-pattern REGEX`` (named groups ``node`` and optionally
``rank``, matched against the path relative to the job directory) covers the others. Kernel and
system logs (``dmesg``, ``kern``, ``syslog``, ``messages``) belong to their node but to no rank.
"""

from __future__ import annotations

import contextlib
import datetime
import gzip
import hashlib
import itertools
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from l4_plugin.errors import IngestError
from l4_plugin.ingest import attempts, dumps, identity, procs
from l4_plugin.ingest.hostlist import HostlistError
from l4_plugin.ingest.hostlist import expand as expand_hostlist
from l4_plugin.ingest.hosts import HostRouter, plan
from l4_plugin.ingest.identity import FileFacts
from l4_plugin.ingest.logfile import LogFile, Route
from l4_plugin.ingest.reader import read_blocks
from l4_plugin.jobid import check_job_id
from l4_plugin.limits import ReadLimits, human_size
from l4_plugin.records import JOB_NODE
from l4_plugin.yamldoc import read_document

#: Where a file's node came from: ``--node-pattern``, the folder a collector named after the
#: node, or the file's own name (a file at the top, or in a folder of many nodes' files).
Origin = Literal["pattern", "folder", "name"]
# Folders that hold many nodes' files: system logs, and a collector's generic folders.
_COLLECTION = re.compile(
    r"(?i)dmesg|kern|kernel|syslogs?|messages|journal|logs?|outputs?|stdout|nodes|hosts|pods"
)
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
#: Lines read for a file's facts (``identity.facts``): many for a file named by its own name
#: (who wrote it may be said only in its lines), a few for one in a node's folder (the
#: addresses its ranks announce at start-up).
NAME_FACT_LINES = identity.FACT_LINES
FOLDER_FACT_LINES = 200
#: The most bytes of a job's own file read at discovery for the hosts it reports about.
JOB_FILE_SCAN = 64 << 20
LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".jsonl", ".ndjson")
_RANK = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_FLAT = re.compile(r"^(?P<node>.+?)[-_.]rank[-_]?(?P<rank>\d+)$", re.IGNORECASE)
_SYSTEM = re.compile(r"(?:^|[-_.])(dmesg|kern|kernel|syslog|messages)$", re.IGNORECASE)
STATUSES = ("succeeded", "failed", "running", "unknown")

# Configuration keys that describe one run rather than the setup: a 4-node rehearsal and the
# 256-node run of the same model, framework, image and parallelism must share a fingerprint.
RUN_SPECIFIC_KEYS = frozenset(
    {
        "nodes",
        "node_count",
        "num_nodes",
        "nnodes",
        "world_size",
        "data_parallel",
        "dp",
        "data_parallel_size",
        "hosts",
        "hostfile",
        "nodelist",
        "master_addr",
        "master_port",
        "run_id",
        "job_id",
        "job_name",
        "name",
        "start_time",
        "end_time",
        "date",
        "seed",
        "output_dir",
        "save",
        "load",
        "log_dir",
        "wandb_run",
        "train_iters",
        "iterations",
        # How long it ran: the same setup prints the same lines, for fewer or more steps.
        "steps",
        "max_steps",
        "total_steps",
        "num_steps",
        "train_steps",
        # A scheduler's or launcher's policy and accounting (Slurm's time limit, partition and
        # account; torchrun's --max-restarts; Ray's max_failures; a Kubernetes Job's backoff
        # limit and deadline): where and how long a job may run, not what its ranks print.
        "time_limit",
        "time_limit_s",
        "timelimit",
        "walltime",
        "wall_time",
        "active_deadline_seconds",
        "max_restarts",
        "restarts",
        "max_retries",
        "retries",
        "max_failures",
        "backoff_limit",
        "restart_policy",
        "requeue",
        "partition",
        "account",
        "qos",
        "queue",
        "priority",
        "reservation",
        "user",
    }
)


@dataclass(frozen=True, slots=True)
class JobMeta:
    """``job.yaml`` merged with command-line values."""

    id: str
    status: str
    config: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    #: The job's hosts as its scheduler listed them (``nodelist:``, Slurm hostlist syntax).
    hosts: tuple[str, ...] = ()
    #: When the job started (``started:``), seconds since the epoch (UTC when no zone is given).
    started: float | None = None
    #: One line per ``job.yaml`` key that was ignored or value that could not be used.
    warnings: tuple[str, ...] = ()


#: torchelastic's error file: ``TORCHELASTIC_ERROR_FILE``, which torchrun points at
#: ``<log_dir>/attempt_<k>/<local_rank>/error.json`` (read as ``jsonlines.error_file``).
ERROR_FILE = "error.json"


def _strip_suffixes(name: str) -> str | None:
    if name == ERROR_FILE:
        return "error"
    if name.endswith(".gz"):
        name = name[:-3]
    for suffix in LOG_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def is_system_log(path: str) -> bool:
    """True for a node's system log (``kern.log``, ``dmesg``, ``syslog``…), by its file name."""
    name = path.rsplit("/", 1)[-1]
    stem = _strip_suffixes(name)
    return bool(_SYSTEM.search(stem if stem is not None else name))


#: Bytes sampled from the start of each file to tell text from binary.
SAMPLE_BYTES = 8192
#: Share of sampled bytes that are NUL, other control bytes or not UTF-8 above which a file is
#: binary. Text logs have ~0; Latin-1 text a few percent; random or compressed data ~50%.
BINARY_SHARE = 0.10
# Control bytes a text log does not hold (tab, newline, CR, FF, VT, backspace and ESC it may).
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\v\b\x1b") + b"\x7f"
# Deflate's greatest compression ratio (a long run of one byte): no .gz decompresses to more.
_DEFLATE_RATIO = 1032
# A run of NULs is a crash's hole in a file (delayed allocation), not binary content.
_NUL_RUN = re.compile(rb"\x00{16,}")


@dataclass(frozen=True, slots=True)
class JobFiles:
    """What ``scan`` found: the log files to read, a one-line warning per file skipped, and the
    files that may be dumps (Flight Recorder traces, ``py-spy dump`` stacks: ``ingest.dumps``)."""

    files: list[LogFile]
    skipped: list[str]
    dumps: list[Path] = field(default_factory=list)


#: ``_probe``'s answer for a file that is a ``py-spy dump`` (a stack, not a log).
STACK_DUMP = "a py-spy stack dump"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _head(path: Path, size: int) -> tuple[bytes, int] | None:
    """The first ``SAMPLE_BYTES`` of the file of ``size`` bytes on disk (decompressed) and its
    size decompressed (a ``.gz``'s trailer says it, modulo 4 GiB, between ``size`` and deflate's
    utmost ratio of it: a truncated file's last bytes are no trailer). None when it cannot be
    read: the reader then reports it with its lines."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic != b"\x1f\x8b":
                return fh.read(SAMPLE_BYTES), size
            with gzip.GzipFile(fileobj=fh) as gz:
                sample = gz.read(SAMPLE_BYTES)
            if len(sample) < SAMPLE_BYTES:
                return sample, len(sample)  # the whole file
            fh.seek(max(0, size - 4))
            trailer = int.from_bytes(fh.read(4), "little")
            return sample, min(max(size, trailer), _DEFLATE_RATIO * size)
    except (OSError, EOFError, zlib.error):
        return None


def binary_share(sample: bytes) -> float:
    """The share of a file's first bytes (``_head``) that is not text: NUL and other control
    bytes, and bytes that are not UTF-8; runs of NUL (holes) do not count."""
    if b"\x00" * 16 in sample:  # a substring test at C speed: the regex costs ~85 µs a file
        sample = _NUL_RUN.sub(b"", sample)
    if not sample:
        return 0.0
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    undecodable = sample.decode("utf-8", errors="replace").count("\ufffd")
    return (controls + undecodable) / len(sample)


def estimate_lines(sample: bytes, size: int) -> int:
    """The lines of a file of ``size`` bytes (decompressed) whose first bytes are ``sample``:
    exact for a file that fits in the sample, else at the sample's bytes per line (within 3%
    of the count on half the dev cases' files, 6% on nine in ten)."""
    lines = sample.count(b"\n")
    if not sample or len(sample) >= size:
        return lines + (bool(sample) and not sample.endswith(b"\n"))
    if not lines:
        return max(1, size // len(sample))
    return round(size * lines / (sample.rfind(b"\n") + 1))  # whole lines' bytes


def _check_file(path: Path, root: Path, limits: ReadLimits) -> tuple[Path, int, int | None] | str:
    """The path to read, its size and its lines (``estimate_lines``; None when its start
    cannot be read), or why the file is skipped.

    Only regular files inside the job directory are read: a link may point to another file of
    the job, never out of it (``/etc/shadow``) nor to a device, FIFO or socket (``/dev/zero``
    never ends).
    """
    try:
        st = os.lstat(path)
        target = path
        if stat.S_ISLNK(st.st_mode):
            target = path.resolve(strict=True)
            if not target.is_relative_to(root):
                return f"a link to {target}, outside the job directory"
            st = os.stat(target)
    except (OSError, RuntimeError) as exc:
        return f"cannot open log file: {getattr(exc, 'strerror', None) or exc}"
    if not stat.S_ISREG(st.st_mode):
        return f"{_kind(st.st_mode)}, not a regular file"
    if st.st_size > limits.max_file_size:
        return (
            f"{human_size(st.st_size)}, over the per-file limit of "
            f"{human_size(limits.max_file_size)} — hint: raise --max-file-size"
        )
    head = _head(target, st.st_size)
    if head is None:
        return target, st.st_size, None
    share = binary_share(head[0])
    if share >= BINARY_SHARE:
        return (
            f"binary content ({share:.0%} of the first {human_size(SAMPLE_BYTES)} is NUL, "
            "control bytes or not UTF-8)"
        )
    sample, size = head
    # What is read of a file stops at the per-file limit (``sources.bounded_blocks``), and a
    # compressed one at its decompression guard (``reader.GuardedGzip``).
    read = min(size, limits.max_file_size)
    if size > st.st_size:
        read = min(read, limits.max_inflated_size, int(limits.max_inflate_ratio * st.st_size))
    return target, st.st_size, estimate_lines(sample, read)


def discover(
    job_dir: Path, node_pattern: str | None = None, limits: ReadLimits | None = None
) -> list[LogFile]:
    """Every log file of the job, sorted by node, rank and path; raises when there is none."""
    return scan(job_dir, node_pattern, limits).files


def scan(
    job_dir: Path,
    node_pattern: str | None = None,
    limits: ReadLimits | None = None,
    workers: int | None = None,
    hosts: tuple[str, ...] = (),
) -> JobFiles:
    """The job's log files (see ``discover``) and the files skipped, one warning line each.

    ``workers`` bounds the processes that probe the files (None: the machine's cores);
    ``hosts`` are the job's hosts as its scheduler listed them (``JobMeta.hosts``).

    A file is skipped when it is not a regular file inside the job directory, is over
    ``limits.max_file_size`` or looks binary; a job whose files together exceed
    ``limits.max_job_size`` is an ``IngestError``. Which node a file is, or whether it is the
    job's own, is decided knowing every file (:mod:`l4_plugin.ingest.identity`, ``_assign``).
    """
    limits = limits or ReadLimits()
    if not job_dir.is_dir():
        raise IngestError(f"job directory not found — {job_dir}")
    root = job_dir.resolve()
    pattern = _node_regex(node_pattern)
    skipped: list[str] = []
    total = 0
    found: list[_Found] = []
    others: list[Path] = []  # files that may be dumps
    for path in sorted(job_dir.rglob("*")):
        stem = _strip_suffixes(path.name)
        if stem is None and dumps.is_candidate(path) and not path.is_dir():
            others.append(path)
        if stem is None or (path.is_dir() and not path.is_symlink()):
            continue
        relative = path.relative_to(job_dir).as_posix()
        named = _name_file(relative, stem, pattern)
        if named is not None:
            found.append(_Found(path, relative, *named))
    depths = [NAME_FACT_LINES if f.origin == "name" else FOLDER_FACT_LINES for f in found]
    probes = probe_files(
        [(f.path, f.system, d) for f, d in zip(found, depths, strict=True)], root, limits, workers
    )
    kept: list[tuple[_Found, LogFile, HostRouter | None, FileFacts]] = []
    for f, (checked, router, facts) in zip(found, probes, strict=True):
        if checked == STACK_DUMP:
            others.append(f.path)
            continue
        if isinstance(checked, str):
            skipped.append(f"skipped {f.relative}: {checked}")
            continue
        target, size, lines = checked
        total += size
        kind: Literal["rank", "system", "agent", "job"] = "system" if f.system else "rank"
        file = LogFile(target, f.relative, f.node, f.rank, kind, None, lines)
        kept.append((f, file, router, facts))
    if total > limits.max_job_size:
        raise IngestError(
            f"job too large — {job_dir} — {human_size(total)} of logs, over the per-job limit of "
            f"{human_size(limits.max_job_size)} — hint: raise --max-job-size"
        )
    files = attempts.assign(_assign(kept, hosts, limits), limits)
    if not files:
        raise IngestError(
            f"no log files in {job_dir} — expected JOB/<node>/*.log[.gz] or "
            "JOB/<node>-rank<k>.log[.gz] (or give --node-pattern)"
            + (f"; {len(skipped)} skipped, first: {skipped[0]}" if skipped else "")
        )
    files.sort(
        key=lambda f: (
            f.node,
            -1 if f.attempt is None else f.attempt,
            f.kind != "rank",
            f.rank if f.rank is not None else -1,
            f.relative,
        )
    )
    return JobFiles(files, skipped, others)


@dataclass(frozen=True, slots=True)
class _Found:
    """A file of the job as its path names it (``_name_file``)."""

    path: Path
    relative: str
    node: str
    rank: int | None
    system: bool
    origin: Origin


def _assign(
    kept: list[tuple[_Found, LogFile, HostRouter | None, FileFacts]],
    listed: tuple[str, ...],
    limits: ReadLimits,
) -> list[LogFile]:
    """Each file as the streams of the nodes it holds (see the module docstring of
    :mod:`l4_plugin.ingest.identity`): a node's folder names it; a file named by itself is the
    host its lines name, else its name; a file of several hosts' labelled lines is one stream
    per host (an address label mapped to the host that announced it); a file that reports
    about the job's hosts and is none of them is the job's, each of its lines about one host
    that host's."""
    known = set(listed)
    for f, _, router, facts in kept:
        if f.origin != "name":
            known.add(f.node)
        if facts.own is not None:
            known.add(facts.own)
            if identity.short_name(f.node) == identity.short_name(facts.own):
                known.add(f.node)
        if router is not None:
            known.update(h for h in router.hosts if not _IPV4.fullmatch(h))
    announced = {
        ip: host or (facts.own if f.origin == "name" and facts.own else f.node)
        for f, _, _, facts in kept
        for ip, host in facts.addresses
    }
    addresses = identity.address_host(announced, known)
    out: list[LogFile] = []
    for f, file, router, facts in kept:
        node = f.node
        if f.origin == "name" and facts.own is not None:
            # The host its lines name, unless its name is that host's (a domain name of it).
            same = identity.short_name(node) == identity.short_name(facts.own)
            node = node if same else facts.own
        file = replace(file, node=node)
        if facts.agent and file.kind == "rank":
            file = replace(file, kind="agent", rank=None)
        if router is not None:
            out.extend(_by_host(file, router, addresses))
        elif f.origin == "name" and facts.own is None and node not in known and known:
            out.extend(_job_streams(file, {h: h for h in known} | addresses, limits))
        else:
            out.append(file)
    return out


def _by_host(file: LogFile, router: HostRouter, addresses: dict[str, str]) -> list[LogFile]:
    """One stream per host of a file of several hosts' labelled lines (and the job's, for
    what a Ray driver prints itself); a label that is an address is the host that announced
    it."""
    hosts = sorted({addresses.get(h, h) for h in router.hosts})
    route = Route("label", tuple(sorted(addresses.items()))) if addresses else None
    if not router.carry:
        # Ray forwards a worker's lines whenever it prints: a host the plan's sample did not
        # see may still have lines later (its failure): every host with an address has a
        # stream, and the driver's own lines are the job's.
        hosts = [*sorted(set(hosts) | set(addresses.values())), JOB_NODE]
        route = Route("label", tuple(sorted(addresses.items())))
    # Each host's stream reads the whole file: its share of the lines, weighed as such.
    lines = None if file.lines is None else file.lines // len(hosts)
    return [
        LogFile(file.path, file.relative, host, None, file.kind, host, lines, route)
        for host in hosts
    ]


def _job_streams(file: LogFile, names: dict[str, str], limits: ReadLimits) -> list[LogFile]:
    """The streams of a file that may be the job's own: none when it reports about none of
    the job's hosts (it is then the node its name says); else one for each host it reports
    about and one for the job (``JOB_NODE``) with the rest."""
    about = _subjects(file.path, names, limits)
    if about is None:
        return [file]
    route = Route("subject", tuple(sorted(names.items())))
    lines = None if file.lines is None else file.lines // (len(about) + 1)
    return [
        LogFile(file.path, file.relative, host, None, "job", host, lines, route)
        for host in [*sorted(about), JOB_NODE]
    ]


def _subjects(path: Path, names: dict[str, str], limits: ReadLimits) -> set[str] | None:
    """The job's hosts the lines of ``path`` report about (its first ``JOB_FILE_SCAN`` bytes);
    None when it is no file of the job's: it neither reports about a host nor lists several."""
    about: set[str] = set()
    lists = False
    most = min(limits.max_file_size, JOB_FILE_SCAN)
    try:
        for block in read_blocks(path, limits=limits):
            for line in block.lines:
                host = identity.subject(line, names)
                if host is not None:
                    about.add(host)
                elif not lists:
                    lists = identity.lists_hosts(line, names)
            if block.end is not None and block.end > most:
                break
    except (OSError, IngestError):
        pass
    return about if about or lists else None


def _node_regex(node_pattern: str | None) -> re.Pattern[str] | None:
    """``--node-pattern`` compiled, or a located error when it is no regex or names no node."""
    if not node_pattern:
        return None
    try:
        pattern = re.compile(node_pattern)
    except re.error as exc:
        raise IngestError(f"invalid --node-pattern — {node_pattern!r} — {exc}") from None
    if "node" not in pattern.groupindex:
        raise IngestError(
            f"invalid --node-pattern — {node_pattern!r} — needs a named group (?P<node>...)"
        )
    return pattern


def _name_file(
    relative: str, stem: str, pattern: re.Pattern[str] | None
) -> tuple[str, int | None, bool, Origin] | None:
    """(node, rank, is a system log, where the node came from) of one file of the job, as its
    path says; None when ``pattern`` skips it. A folder named for system logs (``syslog/``,
    ``dmesg/``) or a collector's generic folder (``logs/``) names no node: its files are named as
    if they lay at the top."""
    system = bool(_SYSTEM.search(stem))
    rank: int | None
    if pattern is not None:
        m = pattern.search(relative)
        if m is None:
            return None
        node = m.group("node")
        rank_text = m.groupdict().get("rank")
        rank = int(rank_text) if rank_text else _rank_of(stem)
        return node, None if system else rank, system, "pattern"
    first = relative.split("/", 1)[0] if "/" in relative else None
    if first is not None and not _COLLECTION.fullmatch(first):
        return first, None if system else _rank_of(stem), system, "folder"
    flat = _FLAT.match(stem)
    if flat:
        node, rank = flat.group("node"), int(flat.group("rank"))
    elif system:
        node, rank = _SYSTEM.sub("", stem) or stem, None
    else:
        node, rank = stem, None
    return node, None if system else rank, system, "name"


def _router(lines: Iterable[str], own_rank: int | None = None) -> HostRouter | None:
    try:
        return plan(lines, own_rank=own_rank)
    except (OSError, IngestError):
        return None


#: What ``probe_files`` says of a file: ``_check_file``'s answer, how its lines are shared
#: among hosts (``hosts.plan``; None: one node's), and what its first lines say of who wrote it.
Probe = tuple[tuple[Path, int, int | None] | str, HostRouter | None, FileFacts]
#: A job with less than this many bytes of logs per extra process is probed in this one
#: (starting the forkserver costs ~0.2 s, a process from it ~0.02 s; probing covers ~55 MB of
#: logs per CPU-second, more where files are longer than the 5,000 lines ``plan`` reads).
PROBE_BYTES_PER_WORKER = 32 << 20
_PROBE_CHUNK = 64  # files per task sent to a probing process
#: Bytes a probe reads at a time (the scan reads ``reader.READ_BYTES``): a few hundred lines.
PROBE_READ_BYTES = 64 << 10


def probe_files(
    files: list[tuple[Path, bool, int]],
    root: Path,
    limits: ReadLimits,
    workers: int | None = None,
) -> list[Probe]:
    """``_probe`` of each (path, is a system log, lines to read for its facts), in order: in
    worker processes for a large job (``workers``, else the machine's cores; one per
    ``PROBE_BYTES_PER_WORKER``), since all of it reads the start of every file; else here."""
    sizes = 0
    for path, _, _ in files:
        with contextlib.suppress(OSError):
            sizes += path.stat().st_size
    cap = procs.default_workers() if workers is None else max(1, workers)
    scanners = cap if workers is not None else procs.auto_workers(sizes)
    if min(scanners, len(files)) > 1:
        procs.start_server()  # the scan will fork its workers: the server starts meanwhile
    workers = min(cap, 1 + sizes // PROBE_BYTES_PER_WORKER, len(files))
    tasks = [(path, system, root, limits, depth) for path, system, depth in files]
    if workers <= 1:
        return [_probe(*task) for task in tasks]
    chunks = [tasks[i : i + _PROBE_CHUNK] for i in range(0, len(tasks), _PROBE_CHUNK)]
    return [probe for chunk in procs.map_in_workers(_probe_all, chunks, workers) for probe in chunk]


def _probe(path: Path, system: bool, root: Path, limits: ReadLimits, depth: int) -> Probe:
    """``_check_file``, the host plan (not for a system log) and the facts of the first
    ``depth`` lines (``identity.facts``), from one read of the file's start."""
    checked = _check_file(path, root, limits)
    if isinstance(checked, str):
        return checked, None, FileFacts()
    it = _first_lines(checked[0], limits)
    try:
        head = list(itertools.islice(it, depth))
    except (OSError, IngestError):
        return checked, None, FileFacts()
    if dumps.is_stack_text(head):
        return STACK_DUMP, None, FileFacts()
    router = None if system else _router(itertools.chain(head, it), _rank_of(path.stem))
    return checked, router, identity.facts(head, depth)


def _probe_all(tasks: list[tuple[Path, bool, Path, ReadLimits, int]]) -> list[Probe]:
    return [_probe(*task) for task in tasks]


def _first_lines(path: Path, limits: ReadLimits | None) -> Iterator[str]:
    # Read within the limits the scan reads it with: a bomb is cut, a line without end read
    # past (the plan reads a few thousand lines at most), in reads of the probe's size: most
    # files are decided on their first lines, and a read of the scan's size decodes and
    # splits megabytes of a file's lines that no probe looks at.
    for block in read_blocks(path, PROBE_READ_BYTES, limits=limits):
        yield from block.lines


def _rank_of(stem: str) -> int | None:
    m = _RANK.search(stem)
    return int(m.group(1)) if m else None


JOB_YAML_KEYS = ("config", "id", "status")
#: Keys a scheduler or platform writes that L4 uses: the job's hosts and its start time.
HOSTS_KEYS = ("nodelist", "node_list", "hostlist", "hosts", "hostnames")
STARTED_KEYS = ("started", "start_time", "started_at", "start")


def _job_yaml(job_dir: Path) -> tuple[dict[str, Any], dict[str, int]]:
    path = job_dir / "job.yaml"
    if not path.exists() and not path.is_symlink():
        return {}, {}
    if _outside(path, job_dir):
        raise IngestError(f"job.yaml is a link out of the job directory — {path} — refused")
    return read_document(path, IngestError, "job.yaml")


def _outside(path: Path, root: Path) -> bool:
    try:
        path.resolve(strict=True).relative_to(root.resolve())
    except (OSError, ValueError, RuntimeError):
        return True
    return False


def fingerprint(config: dict[str, str]) -> str:
    """The configuration fingerprint: a hash of the setup, ignoring run-specific values."""
    kept = {k: v for k, v in sorted(config.items()) if k.lower() not in RUN_SPECIFIC_KEYS}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


_SCALARS = (str, int, float, bool, datetime.date)


def _flatten(prefix: str, value: Any, out: dict[str, str], where: str) -> None:
    """Configuration fields as ``a.b.c -> text``; a value that is no scalar, list of scalars or
    mapping is an error naming its field path (never stored as a Python repr)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str | int) or isinstance(k, bool):
                raise IngestError(
                    f"{where}: {prefix or 'config'}: keys must be strings, got "
                    f"{type(k).__name__} — hint: quote the key"
                )
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, _SCALARS):
                raise IngestError(
                    f"{where}: config.{prefix}[{i}]: must be a string or number, got "
                    f"{type(item).__name__} — hint: a list of settings holds plain values"
                )
        out[prefix] = ",".join(str(v) for v in value)
    elif value is None:
        return
    elif isinstance(value, _SCALARS):
        out[prefix] = str(value)
    else:
        raise IngestError(
            f"{where}: config.{prefix}: must be a string or number, got {type(value).__name__}"
        )


def job_meta(
    job_dir: Path,
    *,
    job_id: str | None = None,
    status: str | None = None,
    config: dict[str, str] | None = None,
) -> JobMeta:
    """Merge ``job.yaml`` with command-line values (which win) into a validated ``JobMeta``.

    ``job.yaml`` has the keys ``id`` (string or integer), ``status`` (one of ``STATUSES``) and
    ``config`` (a mapping of settings), and may have a scheduler's ``nodelist`` (Slurm hostlist
    syntax or a list) and ``started`` (a time); a wrong type of those three, a duplicate key or
    a file that is not UTF-8 is an ``IngestError`` naming ``job.yaml:line`` and the field. Any
    other key is a warning in ``JobMeta.warnings`` (a platform writes keys of its own).
    """
    data, lines = _job_yaml(job_dir)
    path = job_dir / "job.yaml"

    def at(key: str) -> str:
        return f"{path}:{lines[key]}" if key in lines else str(path)

    hosts, started, warnings = _scheduler_keys(data, at)
    raw_config = data.get("config", {})
    if raw_config is None:
        raw_config = {}
    if not isinstance(raw_config, dict):
        raise IngestError(
            f"{at('config')}: config: must be a mapping of configuration fields, got "
            f"{type(raw_config).__name__}"
        )
    flat: dict[str, str] = {}
    _flatten("", raw_config, flat, at("config"))
    flat.update(config or {})
    if job_id is not None:
        jid = check_job_id(job_id, "--job-id", IngestError)
    elif data.get("id") is not None:
        jid = check_job_id(data["id"], f"{at('id')}: id", IngestError)
    else:
        jid = check_job_id(job_dir.resolve().name, f"folder name of {job_dir}", IngestError)
    raw_status = data.get("status")
    if status is None and raw_status is not None and not isinstance(raw_status, str):
        raise IngestError(
            f"{at('status')}: status: must be one of {', '.join(STATUSES)}, got "
            f"{type(raw_status).__name__}"
        )
    st = (status or raw_status or "unknown").lower()
    if st not in STATUSES:
        where = "--status" if status else f"{at('status')}: status"
        raise IngestError(f"invalid job status — {where} — {st!r} — one of {', '.join(STATUSES)}")
    return JobMeta(jid, st, flat, fingerprint(flat), hosts, started, tuple(warnings))


def _scheduler_keys(
    data: dict[str, Any], at: Callable[[str], str]
) -> tuple[tuple[str, ...], float | None, list[str]]:
    """The hosts and start time a platform wrote into ``job.yaml``, and a warning for each
    other key L4 does not read (never fatal: schedulers add keys of their own)."""
    hosts: tuple[str, ...] = ()
    started: float | None = None
    warnings: list[str] = []
    for key, value in data.items():
        name = str(key)
        if name in JOB_YAML_KEYS:
            continue
        if name.lower() in HOSTS_KEYS and value is not None:
            try:
                hosts = tuple(expand_hostlist(value if isinstance(value, list) else str(value)))
            except HostlistError as exc:
                warnings.append(f"{at(name)}: {name}: not a host list, ignored — {exc}")
        elif name.lower() in STARTED_KEYS and value is not None:
            started = _epoch(value)
            if started is None:
                warnings.append(f"{at(name)}: {name}: not a time, ignored — {str(value)[:40]!r}")
        else:
            warnings.append(
                f"{at(name)}: key {name!r} in job.yaml ignored — L4 reads "
                f"{', '.join(JOB_YAML_KEYS)}, nodelist and started"
            )
    return hosts, started, warnings


def _epoch(value: object) -> float | None:
    """A start time as seconds since the epoch: a YAML timestamp, an ISO-8601 text (UTC when
    it has no zone) or a number of seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if 0 < value < 1e11 else None
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, datetime.date):
        moment = datetime.datetime(value.year, value.month, value.day)
    else:
        try:
            moment = datetime.datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def parse_config_overrides(pairs: list[str]) -> dict[str, str]:
    """``l4 ingest --set k=v`` values as a mapping; a malformed pair is a one-line error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise IngestError(f"invalid --set value — {pair!r} — expected key=value")
        out[key.strip()] = value.strip()
    return out
