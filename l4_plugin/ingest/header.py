"""Line headers of the log formats seen in LLM training jobs: time, level, rank, host, emitter.

``parse_header`` recognises the prefix that a framework or launcher writes before the message
(python logging, DeepSpeed, Megatron, glog/c10, torchrun, NCCL, Ascend CANN/HCCL, Slurm, syslog,
dmesg, epoch stamps) and says where the message body starts. A cheap look at the first character
picks the one or two regexes worth trying, because the parser calls this for every *distinct*
line and the ingest calls it for every line whose timestamp it needs.

Times without a zone are taken as UTC. Formats without a year (glog ``E1023 09:13:42``, syslog
``May  3 10:11:12``, vLLM ``03-26 11:49:00``) take ``default_year`` (the caller passes the year
of an earlier full timestamp of the same file; the current UTC year when it has none).
"""

from __future__ import annotations

import calendar
import itertools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from l4_plugin.records import LEVEL_SPELLINGS, Level
from l4_plugin.stacks import TB_FRAME

EMITTERS = (
    "torch",
    "nccl",
    "megatron",
    "deepspeed",
    "hf",
    "hccl",
    "slurm",
    "kernel",
    "syslog",
    "python-logging",
    "plain",
)

LEVELS = tuple(level.name for level in Level)

_LEVEL_WORDS = {word: level.name for word, level in LEVEL_SPELLINGS.items()}

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
    )
}

_LV = r"(?i:TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_ISO = (
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(Z|[+-]\d{2}:?\d{2}(?![\d:]))?"
)

# torchrun --tee / --log-dir prefixes ("[default3]:", role + local rank) and PyTorch's per-rank
# prefix ("[rank11]:", global rank), possibly both: "[default3]:[rank11]:[E1105 ...] ...".
# A custom loop's "[rank0] [2026-09-19 20:40:00] ..." (a space, not a colon) is the same prefix;
# Open MPI's --tag-output "[1,3]<stdout>:" names the global rank (job id, rank).
# Lightning's rank_prefixed_message: "[rank: 1] Seed set to 42". torchelastic names the role
# in its prefix ("[${role_name}${local_rank}]:"): a role other than torchrun's "default" (TorchX's
# "[trainer3]:", "[trainer0|0]:" with the replica) is the same local rank. A runner that names
# each process's stream ("opt-1_3b.0 [stderr] ", milabench) labels it with no rank.
_RANK_PREFIX = re.compile(
    r"((?:\[(?:rank|default)\d+\](?::|[ \t](?=\[))|\[[A-Za-z_][A-Za-z_-]*?\d+(?:\|\d+)?\]:"
    r"|\[rank: \d+\] |\[\d+,\d+\]<std(?:out|err)>:|[A-Za-z][\w.-]* \[std(?:out|err)\] )+)"
)
_PREFIX_PART = re.compile(
    r"\[(rank|[A-Za-z_][A-Za-z_-]*?)(?:: )?(\d+)(?:\|\d+)?\]|\[\d+,(\d+)\]<std"
)
# Labels a log collector puts before everything else: the CRI container log format of a
# Kubernetes node ("2024-05-03T10:11:12.123456789Z stdout F "), `kubectl logs --prefix`
# ("[pod/trainer-worker-3/pytorch] ") and Ray's worker prefix ("(RayTrainWorker pid=1234,
# ip=10.0.0.5) ", "(pid=1234) "; indented, where an excerpt was pasted so).
_CRI = re.compile(_ISO + r" (?:stdout|stderr) [FP] ")
_KUBECTL = re.compile(r"\[pod/([\w.-]+)/[\w.-]+\] ")
_RAY = re.compile(
    r"[ \t]*\((?:[\w.:-]+ )?pid=\d+(?:, ip=(\d{1,3}(?:\.\d{1,3}){3}))?(?:, [\w]+=[^,)\s]+)*\) "
)
# srun -l: "3: message" (the task id, a global rank), whatever follows ("3: 2025-01-27 22:49:45 …");
# never "14:05:45" (a time: no space after its colon).
_SRUN_PREFIX = re.compile(r"(\d{1,6}): ")
_BODY_RANK = re.compile(r"\[Rank (\d+)\]")
#: The rank of each launcher prefix text seen (``_prefix_rank``). Read directly by the scan loop
#: (``rollup.NodeRollup.scan``) for a shape whose spans are known: a missing text is computed
#: by ``rank_prefix_cached``.
PREFIX_RANKS: dict[str, int | None] = {}

