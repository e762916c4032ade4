"""Evidence heuristics: what the aggregated tables say for and against each event of a job.

Pure functions of :class:`~l4_plugin.analysis.tables.JobData` and the estimators' results: the
events' levels and stages (:func:`event_stats`), the evidence *against* an event that noisy-OR
cannot express (:func:`discounts`: chronic background, boilerplate, low information, reactions),
the first occurrence within the failing stage (:func:`timed_in_stage`) and the failure lexicon's
words (:func:`lexicon_priors`). Their tuning is :class:`~l4_plugin.analysis.params.AnalysisOptions`;
the recipe (:mod:`l4_plugin.analysis.recipe`) runs them.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping
from dataclasses import replace

from l4_plugin.analysis.lexicon import Lexicon, Term, default_lexicon
from l4_plugin.analysis.params import DEFAULT_OPTIONS, AnalysisOptions
from l4_plugin.analysis.results import EventStat, Slowdown, StragglerResult
from l4_plugin.analysis.tables import JobData
from l4_plugin.records import Level, is_error, is_flagged
from l4_plugin.stacks import FRAME, bare

# Kernel, BMC and Slurm lines carry no level; these words give them one.
_ERROR_WORDS = re.compile(
    r"\b(?:panic|fatal|error|errors|failed|failure|xid|uncorrectable|abort(?:ed|ing)?|killed|"
    r"segfault|exception|link down|not responding|machine check)\b",
    re.IGNORECASE,
)
_WARN_WORDS = re.compile(
    r"\b(?:warn(?:ing)?|timeout|timed out|down|retry|retrying|throttled|slowdown|corrected)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z]{2,}")
_MASKS = re.compile(r"<[A-Z_*]+>")
# A variable other than the rank (masked, or a number masking left as zeros: an error code, a
# version): the line states a fact of its own.
_FACT_MASK = re.compile(r"<(?!RANK>)[A-Z_*]+>|\d")
# An error type or a signal names what happened: a fact, not prose.
_ERROR_TYPE = re.compile(r"\w(?:Error|Exception|Failure)\b|\bSIG[A-Z]{2,}\b")


def inferred_level(text: str) -> str | None:
    """A level for a line that has none (kernel, BMC, Slurm): ERROR / WARN by its words.

    "Corrected" errors are warnings: a corrected PCIe error is the textbook benign anomaly.
    """
    if re.search(r"\bcorrected\b", text, re.IGNORECASE):
        return Level.WARNING.label
    if _ERROR_WORDS.search(text):
        return Level.ERROR.label
    if _WARN_WORDS.search(text):
        return Level.WARNING.label
    return None


def _stage_at(data: JobData, node: str, ts: float) -> str | None:
    """The stage a node's training logs were in at ``ts``: the latest-starting span containing
    it, else (the line came after the node's last training line: a crash) the last span.

    ``init`` spans are left out: a node's kernel log sits in ``init`` from its first line to its
    last, so its span covers the whole job and says nothing about when a line was printed.
    """
    inside: tuple[float, str] | None = None
    before: tuple[float, str] | None = None
    for (n, stage), (first, last, _, _) in data.stage_spans.items():
        if n != node or stage == "init" or math.isnan(first):
            continue
        if first <= ts <= last and (inside is None or first > inside[0]):
            inside = (first, stage)
        if last <= ts and (before is None or last > before[0]):
            before = (last, stage)
    best = inside or before
    return best[1] if best else None


def event_stats(data: JobData) -> tuple[EventStat, ...]:
    """One :class:`EventStat` per template of the job: per-node first time and count.

    Lines without a level get one from their words (:func:`inferred_level`), a stack printed
    alone a warning's (``stacks.bare``). Lines of files with no stage markers (kernel logs) sit
    in ``init`` for ingest; when such a line comes after its node's start-up, it gets the stage
    the node's training logs were in at that time.
    """
    first: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    positions: dict[str, dict[str, float]] = {}
    details = nccl_details(data)
    for (node, tid), cell in data.cells.items():
        first.setdefault(tid, {})[node] = cell.first_ts
        counts.setdefault(tid, {})[node] = cell.count
        positions.setdefault(tid, {})[node] = cell.first_pos
    out = []
    for tid in sorted(first):
        info = data.templates.get(tid)
        level = info.level if info else None
        if level is None and info is not None:
            level = inferred_level(info.text or info.message)
            if level is None and bare(info.message):
                # A stack printed alone (a stuck process's dump, a traceback cut before its
                # exception): something stopped there, though no line says what.
                level = Level.WARNING.label
        if tid in details:
            level = Level.ERROR.label
        stage = info.stage if info else None
        if stage == "init" and data.time_unit == "ts":
            node, ts = min(first[tid].items(), key=lambda kv: (kv[1], kv[0]))
            stage = _stage_at(data, node, ts) or stage
        out.append(
            EventStat(
                template_id=tid,
                level=level,
                first_seen=first[tid],
                counts=counts[tid],
                stage=stage,
                positions=positions[tid],
            )
        )
    return tuple(out)


#: torch's report of a failed NCCL call ("NCCL error in: …, internal error - please report
#: this issue to the NCCL developers", "unhandled system error", ncclRemoteError …): the NCCL
#: result, which says little; NCCL printed what went wrong itself just before, as a warning.
_NCCL_ERROR = re.compile(
    r"\bNCCL error\b|\bnccl(?:Internal|System|Unhandled\w*|InvalidUsage|Remote)Error\b"
)
_NCCL_WARN = re.compile(r"\bNCCL WARN\b")
#: Lines before torch's report within which NCCL's warnings are its words (NCCL's INFO lines
#: of the failing call's return path, "transport/net.cc:… -> 6", come between).
_DETAIL_LINES = 40


def nccl_details(data: JobData, lexicon: Lexicon | None = None) -> dict[str, str]:
    """NCCL's warnings that say why the NCCL call torch then reported failed: templates of
    "NCCL WARN" a node printed within ``_DETAIL_LINES`` lines before the first line of torch's
    NCCL error there ("graph/topo.h:230 NCCL WARN Could not find NET with id 0", then
    "DistBackendError: NCCL error in: …, internal error - please report this issue"), each
    with the error it precedes (the nearest). They are the error's own words: an error's level,
    whatever NCCL's word for it, and the error's category. Only warnings whose words the
    lexicon does not know: one that names its cause (NET/IB's failed completion) or is a banner
    says so itself, and keeps its own level and time (``lexicon``: the shipped one unless
    given)."""
    errors = {
        t
        for t, info in data.templates.items()
        if is_error(info.level) and _NCCL_ERROR.search(info.text)
    }
    # (a warning with words of its own says them itself: NET/IB's completion error, a banner)
    lexicon = lexicon or default_lexicon()
    warns = {
        t
        for t, info in data.templates.items()
        if t not in errors
        and _NCCL_WARN.search(info.text)
        and not is_error(info.level)
        and lexicon.classify_record(f"{info.text}\n{info.message}") is None
    }
    if not errors or not warns:
        return {}
    failed: dict[str, list[tuple[float, str]]] = {}  # node -> where torch's NCCL errors began
    for (node, tid), cell in data.cells.items():
        if tid in errors and math.isfinite(cell.first_pos):
            failed.setdefault(node, []).append((cell.first_pos, tid))
    out: dict[str, tuple[float, str]] = {}
    for (node, tid), cell in sorted(data.cells.items()):
        if tid not in warns:
            continue
        after = [(at - cell.first_pos, e) for at, e in failed.get(node, ()) if at > cell.first_pos]
        if (
            after
            and (near := min(after))[0] <= _DETAIL_LINES
            and near < out.get(tid, (math.inf, ""))
        ):
            out[tid] = near
    return {t: e for t, (_, e) in out.items()}


#: The collective a ProcessGroupNCCL work names ("WorkNCCL(SeqNum=3742816, OpType=REDUCE, …"):
#: in a watchdog's timeout, a desync report, a flight recorder's entry.
_WORK = re.compile(r"\bSeqNum=(\d+), OpType=(\w+)")


def divergent_copies(data: JobData) -> dict[str, str]:
    """Collective timeouts where the ranks were not in the same collective: of a template's
    copies (the exemplar and ``JobData.variants``), the one copy whose work is not the one all
    the others name — another collective at the same sequence number ("[Rank 0] …
    SeqNum=3742816, OpType=REDUCE" among ranks in "_ALLGATHER_BASE": rank 0 called a reduce the
    others never did), or another sequence number (rank 0 at 959 while every other rank waits
    at 963: rank 0 skipped or is behind four collectives). That copy says where the ranks
    diverged: the template's line to show, template → copy."""
    out: dict[str, str] = {}
    for tid, info in data.templates.items():
        if "OpType=" not in info.message:
            continue
        works: dict[tuple[str, str], list[str]] = {}
        for copy in (info.message, *data.variants.get(tid, ())):
            work = _WORK.search(copy)
            if work is not None:
                works.setdefault((work.group(1), work.group(2)), []).append(copy)
        sizes = sorted(len(copies) for copies in works.values())
        if len(works) == 2 and sizes[0] == 1 and sizes[1] >= 2:
            out[tid] = next(copies[0] for copies in works.values() if len(copies) == 1)
    return out


def boilerplate(data: JobData, options: AnalysisOptions = DEFAULT_OPTIONS) -> set[str]:
    """Explanatory prose printed as part of another line's block.

    After a watchdog timeout every rank prints "Watchdog caught collective operation timeout:
    WorkNCCL(SeqNum=…)" and, the same number of times in the same second, "To avoid data
    inconsistency, we are taking the entire process down." The second line states no fact of
    its own: it has no variable but the rank (no number, no error code), names no error type,
    and only ever appears beside the first. Lines printed on a single node are never
    boilerplate (a root cause's own lines).
    """
    per: dict[str, dict[str, tuple[int, float]]] = {}
    for (node, tid), cell in data.cells.items():
        per.setdefault(tid, {})[node] = (cell.count, cell.first_ts)
    groups: dict[tuple[tuple[str, int], ...], list[str]] = {}
    for tid, cells in per.items():
        if len(cells) >= 2:
            key = tuple(sorted((n, c) for n, (c, _) in cells.items()))
            groups.setdefault(key, []).append(tid)
    out: set[str] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        first = {t: min(f for _, f in per[t].values()) for t in members}
        text = {t: data.templates[t].text if t in data.templates else "" for t in members}
        factual = [t for t in members if _FACT_MASK.search(text[t])]
        for t in members:
            if t in factual or _ERROR_TYPE.search(text[t]) or not _WORD.search(text[t]):
                continue
            if any(abs(first[f] - first[t]) <= options.block_seconds for f in factual):
                out.add(t)
    return out


def chronic(
    data: JobData,
    stragglers: StragglerResult | None,
    slowdown: Slowdown | None = None,
    options: AnalysisOptions = DEFAULT_OPTIONS,
) -> dict[str, tuple[float, str]]:
    """The *chronic* discounts of :func:`discounts`: templates printed long before the failure
    and again and again since (benign background), with ``options.chronic_factor``."""
    out: dict[str, tuple[float, str]] = {}
    buckets = sorted(data.iteration_spans)
    slow = {s.node for s in stragglers.stragglers} if stragglers else set()
    per: dict[str, dict[str, tuple[int, float, float]]] = {}
    for (node, tid), cell in data.cells.items():
        per.setdefault(tid, {})[node] = (cell.count, cell.first_ts, cell.last_ts)
    if len(buckets) > options.chronic_lead:
        cutoff = buckets[-1 - options.chronic_lead]
        seen: dict[str, list[int]] = {}
        for it, tid in data.iteration_cells:
            seen.setdefault(tid, []).append(it)
        starts = [t for (_, it), t in data.node_iteration_start.items() if it == cutoff]
        cut_ts = min(starts) if starts and data.time_unit == "ts" else None
        onset = set(slowdown.events) if slowdown else set()
        for tid, cells in per.items():
            if (slow and set(cells) <= slow) or tid in onset:
                continue
            # Kernel / BMC lines are placed on iterations by their own clock (or carry none):
            # they are judged by time.
            its = None if tid in data.job.system_templates else seen.get(tid)
            if its is not None:
                # (again and again on some node: one error that several files copy, a Ray
                # worker's traceback in its own file and in the driver's, each placed by its
                # own stream's last stamp, is one line in as many buckets)
                is_chronic = (
                    len(its) >= options.chronic_buckets
                    and min(its) <= cutoff
                    and max(c[0] for c in cells.values()) >= options.chronic_buckets
                )
            else:
                first = min(c[1] for c in cells.values())
                total = sum(c[0] for c in cells.values())
                is_chronic = (
                    cut_ts is not None and total >= options.chronic_buckets and first < cut_ts
                )
            if is_chronic:
                out[tid] = (options.chronic_factor, "chronic-before-failure")
    return out


def discounts(
    data: JobData,
    stragglers: StragglerResult | None,
    slowdown: Slowdown | None = None,
    events: tuple[EventStat, ...] = (),
    kept: frozenset[str] = frozenset(),
    options: AnalysisOptions = DEFAULT_OPTIONS,
    hardware: frozenset[str] = frozenset(),
) -> dict[str, tuple[float, str]]:
    """Evidence against events (see ``Fusion.fit``): chronic background, empty lines, reactions.

    *Chronic*: the template was printed in at least ``options.chronic_buckets`` iteration
    buckets and already ``options.chronic_lead`` buckets before the job's last one — corrected
    PCIe errors, power-cap and slow-dataloader warnings repeated for hours are background, not
    the failure.
    Lines without iteration (kernel logs) are chronic when printed at least that many times
    and first before that bucket started. A straggler's own slowdown lines are exempt, and so are
    the lines that start with a job-wide slowdown: they recur because the cause does.
    *Boilerplate*: see :func:`boilerplate`. *Low information*: a template with fewer than three
    words of text (``Last error:``, a stack frame); an empty one (a bare header) never counts.
    *Reaction*: see :func:`reactions` (of ``events``, judged against the ``kept`` errors; the
    ``hardware`` templates, whose words name a device's or a link's fault, are none: a second
    reporter of the fault the node's first error was, such as NCCL's "Got async event : port
    error" after the kernel's port event, or a line whose time is only the next stamp's).
    *Recovered*: see :func:`recovered`. The earlier reasons win where several apply.
    """
    out = chronic(data, stragglers, slowdown, options)
    for tid in boilerplate(data, options):
        out.setdefault(tid, (options.boilerplate_factor, "boilerplate-of-block"))
    for tid, info in data.templates.items():
        # The template text is authoritative once an exemplar was read: a bare header line
        # ("W0805 09:34:55.000000 55097 run.py:779] ") has an empty template, not its raw text.
        text = info.text if info.message else info.text or info.message
        if tid in out:
            continue
        if not text.strip():
            out[tid] = (0.0, "empty")
        elif len(_WORD.findall(_MASKS.sub(" ", text))) < 3:
            out[tid] = (options.low_information_factor, "low-information")
    for tid in reactions(data, events, kept, options) - hardware:
        out.setdefault(tid, (options.reaction_factor, "reaction-to-error"))
    for tid in recovered(data, events, stragglers, slowdown, options) | flapped(data, events):
        out.setdefault(tid, (options.recovered_factor, "recovered-before-failure"))
    return out


# A link's failure and the line that says it came back, as the driver or NCCL prints them
# (NCCL's IB async thread: IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE; the kernel's link
# state for a NIC): the device named the same way in both.
#: NCCL's IB async thread on its own HCA's port leaving ACTIVE (IBV_EVENT_PORT_ERR): the device.
PORT_ERROR = re.compile(r"NET/IB : (\S+) Got async event : port error")
_RECOVERIES = (
    (
        PORT_ERROR,
        re.compile(r"NET/IB : (\S+) Got async event : port active"),
    ),
    (
        re.compile(r"\b(\S+): (?:NIC )?[Ll]ink (?:is )?[Dd]own\b"),
        re.compile(r"\b(\S+): (?:NIC )?[Ll]ink (?:is )?[Uu]p\b"),
    ),
)


def flapped(data: JobData, events: tuple[EventStat, ...]) -> set[str]:
    """Link failures that came back: on every node that printed one, the same device said it
    was up again after it (``_RECOVERIES``), in a template of its own or in the same template
    (its lines, ``JobData.state_lines``). A link that flapped and recovered did not end the
    job; its neighbours' later errors have another cause."""
    out = _flapped_within(data, events)
    samples = {tid: f"{info.text}\n{info.message}" for tid, info in data.templates.items()}
    ups: list[tuple[int, str, str]] = []  # (pair, device, template)
    for tid, text in samples.items():
        for k, (_, up) in enumerate(_RECOVERIES):
            found = up.search(text)
            if found:
                ups.append((k, found.group(1), tid))
    if not ups:
        return out
    for e in events:
        text = samples.get(e.template_id, "")
        for k, (down, _) in enumerate(_RECOVERIES):
            found = down.search(text)
            if found is None:
                continue
            later = [tid for (j, device, tid) in ups if j == k and device == found.group(1)]
            if later and all(_came_back(data, node, e.template_id, later) for node in e.counts):
                out.add(e.template_id)
    return out


def _flapped_within(data: JobData, events: tuple[EventStat, ...]) -> set[str]:
    """Templates of both a link's failure and its return ("port <*>") whose last line on every
    node that printed them says the link is back."""
    seq: dict[tuple[str, str], list[str]] = {}
    for node, tid, line in data.state_lines:
        seq.setdefault((tid, node), []).append(line)
    out = set()
    for e in events:
        runs = [seq.get((e.template_id, n)) for n in e.counts]
        if not runs or any(not r for r in runs):
            continue
        if all(_back_at_last(r) for r in runs if r):
            out.add(e.template_id)
    return out


def _back_at_last(lines: list[str]) -> bool:
    """Whether a node's link-state lines went down and end up again."""
    for down, up in _RECOVERIES:
        if any(down.search(x) for x in lines) and up.search(lines[-1]):
            return True
    return False


def _came_back(data: JobData, node: str, down: str, ups: list[str]) -> bool:
    """Whether ``node`` printed one of the ``ups`` after its last ``down``."""
    last_down = data.cells[(node, down)].last_ts if (node, down) in data.cells else math.inf
    return any(
        (node, up) in data.cells and data.cells[(node, up)].last_ts >= last_down for up in ups
    )


def recovered(
    data: JobData,
    events: tuple[EventStat, ...],
    stragglers: StragglerResult | None,
    slowdown: Slowdown | None = None,
    options: AnalysisOptions = DEFAULT_OPTIONS,
) -> set[str]:
    """Warnings the job trained on past: one episode (all within
    ``options.reaction_max_seconds``), printed before the job's last ``options.chronic_lead``
    iteration buckets began, with iterations still coming after them.

    A link that flapped and came back ("port error", then "port active"), a retried allocation:
    the job went on for several buckets, so they are not what ended it. Errors are never
    discounted (a NaN the job logged and went on from is still a fault), nor a straggler's lines,
    nor anything in a job that slowed down (a GPU throttled for heat burns slowly), nor kernel
    and BMC lines (their clocks drift from the ranks'). Needs wall-clock times.
    """
    buckets = sorted(data.iteration_spans)
    if data.time_unit != "ts" or len(buckets) <= options.chronic_lead or slowdown is not None:
        # A job that slowed down did not train past its warnings at its own pace: one of them
        # (a GPU throttled for heat) may be the slow-burning cause.
        return set()
    cutoff = buckets[-1 - options.chronic_lead]
    starts = [t for (_, it), t in data.node_iteration_start.items() if it == cutoff]
    if not starts:
        return set()
    cut_ts = min(starts)
    slow = {s.node for s in stragglers.stragglers} if stragglers else set()
    out: set[str] = set()
    for e in events:
        tid = e.template_id
        if not is_flagged(e.level) or is_error(e.level):
            continue
        if tid in data.job.system_templates or (slow and set(e.counts) <= slow):
            continue
        cells = [data.cells[(n, tid)] for n in e.counts if (n, tid) in data.cells]
        first = min(c.first_ts for c in cells)
        last = max(c.last_ts for c in cells)
        # One episode (a flap and its recovery), not a condition that kept recurring.
        episode = last - first <= options.reaction_max_seconds
        if math.isfinite(last) and last < cut_ts and episode:
            out.add(tid)
    return out


def timed_in_stage(
    events: tuple[EventStat, ...], data: JobData, stage: str | None
) -> tuple[EventStat, ...]:
    """Events whose first occurrence is taken within the failing ``stage`` where they occur in it.

    The torchrun agent prints the same warning header at start-up and when it tears the job
    down; what matters for "which came first" near the failure is the occurrence in the stage
    the job failed in, not the one at start-up. Nodes that printed the template only outside
    that stage get the latest in-stage time, so they never make the event look earlier.
    """
    if stage is None or not data.stage_first:
        return events
    out = []
    for e in events:
        inside = {
            n: data.stage_first[(n, e.template_id, stage)]
            for n in e.first_seen
            if (n, e.template_id, stage) in data.stage_first
        }
        if not inside or inside == dict(e.first_seen):
            out.append(e)
            continue
        latest = max(inside.values())
        out.append(replace(e, first_seen={n: inside.get(n, latest) for n in e.first_seen}))
    return tuple(out)


def at_stage_start(
    events: tuple[EventStat, ...],
    data: JobData,
    stage: str | None,
    window: float,
    consequences: frozenset[str] = frozenset(),
) -> tuple[EventStat, ...]:
    """Errors printed in the moment the failing ``stage`` began belong to it.

    Streams interleave where a stage begins: a rank's traceback from its first step reaches
    the log just before the progress bar's first frame that marks training ("0%| | 0/1500"),
    so ingest tags it with the stage before. An error-level event whose every first occurrence
    lies within ``window`` (the fusion's root window) of its node's first line of ``stage``
    (on a node whose lines carry no time: the last line its node printed before that one)
    is taken as printed in it — unless its words are a consequence's (``consequences``: a
    watchdog's timeout just before the traceback of the save it waited in stays where it was)
    and the stage holds an error of its own that is not, or a stack that says where it stood
    (the save's frames waiting in its all-reduce): where the stage printed nothing but a
    consequence's words (a watchdog's timeout, then its boilerplate under the bar's first
    frame), the first of them is as much the stage's as the rest.
    """
    if stage is None:
        return events

    def own(e: EventStat) -> bool:
        if e.stage != stage or not is_error(e.level):
            return False
        info = data.templates.get(e.template_id)
        where = info is not None and FRAME.search(info.message) is not None
        return e.template_id not in consequences or where

    if not any(own(e) for e in events):
        consequences = frozenset()
    starts = {n: (t, p) for (n, s), (t, _, p, _) in data.stage_spans.items() if s == stage}
    printed: dict[str, list[float]] = {}  # each node's first positions, sorted (when needed)

    def at_start(e: EventStat, n: str, at: float) -> bool:
        if n not in starts:
            return False
        t, p = starts[n]
        if math.isfinite(t):
            return abs(at - t) <= window
        mine = e.positions.get(n, math.inf)
        if not mine < p:
            return False
        if not printed:
            for (node, _), cell in data.cells.items():
                printed.setdefault(node, []).append(cell.first_pos)
            for positions in printed.values():
                positions.sort()
        after = printed.get(n, [])
        i = bisect.bisect_right(after, mine)
        return i == len(after) or after[i] >= p

    out = []
    for e in events:
        if (
            e.stage not in (None, stage)
            and e.template_id not in consequences
            and is_error(e.level)
            and e.first_seen
            and all(at_start(e, n, at) for n, at in e.first_seen.items())
        ):
            e = replace(e, stage=stage)
        out.append(e)
    return tuple(out)


def reactions(
    data: JobData,
    events: tuple[EventStat, ...],
    kept: frozenset[str],
    options: AnalysisOptions = DEFAULT_OPTIONS,
) -> set[str]:
    """Lines a node prints in reaction to its own failure, not about it.

    When a worker dies, torchrun's agent on that node sends SIGTERM to the other local workers
    ("Sending process N closing signal SIGTERM") a moment later; Slurm says it waits for the job
    step to finish. Such a line is below ERROR level, printed by less than half of the nodes
    (a job-wide teardown is the cascade, reported as such), names no peer address (NCCL's "Got
    completion from peer <IP>" says where the failure is), and on every node that printed it
    first came ``options.reaction_min_seconds`` to ``options.reaction_max_seconds`` seconds
    after that node's first error (of the events cross-job filtering kept). A root cause's
    warning comes before the errors it causes, and a line of the same error block (same second)
    is not a reaction. Needs wall-clock times.
    """
    if data.time_unit != "ts":
        return set()
    n_nodes = max(len(data.nodes), 1)
    first_error: dict[str, float] = {}
    for e in events:
        if e.template_id in kept and is_error(e.level):
            for node, t in e.first_seen.items():
                first_error[node] = min(first_error.get(node, math.inf), t)
    out: set[str] = set()
    for e in events:
        if e.template_id not in kept or is_error(e.level) or not e.first_seen:
            continue
        info = data.templates.get(e.template_id)
        if len(e.first_seen) >= 0.5 * n_nodes or (info is not None and "<IP>" in info.text):
            continue
        if all(
            node in first_error
            and first_error[node] + options.reaction_min_seconds
            < t
            <= first_error[node] + options.reaction_max_seconds
            for node, t in e.first_seen.items()
        ):
            out.add(e.template_id)
    return out


def record_terms(data: JobData, lexicon: Lexicon) -> dict[str, Term]:
    """Each template's words, where the failure lexicon knows them: those of the template and
    of its exemplar record (:meth:`~l4_plugin.analysis.lexicon.Lexicon.classify_record`), or
    of another node's copy that names a cause where the exemplar names a consequence
    (``JobData.variants``), read once for every use below. NCCL's warning just before torch's
    NCCL error (``nccl_details``) has the error's words where it has none of its own."""
    out = {}
    for tid, info in data.templates.items():
        term = lexicon.classify_record(f"{info.text}\n{info.message.strip()}")
        for variant in data.variants.get(tid, ()):
            # A copy that names a cause where the exemplar is a consequence: the template is
            # the cause's too (its other copies are what followed).
            other = lexicon.classify_record(f"{info.text}\n{variant.strip()}")
            weak = term is None or term.cascade or not term.says_cause
            if weak and other is not None and other.says_cause and not other.cascade:
                term = other
        if term is not None:
            out[tid] = term
    for warn, error in nccl_details(data, lexicon).items():
        if warn not in out and error in out:
            out[warn] = out[error]
    return out


def teardown(terms: Mapping[str, Term]) -> frozenset[str]:
    """Templates whose words (``record_terms``) are the software's reaction that means nothing
    alone: a launcher tearing the job down, an agent copying a worker's error (not a timeout,
    which is what a hung node did when it is the culprit's own, nor a device's or a link's
    consequence, which still happened on it)."""
    return frozenset(
        tid
        for tid, term in terms.items()
        if term.cascade and term.alone is None and not term.category.startswith("hardware/")
    )


def named_causes(terms: Mapping[str, Term]) -> dict[str, float]:
    """Templates whose words (``record_terms``) the lexicon names a cause by (not a
    consequence, not background), with the weight of its words: between lines the
    comparisons score alike, the one that says what happened ("OSError: [Errno 28] No space
    left on device", 0.95) before one that says only its exception's class ("RuntimeError:
    … unexpected pos 1580172082 vs 3189773315", 0.5) or nothing the lexicon knows."""
    return {t: term.weight for t, term in terms.items() if not term.cascade and not term.benign}


def telling_consequences(terms: Mapping[str, Term]) -> dict[str, float]:
    """Templates whose words (``record_terms``) are a consequence's, with their weight: of a
    moment's consequences, the one that says most first (the watchdog's timeout of a named
    collective, "WorkNCCL(SeqNum=923, OpType=REDUCE…)", before "Some NCCL operations have
    failed" and std::terminate's banner)."""
    return {t: term.weight for t, term in terms.items() if term.cascade}


def lexicon_priors(
    terms: Mapping[str, Term], options: AnalysisOptions = DEFAULT_OPTIONS
) -> tuple[dict[str, tuple[float, str]], dict[str, tuple[float, str]]]:
    """(priors, ordering) of the job's templates from their words (``record_terms``): evidence
    for a line naming a known failure, and the factor that ranks a consequence's words later."""
    priors: dict[str, tuple[float, str]] = {}
    against: dict[str, tuple[float, str]] = {}
    for tid, term in terms.items():
        if term.cascade:
            against[tid] = (options.cascade_words_factor, "consequence-words")
        elif term.benign:
            against[tid] = (options.benign_words_factor, "benign-words")
        else:
            priors[tid] = (options.prior_weight * term.weight, f"failure-words:{term.category}")
    return priors, against


#: What a node's kernel says when it kills a process (the OOM killer).
KERNEL_KILL = re.compile(r"Killed process (?:\d+|<NUM>)|oom-kill:|invoked oom-killer")
#: A program's report that a process was killed outright (SIGKILL): a launcher agent's exit
#: code, a DataLoader's dead worker.
_KILLED = re.compile(
    r"exitcode\s*:\s*-9\b|Signal 9 \(SIGKILL\)|killed by signal: Killed\b|\bKilled\b$", re.M
)


def killed_on(data: JobData) -> set[str]:
    """Nodes whose kernel reports killing a process (``KERNEL_KILL``)."""
    killing = {
        tid
        for tid in data.job.system_templates
        if (info := data.templates.get(tid)) is not None and KERNEL_KILL.search(info.text)
    }
    return {node for node, tid in data.cells if tid in killing}


def symptoms(
    data: JobData, terms: Mapping[str, Term], options: AnalysisOptions = DEFAULT_OPTIONS
) -> dict[str, tuple[float, str]]:
    """Ordering factors for the programs' reports of a fault that a node's system log (kernel,
    driver) reported itself: each such template, by ``symptom_factor``, where one of its nodes
    has a system-log template of the same category (an Xid and CUDA's error), or killed a
    process that the program reports killed (the kernel's OOM kill and the agent's "exitcode:
    -9"). The scheduler's own reason (``decisive`` words: "CANCELLED … DUE TO NODE FAILURE",
    which slurmstepd prints on every node left) speaks of the job: it is the symptom of any
    node's system log that said so first (a machine check, a panic)."""
    system = data.job.system_templates
    said: dict[str, dict[str, float]] = {}  # node -> categories its system log named, when
    for (node, tid), cell in data.cells.items():
        term = terms.get(tid)
        if tid in system and term is not None and term.says_cause:
            # (a kernel log with no wall-clock time said it no later than anybody could tell)
            at = cell.first_ts if math.isfinite(cell.first_ts) else -math.inf
            named = said.setdefault(node, {})
            named[term.category] = min(named.get(term.category, math.inf), at)
    killing = killed_on(data)
    out: dict[str, tuple[float, str]] = {}
    for (node, tid), cell in data.cells.items():
        term = terms.get(tid)
        if tid in system or term is None or not term.says_cause:
            continue
        info = data.templates.get(tid)
        killed = (
            node in killing and info is not None and _KILLED.search(f"{info.text}\n{info.message}")
        )
        if term.category in said.get(node, ()) or killed:
            out[tid] = (options.symptom_factor, f"symptom-of-system-log:{node}")
        elif term.decisive:
            first = sorted(
                (when, other)
                for other, named in said.items()
                if (when := named.get(term.category)) is not None and not when > cell.first_ts
            )
            if first:
                out[tid] = (options.symptom_factor, f"symptom-of-system-log:{first[0][1]}")
    return out
