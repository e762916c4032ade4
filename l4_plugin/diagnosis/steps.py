"""The steps of one diagnosis of a job in the cluster: rules, analyses, verdict, report.

ARCHITECTURE.md, *The path of one diagnosis*, draws the whole path. ``diagnose`` takes the job's
``l4-jobs`` document and its baseline pool as read once by the caller (``l4 diagnose DIR``:
``preparation``; ``l4 analyze`` and the service: ``diagnose_job``) and never reads them again:

1. read the job's aggregated tables and the pool's statistics (``queries``);
2. match the fault library (``l4_plugin.rules.match_job``), first, as the paper's deployment does;
3. run the analyses and fuse them (``analysis.recipe.analyze``);
4. fetch one sample line per leading event;
5. decide the verdict (category, blame, evict, restart) on the events as the report shows them;
6. build the report, the HTML extras and the findings (``assembly``);
7. write the findings to ``l4-annotations`` with deterministic ids, remove the job's annotations
   that this run no longer produces, and record the analysis on the job's ``l4-jobs`` document.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from l4_plugin import __version__
from l4_plugin.analysis.attempts import AcrossAttempts, AttemptOutcome, across
from l4_plugin.analysis.evidence import divergent_copies
from l4_plugin.analysis.lexicon import default_lexicon
from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.analysis.recipe import Analysis, analyze
from l4_plugin.analysis.tables import JobData
from l4_plugin.diagnosis.assembly import (
    Diagnosis,
    build_extras,
    build_report,
    decide_verdict,
    decided,
    findings,
    report_events,
)
from l4_plugin.diagnosis.attempts import outcome, silent_outcome, with_attempts
from l4_plugin.diagnosis.pool import Warn, find_pool
from l4_plugin.diagnosis.queries import (
    JobDoc,
    attempt_job,
    find_sample_lines,
    job_scope,
    read_baseline_pool,
    read_job,
    read_job_tables,
    with_aliases,
)
from l4_plugin.diagnosis.storage import write_diagnosis
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.rules import Rule, load_rules, match_job
from l4_plugin.store import Store

ANALYZER_VERSION = f"l4-{__version__}"


def says_cause(message: str) -> bool:
    """False when the failure lexicon reads the line as a consequence or a handled condition."""
    term = default_lexicon().classify_record(message)
    return term is None or term.says_cause


# The last stretch of a job, where it failed: a sample line from it is preferred
# (find_sample_lines).
RECENT_SECONDS = 3600.0
Step = Callable[[str], None]
Discover = Callable[[str, str | None, float | None], str | None]


def _sample_lines(store: Store, data: JobData, result: Analysis) -> dict[str, dict[str, Any]]:
    """One telling line per leading event, from the most suspect nodes and the last hour first;
    of a collective's timeouts where one rank was in another collective, that rank's
    (``divergent_copies``)."""
    found = find_sample_lines(
        store,
        data.job,
        [e.template_id for e in result.fusion.events],
        [n.node for n in result.fusion.nodes[:5]],
        recent_from=data.job.end_ts - RECENT_SECONDS if data.job.end_ts else None,
        telling=says_cause,
    )
    for tid, copy in divergent_copies(data).items():
        found[tid] = {"message": copy}  # (which node printed it, the variants do not keep)
    return found


def _each_attempt(
    store: Store,
    data: JobData,
    analysed: Callable[[JobData], Analysis],
    baseline_jobs: list[str],
) -> tuple[JobData, Analysis, tuple[AcrossAttempts, list[AttemptOutcome]]]:
    """Each attempt of a restarted job analysed on its own documents; the lead attempt's tables
    and analysis (what the report is made of) and the reading across attempts."""
    done: dict[int, tuple[JobData, Analysis]] = {}
    outcomes = []
    for span in data.job.attempts:
        narrowed = attempt_job(data.job, span.attempt)
        if not store.count(store.names.events, job_scope(narrowed)):
            # An attempt whose workers died before printing a line: listed, not analysed.
            outcomes.append(silent_outcome(narrowed))
            continue
        mine = read_job_tables(store, narrowed)
        result = analysed(mine)
        done[span.attempt] = (mine, result)
        events = report_events(mine, result, {})
        brief = build_report(
            mine,
            result,
            events,
            decide_verdict(mine, result, events, []),
            baseline_jobs=baseline_jobs,
            rule_matches=[],
            analyzer_version=ANALYZER_VERSION,
        )
        outcomes.append(outcome(mine, result, brief))
    found = across(outcomes)
    assert found is not None  # two attempts, one of them with lines (the job has some)
    return *done[found.lead], (found, outcomes)


def diagnose(
    store: Store,
    job: JobDoc,
    pool: Sequence[JobDoc],
    *,
    options: AnalysisOptions | None = None,
    rules: Sequence[Rule] | None = None,
    write: bool = True,
    discover: Discover | None = None,
    step: Step | None = None,
    warn: Warn | None = None,
) -> Diagnosis:
    """Diagnose ``job`` against its baseline ``pool`` (see the module docstring) and return it.

    ``rules`` defaults to the shipped library (``[]``: no matching); ``write`` False leaves the
    cluster untouched; ``discover(job_id, node, ts)`` builds a Discover link for an annotation;
    ``step`` is told the name of each step as it starts. A restarted job: each attempt analysed
    on its own, the report made of the lead attempt's."""
    options = options or AnalysisOptions()
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        if step:
            step(name)
        started = time.monotonic()
        value = fn()
        timings[name] = time.monotonic() - started
        return value

    data = timed("read aggregations", lambda: read_job_tables(store, job))
    baseline = timed("read baseline pool", lambda: read_baseline_pool(store, pool))
    baseline = with_aliases(baseline, data)

    def analysed(d: JobData) -> Analysis:
        return analyze(d, baseline, options, stages=default_stage_rules())

    across_attempts: tuple[AcrossAttempts, list[AttemptOutcome]] | None
    result, across_attempts = None, None
    if len(job.attempts) >= 2:
        data, result, across_attempts = timed(
            "diagnose each attempt",
            lambda: _each_attempt(store, data, analysed, [j.id for j in pool]),
        )
    library = load_rules() if rules is None else list(rules)
    matches = timed(
        "match fault rules",
        lambda: match_job(store, job.id, library, scope=job_scope(job), nodes=job.nodes),
    )
    if result is None:
        result = timed("analyse", lambda: analysed(data))
    samples = timed("fetch sample lines", lambda: _sample_lines(store, data, result))
    verdict, events = timed("decide verdict", lambda: decided(data, result, samples, matches))
    report = build_report(
        data,
        result,
        events,
        verdict,
        baseline_jobs=[j.id for j in pool],
        rule_matches=matches,
        analyzer_version=ANALYZER_VERSION,
        timings=timings,
    )
    report = with_attempts(report, *across_attempts) if across_attempts else report
    diagnosis = Diagnosis(
        job=job,
        report=report,
        extras=build_extras(data, result, timings),
        findings=tuple(findings(report, matches)),
        template_texts={tid: info.text for tid, info in data.templates.items()},
    )
    if write:
        timed(
            "write annotations",
            lambda: write_diagnosis(
                store, diagnosis, matches, analyzer_version=ANALYZER_VERSION, discover=discover
            ),
        )
    if not report.events and not matches and result.fusion.no_baseline and warn:
        warn(f"job {job.id}: nothing stands out (no baseline, no rule match, no outlier)")
    return diagnosis


def diagnose_job(
    store: Store,
    job_id: str,
    *,
    baselines: Sequence[str] = (),
    force_baselines: bool = False,
    options: AnalysisOptions | None = None,
    rules: Sequence[Rule] | None = None,
    write: bool = True,
    discover: Discover | None = None,
    step: Step | None = None,
    warn: Warn | None = None,
) -> Diagnosis:
    """:func:`diagnose` of a job already in the cluster, named by id (``l4 analyze``, the
    service): its document and those of the ``baselines`` named are read once each, the pool
    resolved once (``pool.find_pool``). ``AnalysisError`` when one of them is not there."""
    job = read_job(store, job_id)
    named = [read_job(store, b) for b in baselines]
    pool = find_pool(store, job.id, job.fingerprint, named, force=force_baselines, warn=warn)
    return diagnose(
        store,
        job,
        pool,
        options=options,
        rules=rules,
        write=write,
        discover=discover,
        step=step,
        warn=warn,
    )