# "[2024-05-03 10:11:12,345] [INFO] [logging.py:96:log_dist] " (DeepSpeed) and
# " [2024-05-03 10:11:12] " (Megatron) — the bracketed-time family.
_BRACKET_ISO = re.compile(r"\[" + _ISO + r"\] ?(?:\[(" + _LV + r")\] ?(\[[\w.<>-]+:\d+:\w+\] ?)?)?")
# Ray's C++ components (spdlog, ``src/ray/util/logging.cc``): "[2025-07-18 11:32:21,692 I 1674
# 1674] " — the time, a level letter, the process and thread ids.
_SPDLOG = re.compile(r"\[" + _ISO + r" ([TDIWEC]) \d+ \d+\] ?")
# Tornado's and NeMo's formatter, "[%(levelname)1.1s %(asctime)s %(module)s:%(lineno)d]",
# with NeMo's name before the level: "[NeMo I 2025-07-29 17:47:07 megatron_init:396] ".
_LETTER_BRACKET = re.compile(
    r"\[(?:[A-Za-z][\w-]* )?([DIWECF]) (\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})"
    r"(?:[.,](\d+))? [\w.<>-]+:\d+\] ?"
)
_LETTER_LEVELS = {"D": "DEBUG", "T": "DEBUG", "C": "CRITICAL"}
# A program's tag in brackets before its own header: "[titan] 2025-03-23 00:56:42,776 - root -
# INFO - " (torchtitan), "[entrypoint] 2025-03-23T00:56:33-04:00 host=…" (a launch script).
_TAG = re.compile(r"\[[A-Za-z][\w.-]{0,31}\] ")
# "[INFO|trainer.py:2048] 2024-05-03 10:11:12,345 >> " (transformers)
_HF_BRACKET = re.compile(r"\[(" + _LV + r")\|[\w.<>-]+:\d+\] " + _ISO + r" >> ")
# "[ERROR] HCCL(12345,python):2024-05-03-10:11:12.123.456 [op_base.cc:974][36818][Init]..." and
# "[ERROR] 2024-05-21-11:57:54 (PID:927000, Device:3, RankID:3) ERR02200 ..." (Ascend CANN).
_CANN_TIME = r"(\d{4})-(\d{2})-(\d{2})-(\d{2}):(\d{2}):(\d{2})(?:\.(\d{3})(?:\.(\d{3}))?)?"
_CANN_MODULE = re.compile(
    r"\[("
    + _LV
    + r")\] ([A-Z][A-Z0-9_]*)\((\d+),[^)\n]*\):"
    + _CANN_TIME
    + r" ?(?:\[[\w.]+:\d+\])?"
    r"(?:\[\d+\])? ?"
)
_CANN_PLAIN = re.compile(
    r"\[(" + _LV + r")\] " + _CANN_TIME + r" ?(?:\(PID:\d+, Device:\d+, RankID:(-?\d+)\) ?)?"
)
_CANN_CODE = re.compile(r"([EW])[A-Z]\d{4}: " + _CANN_TIME + r" ?")
_LEVEL_BRACKET = re.compile(r"\[(" + _LV + r")\] ?")
# dmesg: "[12345.678901] " — seconds since boot, not a wall-clock time.
_DMESG = re.compile(r"\[ *\d+\.\d+\] ?")
# dmesg -T / --ctime: "[Sat Apr  6 18:28:50 2024] " (local time of the node; taken as UTC)
_DMESG_HUMAN = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +"
    r"(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\] ?"
)
# glog / c10: "E1023 09:13:42.123456 1234 ProcessGroupNCCL.cpp:616] " and, behind [rank3]:,
# "[E1023 09:13:42.123456789 ProcessGroupNCCL.cpp:616] ". Month may be unpadded (W326).
_GLOG_TIME = r"([IWEF])(\d{1,2})(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
_GLOG = re.compile(_GLOG_TIME + r"(?: +\d+)? [\w./<>-]+:\d+\] ?")
_GLOG_BRACKET = re.compile(r"\[" + _GLOG_TIME + r"(?: +\d+)? [\w./<>-]+:\d+\] ?")
# c10 logging without the glog time (PyTorch 2.0/2.1): "[E ProcessGroupNCCL.cpp:475] [Rank 0] …"
_C10_BRACKET = re.compile(r"\[([IWEF]) [\w./<>-]+\.(?:cpp|cc|cu|h|hpp):\d+\] ?")
# NCCL: "node-a07:1234:5678 [3] NCCL INFO "
_NCCL = re.compile(r"([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] ?(?:NCCL (INFO|WARN|ERROR|TRACE) ?)?")
_SYSLOG = re.compile(
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) )?(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +"
    r"(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?: (\d{4}))? ([A-Za-z0-9][\w.-]*) "
    r"([\w./-]+?)(?:\[\d+\])?: ?"
)
_SLURM = re.compile(
    r"(srun|slurmstepd|salloc|sbatch|slurmd|slurmctld)(?:\[\d+\])?: "
    r"(?:(error|warning|info|debug\d?|fatal): )?"
)
_SLURM_AT = re.compile(r" AT (\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})")
# journalctl -o short-iso: "2024-05-03T10:11:12+0000 host python[1234]: " (after the time)
_JOURNAL = re.compile(r" ([A-Za-z0-9][\w.-]*) (kernel|[\w./-]+\[\d+\]): ")
# "WARNING:root:msg" (logging.basicConfig default) and "INFO 03-26 11:49:00 [file.py:111] msg"
_PY_DEFAULT = re.compile(r"(" + _LV + r"):[\w.<>-]*:")
_LEVEL_MMDD = re.compile(
    r"(" + _LV + r") (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))? \[?[\w./<>-]+:\d+\] ?"
)
_ISO_AT = re.compile(_ISO)
# what follows a leading ISO time: python logging / loguru / plain "LEVEL" layouts
_AFTER_ISO = (
    re.compile(r" - [\w.<>-]+ - (" + _LV + r") - "),  # %(asctime)s - %(name)s - %(levelname)s
    re.compile(r" - (" + _LV + r") - (?:[\w.<>-]+ - )?"),  # %(asctime)s - %(levelname)s - name
    re.compile(r" \| (" + _LV + r") +\| (?:[\w.<>:-]+ - )?"),  # loguru
    # "... INFO msg", "[INFO] msg", "INFO: msg", Ray's "…,586\tINFO worker.py:1832 -- msg"
    re.compile(r",?[ \t]?\[?(" + _LV + r")\]?:?[ \t]+"),
)
# transformers/accelerate examples: "05/03/2024 10:11:12 - INFO - accelerate.utils - msg"
_US_TIME = re.compile(
    r"(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(?: - (" + _LV + r") - "
    r"(?:[\w.<>-]+ - )?)?"
)
# epoch seconds (2001..2096) or milliseconds at the start of the line
_EPOCH = re.compile(r"(1\d{9}|[2-3]\d{9})(?:\.(\d+)|(\d{3}))?(?![\d.])[ \t,:|]*")

# Level from the body where the header has none.
_INFER_ERROR = re.compile(
    r"Traceback \(most recent call last\)|\b[A-Za-z_.]*(?:Error|Exception|Interrupt)\b(?::(?!:)|$)"
    # Python's exceptions named otherwise, as a traceback's last line says them ("StopIteration"
    # from a data iterator run dry, "SystemExit: 2" from argparse)
    r"|^\s*(?:Stop(?:Async)?Iteration|SystemExit|GeneratorExit)\b(?::(?!:)|$)"
    # a traceback's frame (traceback.py's 'File "…", line N, in f'): a traceback whose header
    # was cut off (a pasted excerpt) or whose exception never got printed (the process died
    # while printing it) is still an error's report
    r"|^\s*"
    + TB_FRAME.pattern
    + r"|\b(?:ERROR|[Ee]rror)\b:|\bCUDA error\b|\bSegmentation fault\b|\bcore dumped\b"
    # the kernel's own (dmesg without a level): a BUG (soft lockup, a bad page), a panic, a task
    # hung in D state, the OOM killer: printed at KERN_ERR or above
    r"|\bBUG: |\bkernel BUG at\b|\bKernel panic - not syncing\b"
    r"|\bblocked for more than \d+ seconds|\b[Oo]ut of memory: Killed process\b"
    # the C++ runtime's std::terminate on an uncaught exception, and the exception's what()
    r"|^terminate called after throwing an instance of\b|^\s*what\(\):\s"
    # a shell that could not run a job script's command (bash, dash, zsh say it so)
    r"|\b(?:ba|da|z|k)?sh: (?:line \d+: |\d+: )?\S+: (?:command )?not found\s*$"
    r"|\bcommand not found: \S"
    # the NCCL watchdog's timeout, which torch prints at ERROR, its header dropped by a paste
    # (the line's own start: after a bar's frame it is a record of its own, read as such)
    r"|^\s*(?:\[Rank \d+\] )?Watchdog caught collective operation timeout\b"
)
# A Python exception named with its module (``pyarrow.lib.ArrowInvalid: …``, what a traceback
# ends with) whatever its class is called; a logger's name (``transformers.trainer: …``) ends in
# a lower-case module.
_PY_EXCEPTION = re.compile(r"\s*(?:[a-z_][a-z0-9_]*\.)+[A-Z][A-Za-z0-9]+: \S")
_INFER_WARNING = re.compile(r"\bNCCL WARN\b|\b[A-Za-z]*Warning\b:|\b(?:WARNING|[Ww]arning)\b:")


@dataclass(frozen=True, slots=True)
class Header:
    """What the prefix of one line says; ``body_start`` is where the message itself begins."""

    timestamp: float | None
    level: str | None
    rank: int | None
    host: str | None
    body_start: int
    emitter: str


def normalise_level(word: str | None) -> str | None:
    """Map a level word or glog letter to DEBUG/INFO/WARNING/ERROR/CRITICAL (None if unknown)."""
    if not word:
        return None
    return _LEVEL_WORDS.get(word.upper())


def infer_level(body: str) -> str | None:
    """Guess the level of a message without a level field: errors, tracebacks, warnings. NCCL's
    own level word where its "host:pid:tid [dev]" header was left off (a paste, a collector
    that cut it): an INFO line is INFO whatever its words ("… - Abort COMPLETE", a return
    code's trace), as with the header."""
    if body.lstrip().startswith("NCCL INFO "):
        return "INFO"
    if _INFER_ERROR.search(body) or _PY_EXCEPTION.match(body):
        return "ERROR"
    if _INFER_WARNING.search(body):
        return "WARNING"
    return None


def rank_prefix(line: str) -> tuple[int | None, int]:
    """The rank named by the launcher prefixes at the start of ``line`` and where they end.

    With nested prefixes the global ``[rankN]:`` wins over torchrun's local ``[defaultN]:``;
    Open MPI's ``[1,N]<stdout>:`` and ``srun -l``'s ``N: `` name the global rank.
    A collector's labels before it (:func:`outer_labels`) are skipped; ``(None, end of the
    labels)`` when the line has no rank prefix.
    """
    return _rank_of(line, _rank_spans(line))


def prefix_end(line: str) -> int:
    """``rank_prefix(line)[1]``, the rank not read: where its launcher prefixes end."""
    return _rank_spans(line)[3]


#: A line's digit shape: its UTF-8 bytes with every ASCII digit made "0" (``digit_shape``).
_DIGIT_BYTES = bytes.maketrans(b"123456789", b"000000000")


def digit_shape(raw: str) -> bytes:
    """``raw`` with every digit made "0", as bytes: two lines of one shape differ only in their
    digits. ``bytes.translate`` costs a tenth of ``str.translate`` on a short line, and UTF-8
    holds digit bytes only for digits."""
    return raw.encode("utf-8", "surrogatepass").translate(_DIGIT_BYTES)


#: Where ``rank_prefix`` found its rank, by digit shape (``rank_prefix_cached``): ``(how, start,
#: end, prefix end)`` (``_rank_spans``). Read directly by the scan loop, as ``rank_prefix_cached``
#: reads it, to spare a call per line.
RANK_SHAPES: dict[bytes | str, tuple[int, int, int, int]] = {}
_MAX_RANK_SHAPES = 65_536


def rank_prefix_cached(line: str, shape: bytes | str | None = None) -> tuple[int | None, int]:
    """``rank_prefix(line)``, its regexes run once per digit shape of the line (``digit_shape``).
    Lines of one shape differ only in their digits, and every test ``rank_prefix`` makes (the
    prefix regexes, ``isdecimal``, ``isdigit``) treats all digits alike (``tests/test_ingest.py``
    checks the regexes), so the rank sits at the same span in each of them and only its value is
    read per line. ``shape``: the line's shape, or a finer key of it (``LineParser.feed_keyed``:
    the line with its digits normalised), when the caller has one."""
    # A known shape first: one lookup of a hash already computed, then the rank's digits.
    spans = RANK_SHAPES.get(shape) if shape is not None else None
    if spans is None:
        if shape is None:
            # Without a shape, "[rankN]:" alone costs less than computing one. With a shape the
            # spans are stored below even for these: the scan loop reads them without a call.
            if line.startswith("[rank"):
                end = line.find("]:", 5)
                if 5 < end < 12 and line[5:end].isdecimal() and line[end + 2 : end + 3] != "[":
                    return int(line[5:end]), end + 2
            elif line.startswith("[default"):
                # torchrun's "--tee" prefix "[defaultN]:" alone: its rank is N, as for
                # "[rankN]:" (``_prefix_rank`` of one part); another part would start with "[".
                end = line.find("]:", 8)
                if 8 < end < 15 and line[8:end].isdecimal() and line[end + 2 : end + 3] != "[":
                    return int(line[8:end]), end + 2
            shape = digit_shape(line)
            spans = RANK_SHAPES.get(shape)
        if spans is None:
            if len(RANK_SHAPES) >= _MAX_RANK_SHAPES:
                RANK_SHAPES.clear()
            spans = RANK_SHAPES[shape] = _rank_spans(line)
    # ``_rank_of``, inlined: the rank's own digits, or the cached rank of a launcher prefix
    # ("[default3]:[rank3]:"), whose text repeats on every line of the rank.
    how = spans[0]
    if how == 1:
        return int(line[spans[1] : spans[2]]), spans[3]
    if how == 2:
        rank = PREFIX_RANKS.get(line[spans[1] : spans[2]])
        if rank is not None:
            return rank, spans[3]
    return _rank_of(line, spans)


def _rank_spans(line: str) -> tuple[int, int, int, int]:
    """``(how, start, end, prefix end)`` of the rank in ``line``: how 0 no rank, 1 the number
    at ``line[start:end]``, 2 the rank of the launcher prefix text ``line[start:end]``."""
    if line.startswith("[rank"):
        # The common case, "[rankN]:" alone, without the regexes (every such line pays this).
        end = line.find("]:", 5)
        if 5 < end < 12 and line[5:end].isdecimal() and line[end + 2 : end + 3] != "[":
            return 1, 5, end, end + 2
    elif line.startswith("[default"):
        # torchrun's "[defaultN]:" alone: the rank is N (as ``rank_prefix_cached`` reads it).
        end = line.find("]:", 8)
        if 8 < end < 15 and line[8:end].isdecimal() and line[end + 2 : end + 3] != "[":
            return 1, 8, end, end + 2
    start = outer_labels(line)[2] if line[:1] in _OUTER_FIRST else 0
    return _spans_at(line, start)


def _spans_at(line: str, start: int, srun: bool = True) -> tuple[int, int, int, int]:
    """``_rank_spans`` of the prefixes at ``start`` (``srun``: srun's "N: " may be one)."""
    m = _prefix_match(line, start)
    if m is not None:
        return 2, m.start(1), m.end(1), m.end()
    sm = _SRUN_PREFIX.match(line, start) if srun else None
    if sm is None:
        return 0, 0, 0, start
    # srun -l's task id, then the process's own prefixes: torchrun's under srun
    # ("0: [default3]:[rank3]: …"), torch's C++ log lines ("67: [rank67]:E0916 …").
    after = _RANK_PREFIX.match(line, sm.end())
    if after is None:
        return 1, sm.start(1), sm.end(1), sm.end()
    if _names_global_rank(after.group(1)):
        return 2, after.start(1), after.end(1), after.end()
    return 1, sm.start(1), sm.end(1), after.end()


def _names_global_rank(prefixes: str) -> bool:
    """Whether a run of launcher prefixes names a global rank (torch's "[rankN]:", Lightning's,
    Open MPI's), not only a local one (torchrun's "[defaultN]:")."""
    return "[rank" in prefixes or "<std" in prefixes


def _rank_of(line: str, spans: tuple[int, int, int, int]) -> tuple[int | None, int]:
    how, a, b, end = spans
    if how == 1:
        return int(line[a:b]), end
    if how == 2:
        return _prefix_rank(line[a:b]), end
    return None, end


_OUTER_FIRST = frozenset("0123456789[( \t")
_INDENT = frozenset(" \t")


def outer_labels(line: str) -> tuple[float | None, str | None, int]:
    """(time, host, end) of the labels a log collector put before the line: the CRI format's
    time and stream, ``kubectl logs --prefix``'s pod (the host), Ray's worker prefix (its ip)."""
    ts: float | None = None
    host: str | None = None
    pos = 0
    for _ in range(2):  # kubectl --prefix --timestamps: "[pod/…] 2024-…Z …"
        c = line[pos : pos + 1]
        if c.isdigit() and "std" in line[pos + 19 : pos + 45] and (m := _CRI.match(line, pos)):
            ts = _iso_groups(m.groups())
        elif c == "[" and line.startswith("[pod/", pos) and (m := _KUBECTL.match(line, pos)):
            host = m.group(1)
        # (a pasted excerpt indents Ray's prefix with the rest of the line)
        elif c in "( \t" and (m := _RAY.match(line, pos)) is not None:
            host = m.group(1) or host
        else:
            break
        pos = m.end()
    return ts, host, pos


def _prefix_match(line: str, start: int) -> re.Match[str] | None:
    """The launcher prefixes at ``start``, or after the indentation there: an excerpt pasted
    indented (" [rank3]: Traceback …", every line alike) keeps its bracketed prefixes (not
    srun's "3: ", which an indented line of any text may start with)."""
    m = _RANK_PREFIX.match(line, start)
    if m is None and line[start : start + 1] in _INDENT:
        lead = len(line) - len(line[start:].lstrip(" \t"))
        m = _RANK_PREFIX.match(line, lead) if line[lead : lead + 1] == "[" else None
    return m


def _rank_at(line: str, start: int, srun: bool = True) -> tuple[int | None, int]:
    return _rank_of(line, _spans_at(line, start, srun))


def _prefix_rank(text: str) -> int | None:
    """The rank named by a run of launcher prefixes (the global rank wins)."""
    rank = PREFIX_RANKS.get(text)
    if rank is None:
        for kind, number, mpi in _PREFIX_PART.findall(text):
            if mpi:
                rank = int(mpi)
            elif kind == "rank" or rank is None:
                rank = int(number)
        if len(PREFIX_RANKS) < 65_536:  # a job has a few prefixes per rank
            PREFIX_RANKS[text] = rank
    return rank


def parse_header(line: str, default_year: int | None = None) -> Header:
    """Parse the header of one raw log line (no trailing newline needed; a stray ``\\r`` is fine).

    Never raises: a line whose prefix is not recognised is ``emitter="plain"`` with no timestamp,
    ``body_start`` after any rank prefix, and a level inferred from the body if it has one.
    """
    year = default_year if default_year is not None else time.gmtime().tm_year
    outer_ts, outer_host, labels = (None, None, 0) if line[:1].isalpha() else outer_labels(line)
    rank, pos = _rank_at(line, labels)
    prefixed = pos > labels
    start = pos
    pos = _skip_blanks(line, pos)
    ts, level, host, body, emitter, hdr_rank = _dispatch(line, pos, year)
    if body < 0:
        body = start
        if prefixed:
            emitter = "torch"
    elif rank is None and hdr_rank is None:
        # A time before the rank prefix ("2024-05-03T10:11:12Z [rank3]: [E0503 …] …", a
        # collector's stamp): the prefix, then the framework's own header after it.
        rank, after = _rank_at(line, body, srun=False)
        if rank is not None:
            again = _dispatch(line, _skip_blanks(line, after), year)
            ts2, level2, host2, body2, emitter2, _ = again
            ts = ts if ts is not None else ts2
            level, host = level2 or level, host2 or host
            body, emitter = (body2, emitter2) if body2 >= 0 else (after, "torch")
    if emitter == "plain" and ts is not None and level is None:
        # A collector's time before the program's own header ("kubectl logs --timestamps",
        # a JSON line's time): the collector's time, the program's level and body.
        inner = _dispatch(line, _skip_blanks(line, body), year)
        if inner[3] >= 0:
            level, host, body, emitter = inner[1], inner[2] or host, inner[3], inner[4]
    ts = ts if ts is not None else outer_ts
    host = host or outer_host
    if hdr_rank is not None and rank is None:
        rank = hdr_rank
    if rank is None:
        rm = _BODY_RANK.match(line, body)
        if rm is not None:
            rank = int(rm.group(1))
    if level is None:
        level = infer_level(line[body:])
    if ts is None and emitter == "slurm":
        ts = _slurm_time(line, body)
    return Header(ts, level, rank, host, body, emitter)


def _slurm_time(line: str, body: int) -> float | None:
    """The time in a Slurm message ("… CANCELLED AT 2024-05-03T10:11:12 ***")."""
    sm = _SLURM_AT.search(line, body)
    if sm is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in sm.groups())
    return _epoch(y, mo, d, h, mi, s, 0.0, None)


def _skip_blanks(line: str, pos: int) -> int:
    n = len(line)
    while pos < n and line[pos] in " \t\r":
        pos += 1
    return pos


def parse_time(
    line: str, default_year: int | None = None, shape: bytes | str | None = None
) -> float | None:
    """``parse_header(line, default_year).timestamp``, without the rest: no level inference
    (two regex searches over the body) and no rank. What the ingest asks of most lines.
    ``shape``: the line's digit shape or a finer key (``rank_prefix_cached``), if known.

    Lines of one digit shape take the same path through the formats (every test on the way
    treats all digits alike, ``tests/unit/test_header.py`` checks the regexes): the first line
    of a shape finds the one regex match its time comes from (``_time_plan``), the others of
    the shape make that match alone and convert its groups.

    The match spans the same characters in every line of the shape, so two lines of one shape
    with the same text there have the same time: it is remembered by the plan and that text
    (``_TIMES``), since a job's lines come many to a time stamp.
    """
    year = default_year if default_year is not None else time.gmtime().tm_year
    if shape is None:
        shape = digit_shape(line)
    plan = _TIME_PLANS.get(shape)
    if plan is None:
        plan = _time_plan(line, year, shape)
    if plan is not _NO_PLAN:
        pattern, pos, convert, end, serial = plan
        key = (serial, year, line[pos:end])
        ts = _TIMES.get(key)
        if ts is not None:
            return ts
        m = pattern.match(line, pos)
        if m is not None:
            ts = convert(m, year)
            if ts is not None:
                if len(_TIMES) >= _MAX_TIMES:
                    _TIMES.clear()
                _TIMES[key] = ts
                return ts
    return _parse_time(line, year, shape)


class _Watch(threading.local):
    """The zones ``_epoch`` read, by the time it gave, while ``on`` (``stated_zone``)."""

    on = False
    zones: dict[float, str | None]


_WATCH = _Watch()
_WATCHERS = 0  # threads in ``stated_zone`` now (only their ``_epoch`` calls record)
_WATCHING = threading.Lock()


def stated_zone(line: str, default_year: int | None = None) -> tuple[float | None, int | None]:
    """The time ``parse_time`` reads from ``line`` and the zone its stamp states, in seconds east
    of UTC: 0 for ``Z`` and for epoch seconds; None for a stamp that states none (a glog, syslog
    or plain ``2025-10-24 16:50:07`` stamp: the wall clock of whatever printed it, which
    ``parse_time`` reads as UTC)."""
    global _WATCHERS
    year = default_year if default_year is not None else time.gmtime().tm_year
    _WATCH.zones = {}
    _WATCH.on = True
    with _WATCHING:
        _WATCHERS += 1
    try:
        ts = _parse_time(line, year, None)
    finally:
        _WATCH.on = False
        with _WATCHING:
            _WATCHERS -= 1
    if ts is None:
        return None, None
    if ts not in _WATCH.zones:
        return ts, 0  # epoch seconds: no wall clock
    zone = _WATCH.zones[ts]
    if zone is None:
        return ts, None
    return ts, _east(zone)


def _east(zone: str) -> int:
    """Seconds east of UTC of a stated zone (``Z``, ``+08:00``, ``-0700``)."""
    if zone == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    east = int(digits[:2]) * 3600 + int(digits[2:4]) * 60
    return -east if zone[0] == "-" else east


#: Whether a digit shape's stamp states no zone (``zone_free``).
_ZONE_FREE: dict[bytes | str, bool] = {}


def zone_free(line: str, default_year: int | None = None) -> bool:
    """True when ``line``'s time stamp states no zone (``stated_zone``); remembered by digit
    shape: lines of one shape take the same path through the formats."""
    shape = digit_shape(line)
    free = _ZONE_FREE.get(shape)
    if free is None:
        ts, zone = stated_zone(line, default_year)
        free = ts is not None and zone is None
        if len(_ZONE_FREE) >= _MAX_TIME_PLANS:
            _ZONE_FREE.clear()
        _ZONE_FREE[shape] = free
    return free


def parse_local(line: str, default_year: int | None, east: int) -> float | None:
    """``parse_time(line, default_year)``, a stamp that states no zone read as the wall clock of
    a zone ``east`` seconds east of UTC (the job's: ``scanner.zone_of``) rather than as UTC."""
    ts = parse_time(line, default_year)
    if ts is None or not east or not zone_free(line, default_year):
        return ts
    return ts - east


def _parse_time(line: str, year: int, shape: bytes | str | None) -> float | None:
    """``parse_time`` the long way: the rank prefix, the formats tried in turn, then the Slurm
    and log-collector times for a line whose header holds none."""
    end = rank_prefix_cached(line, shape)[1]
    pos = _skip_blanks(line, end)
    ts, _, _, body, emitter, _ = _dispatch(line, pos, year)
    if ts is None and emitter == "slurm":
        ts = _slurm_time(line, body)
    if ts is None and line[:1] in _OUTER_FIRST:
        ts = outer_labels(line)[0]
    return ts


#: How the time of a line is read: the regex whose match holds it, where the match starts
#: and the function of the match (and the default year) that gives it; where the match ends,
#: and a number of the plan's own (the key of its times in ``_TIMES``).
_Plan = tuple[re.Pattern[str], int, Callable[[re.Match[str], int], float | None], int, int]
_NO_PLAN: _Plan = (re.compile(r"(?!)"), 0, lambda m, year: None, 0, 0)  # the long way always
_TIME_PLANS: dict[bytes | str, _Plan] = {}
_MAX_TIME_PLANS = 65_536
_PLAN_SERIALS = itertools.count(1)
#: Times read by a plan, by (its serial, the default year, the text of its match).
_TIMES: dict[tuple[int, int, str], float] = {}
_MAX_TIMES = 16_384  # a node's distinct stamps, a few thousand; ~3 MB at most
_TRACE = threading.local()  # the last time a format read (``_timed``): thread by thread


def _time_plan(line: str, year: int, shape: bytes | str) -> _Plan:
    """The plan of ``line``'s digit shape: the match ``_parse_time`` read the time from, when it
    read it from one of the ``_timed`` formats (else ``_NO_PLAN``: a line without a time, a
    Slurm or log-collector time, an epoch stamp whose regex tells digits apart)."""
    _TRACE.last = None
    ts = _parse_time(line, year, shape)
    last = _TRACE.last
    plan = _NO_PLAN
    if ts is not None and last is not None and last[3] == ts:
        plan = (*last[:3], last[4], next(_PLAN_SERIALS))
    if len(_TIME_PLANS) >= _MAX_TIME_PLANS:
        _TIME_PLANS.clear()
    _TIME_PLANS[shape] = plan
    return plan


def _timed(
    m: re.Match[str], convert: Callable[[re.Match[str], int], float | None], year: int
) -> float | None:
    """The time ``convert`` reads from ``m``, recorded for ``_time_plan``."""
    ts = convert(m, year)
    _TRACE.last = (m.re, m.start(), convert, ts, m.end())
    return ts


def second_of(line: str, default_year: int, shape: bytes | str | None = None) -> int | None:
    """``int(parse_time(line, default_year, shape))``, remembered by the text the time is read
    from up to its whole second (and its zone): what the scan keys a marker-less file's lines
    by. Stamped lines come many to a second, on every rank, and the conversion costs more than
    the lookup.

    Exact: the lines of one digit shape read their time from the same spans of the same plan
    (``parse_time``), two lines with the same text there differ at most in the fraction, and a
    fraction of at most six digits never carries a non-negative time into the next second (a
    double holds 1e-6 at up to 2**32 s). Other shapes (no plan, a longer fraction, a format
    whose fields are not listed in ``_SECOND_FIELDS``) take ``parse_time`` every time."""
    if shape is None:
        shape = digit_shape(line)
    spans = _SECOND_SPANS.get(shape)
    if spans is None:
        spans = _second_spans(line, default_year, shape)
    if spans is _NO_SPANS:
        ts = parse_time(line, default_year, shape)
        return int(ts) if ts is not None else None
    pattern, pos, convert, a, b, za, zb = spans
    key = (convert, default_year, line[a:b], line[za:zb])
    second = _SECONDS.get(key)
    if second is not None:
        return second
    m = pattern.match(line, pos)
    ts = convert(m, default_year) if m is not None else None
    if ts is None:  # an impossible date: parse_time takes the long way
        ts = parse_time(line, default_year, shape)
        return int(ts) if ts is not None else None
    if ts < 0:  # before the epoch ``int`` rounds up: not remembered
        return int(ts)
    if len(_SECONDS) >= _MAX_SECONDS:
        _SECONDS.clear()
    second = _SECONDS[key] = int(ts)
    return second


def _t_iso(m: re.Match[str], year: int) -> float | None:
    return _iso_groups(m.groups())


def _t_bracket_iso(m: re.Match[str], year: int) -> float | None:
    return _iso_groups(m.groups()[:8])


def _t_letter(m: re.Match[str], year: int) -> float | None:
    return _iso_groups((*m.groups()[1:8], None))


def _t_hf(m: re.Match[str], year: int) -> float | None:
    return _iso_groups(m.groups()[1:9])


def _t_glog(m: re.Match[str], year: int) -> float | None:
    return _glog_groups(m.groups(), year)


def _t_cann_module(m: re.Match[str], year: int) -> float | None:
    return _cann_groups(m.groups()[3:11])


def _t_cann_plain(m: re.Match[str], year: int) -> float | None:
    return _cann_groups(m.groups()[1:9])


def _t_cann_code(m: re.Match[str], year: int) -> float | None:
    return _cann_groups(m.groups()[1:])


#: The match groups a plan's conversion reads (first field, seconds, fraction, zone; 0: none).
_SECOND_FIELDS: dict[Callable[[re.Match[str], int], float | None], tuple[int, int, int, int]] = {
    _t_iso: (1, 6, 7, 8),
    _t_bracket_iso: (1, 6, 7, 8),
    _t_hf: (2, 7, 8, 9),
    _t_glog: (2, 6, 7, 0),
    _t_letter: (2, 7, 8, 0),
}
#: A shape's plan (pattern, start, conversion) and the spans ``second_of`` keys its lines by.
_SecondSpans = tuple[
    re.Pattern[str], int, Callable[[re.Match[str], int], float | None], int, int, int, int
]
_NO_SPANS: _SecondSpans = (*_NO_PLAN[:3], 0, 0, 0, 0)
_SECOND_SPANS: dict[bytes | str, _SecondSpans] = {}
_SECONDS: dict[tuple[object, int, str, str], int] = {}
_MAX_SECONDS = 65_536


def _second_spans(line: str, year: int, shape: bytes | str) -> _SecondSpans:
    """Where ``second_of`` reads the lines of ``line``'s shape: the text from the time's first
    field to its seconds, and its zone (``_NO_SPANS``: no such plan)."""
    plan = _TIME_PLANS.get(shape) or _time_plan(line, year, shape)
    spans = _NO_SPANS
    fields = _SECOND_FIELDS.get(plan[2]) if plan is not _NO_PLAN else None
    m = plan[0].match(line, plan[1]) if fields is not None else None
    if fields is not None and m is not None:
        first, seconds, fraction, zone = fields
        fa, fb = m.span(fraction)
        if fb - fa <= 6:
            za, zb = m.span(zone) if zone else (0, 0)
            za, zb = (za, zb) if za >= 0 else (0, 0)
            spans = (*plan[:3], m.start(first), m.end(seconds), za, zb)
    if len(_SECOND_SPANS) >= _MAX_TIME_PLANS:
        _SECOND_SPANS.clear()
    _SECOND_SPANS[shape] = spans
    return spans


_Parsed = tuple[float | None, str | None, str | None, int, str, int | None]
_NONE: _Parsed = (None, None, None, -1, "plain", None)


def _dispatch(line: str, pos: int, year: int) -> _Parsed:
    """Try the formats that can start with ``line[pos]``; body -1 means "no header found"."""
    if pos >= len(line):
        return _NONE
    c = line[pos]
    if c == "[":
        return _bracket(line, pos, year)
    if c.isdigit():
        return _digit(line, pos)
    if c.isalpha():
        return _alpha(line, pos, year)
    return _NONE


def _bracket(line: str, pos: int, year: int) -> _Parsed:
    c1 = line[pos + 1 : pos + 2]
    if c1.isdigit():
        m = _BRACKET_ISO.match(line, pos)
        if m is not None:
            g = m.groups()
            ts = _timed(m, _t_bracket_iso, year)
            level = normalise_level(g[8])
            if level is None:
                return ts, None, None, m.end(), "megatron", None
            emitter = "deepspeed" if g[9] else "python-logging"
            return ts, level, None, m.end(), emitter, None
        m = _SPDLOG.match(line, pos)
        if m is not None:
            level = _LETTER_LEVELS.get(m[9]) or normalise_level(m[9])
            return _timed(m, _t_bracket_iso, year), level, None, m.end(), "plain", None
    elif c1 in "IWEF" and line[pos + 2 : pos + 3].isdigit():
        m = _GLOG_BRACKET.match(line, pos)
        if m is not None:
            return (
                _timed(m, _t_glog, year),
                normalise_level(m[1]),
                None,
                m.end(),
                "torch",
                None,
            )
    elif c1 in "IWEF" and line[pos + 2 : pos + 3] == " ":
        m = _C10_BRACKET.match(line, pos)
        if m is not None:
            return None, normalise_level(m[1]), None, m.end(), "torch", None
    m = _DMESG.match(line, pos)
    if m is not None:
        return None, None, None, m.end(), "kernel", None
    if c1.isalpha():
        m = _LETTER_BRACKET.match(line, pos)
        if m is not None:
            level = _LETTER_LEVELS.get(m[1]) or normalise_level(m[1])
            return _timed(m, _t_letter, year), level, None, m.end(), "python-logging", None
        m = _DMESG_HUMAN.match(line, pos)
        if m is not None:
            mon, d, h, mi, sec, y = m.groups()
            ts = _epoch(int(y), _MONTHS[mon], int(d), int(h), int(mi), int(sec), 0.0, None)
            return ts, None, None, m.end(), "kernel", None
        m = _CANN_MODULE.match(line, pos)
        if m is not None:
            g = m.groups()
            return (
                _timed(m, _t_cann_module, year),
                normalise_level(g[0]),
                None,
                m.end(),
                "hccl",
                None,
            )
        m = _CANN_PLAIN.match(line, pos)
        if m is not None:
            g = m.groups()
            rank = int(g[9]) if g[9] is not None and not g[9].startswith("-") else None
            return (
                _timed(m, _t_cann_plain, year),
                normalise_level(g[0]),
                None,
                m.end(),
                "hccl",
                rank,
            )
        m = _HF_BRACKET.match(line, pos)
        if m is not None:
            g = m.groups()
            return _timed(m, _t_hf, year), normalise_level(g[0]), None, m.end(), "hf", None
        m = _LEVEL_BRACKET.match(line, pos)
        if m is not None:
            return None, normalise_level(m[1]), None, m.end(), "plain", None
        m = _TAG.match(line, pos)
        if m is not None:
            inner = _dispatch(line, m.end(), year)
            if inner[3] >= 0 and inner[0] is not None:
                return inner
    return _NONE


def _digit(line: str, pos: int) -> _Parsed:
    m = _ISO_AT.match(line, pos)
    if m is not None:
        ts = _timed(m, _t_iso, 0)
        end = m.end()
        jm = _JOURNAL.match(line, end)
        if jm is not None:
            emitter = "kernel" if jm.group(2) == "kernel" else "syslog"
            return ts, None, jm.group(1), jm.end(), emitter, None
        for after in _AFTER_ISO:
            lm = after.match(line, end)
            if lm is not None:
                return ts, normalise_level(lm[1]), None, lm.end(), "python-logging", None
        while end < len(line) and line[end] in " \t":
            end += 1
        return ts, None, None, end, "plain", None
    m = _US_TIME.match(line, pos)
    if m is not None:
        mo, d, y, h, mi, s, frac, lv = m.groups()
        ts = _epoch(int(y), int(mo), int(d), int(h), int(mi), int(s), _frac(frac), None)
        level = normalise_level(lv)
        return ts, level, None, m.end(), "hf" if level else "plain", None
    m = _EPOCH.match(line, pos)
    if m is not None:
        seconds, frac, millis = m.groups()
        ts = float(seconds) + (_frac(frac) if frac else int(millis) / 1000 if millis else 0.0)
        return ts, None, None, m.end(), "plain", None
    return _NONE


def _alpha(line: str, pos: int, year: int) -> _Parsed:
    c = line[pos]
    if c in "IWEF" and line[pos + 1 : pos + 2].isdigit():
        m = _GLOG.match(line, pos)
        if m is not None:
            return _timed(m, _t_glog, year), normalise_level(c), None, m.end(), "torch", None
    if c in "EW":
        m = _CANN_CODE.match(line, pos)
        if m is not None:
            level = "ERROR" if c == "E" else "WARNING"
            return _timed(m, _t_cann_code, year), level, None, m.end(), "hccl", None
    if c == "s":
        m = _SLURM.match(line, pos)
        if m is not None:
            return None, normalise_level(m[2]), None, m.end(), "slurm", None
    if c.isupper():
        m = _SYSLOG.match(line, pos)
        if m is not None:
            mon, d, h, mi, s, frac, y, host, prog = m.groups()
            ts = _epoch(
                int(y) if y else year, _MONTHS[mon], int(d), int(h), int(mi), int(s),
                _frac(frac), None,
            )  # fmt: skip
            end = m.end()
            if prog == "kernel":
                dm = _DMESG.match(line, end)
                if dm is not None:
                    end = dm.end()
                return ts, None, host, end, "kernel", None
            return ts, None, host, end, "syslog", None
        m = _LEVEL_MMDD.match(line, pos)
        if m is not None:
            lv, mo, d, h, mi, s, frac = m.groups()
            ts = _epoch(year, int(mo), int(d), int(h), int(mi), int(s), _frac(frac), None)
            return ts, normalise_level(lv), None, m.end(), "python-logging", None
        m = _PY_DEFAULT.match(line, pos)
        if m is not None:
            return None, normalise_level(m[1]), None, m.end(), "python-logging", None
    m = _NCCL.match(line, pos)
    if m is not None:
        return None, normalise_level(m[2]), m[1], m.end(), "nccl", None
    return _NONE


def _frac(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def _iso_groups(g: tuple[str | None, ...]) -> float | None:
    y, mo, d, h, mi, s, frac, zone = g
    assert y is not None and mo is not None and d is not None
    assert h is not None and mi is not None and s is not None
    return _epoch(int(y), int(mo), int(d), int(h), int(mi), int(s), _frac(frac), zone)


def _cann_groups(g: tuple[str | None, ...]) -> float | None:
    y, mo, d, h, mi, s, ms, us = g
    assert y is not None and mo is not None and d is not None
    assert h is not None and mi is not None and s is not None
    frac = (int(ms) / 1e3 if ms else 0.0) + (int(us) / 1e6 if us else 0.0)
    return _epoch(int(y), int(mo), int(d), int(h), int(mi), int(s), frac, None)


def _glog_groups(g: tuple[str | None, ...], year: int) -> float | None:
    _, mo, d, h, mi, s, frac = g
    assert mo is not None and d is not None
    assert h is not None and mi is not None and s is not None
    return _epoch(year, int(mo), int(d), int(h), int(mi), int(s), _frac(frac), None)


_DAYS: dict[tuple[int, int, int], int] = {}  # epoch seconds of each day's midnight (UTC)


def _epoch(
    y: int, mo: int, d: int, h: int, mi: int, s: int, frac: float, zone: str | None
) -> float | None:
    """Epoch seconds (UTC unless ``zone``); None for an impossible date instead of raising."""
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s <= 60):
        return None
    day = _DAYS.get((y, mo, d))
    if day is None:
        # timegm normalises an impossible day (Feb 31) the same way with or without the time.
        day = calendar.timegm((y, mo, d, 0, 0, 0, 0, 0, 0))
        if len(_DAYS) < 100_000:
            _DAYS[(y, mo, d)] = day
    ts = day + h * 3600 + mi * 60 + s + frac
    if zone and zone != "Z":
        ts -= _east(zone)
    if _WATCHERS and _WATCH.on:  # (the global first: a thread-local costs a third of a call)
        _WATCH.zones[ts] = zone
    return ts
