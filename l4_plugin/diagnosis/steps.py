"""The steps of one diagnosis of a job in the cluster: rules, analyses, report, annotations.

ARCHITECTURE.md, *The path of one diagnosis*, draws the whole path.

``diagnose_job(store, job_id)`` is what ``l4 diagnose`` / ``l4 analyze`` and the service run:

1. read the job's aggregated tables (``queries.read_job_tables``) and find its baseline pool —
   successful jobs with the same configuration fingerprint, plus any named explicitly;
2. match the fault library (``l4_plugin.rules.match_job``), first, as the paper's deployment does;
3. run the analyses and fuse them (``analysis.recipe.analyze``);
4. build the §6 report, the HTML extras and the findings (``assembly``);
5. write the findings to ``l4-annotations`` with deterministic ids, remove the job's annotations
   that this run no longer produces, and record the analysis on the job's ``l4-jobs`` document.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from l4_plugin import __version__
from l4_plugin.analysis.attempts import AcrossAttempts, AttemptOutcome, across
from l4_plugin.analysis.lexicon import default_lexicon
from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.analysis.recipe import Analysis, analyze
from l4_plugin.analysis.tables import JobData
from l4_plugin.diagnosis.annotations import write_annotations
from l4_plugin.diagnosis.assembly import (
    Diagnosis,
    build_extras,
    build_report,
    findings,
)
from l4_plugin.diagnosis.attempts import outcome, silent_outcome, with_attempts
from l4_plugin.diagnosis.queries import (
    JobDoc,
    attempt_job,
    find_jobs,
    find_sample_lines,
    job_scope,
    read_baseline_pool,
    read_job,
    read_job_tables,
    read_tables,
)
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


def resolve_baselines(
    store: Store,
    job: JobDoc,
    extra: Sequence[str] = (),
    *,
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> list[JobDoc]:
    """The baseline pool of ``job``: succeeded jobs of its fingerprint plus ``extra`` job ids.

    An explicit baseline with another fingerprint is left out with a warning unless ``force``;
    one that is not in the cluster is an ``AnalysisError``.
    """
    pool = {j.id: j for j in find_jobs(store, fingerprint=job.fingerprint, status="succeeded")}
    for job_id in extra:
        other = read_job(store, job_id)
        if other.fingerprint != job.fingerprint and not force:
            if warn:
                warn(
                    f"baseline {other.id} has configuration fingerprint {other.fingerprint}, "
                    f"not {job.fingerprint} like {job.id}: left out (use --force-baseline)"
                )
            continue
        pool[other.id] = other
    pool.pop(job.id, None)
    return [pool[k] for k in sorted(pool)]


def _sample_lines(store: Store, data: JobData, result: Analysis) -> dict[str, dict[str, Any]]:
    """One telling line per leading event, from the most suspect nodes and the last hour first."""
    return find_sample_lines(
        store,
        data.job,
        [e.template_id for e in result.fusion.events],
        [n.node for n in result.fusion.nodes[:5]],
        recent_from=data.job.end_ts - RECENT_SECONDS if data.job.end_ts else None,
        telling=says_cause,
    )


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
        mine = read_tables(store, narrowed)
        result = analysed(mine)
        done[span.attempt] = (mine, result)
        brief = build_report(
            mine,
            result,
            baseline_jobs=baseline_jobs,
            rule_matches=[],
            samples={},
            analyzer_version=ANALYZER_VERSION,
        )
        outcomes.append(outcome(mine, result, brief))
    found = across(outcomes)
    assert found is not None  # two attempts, one of them with lines (the job has some)
    return *done[found.lead], (found, outcomes)


def diagnose_job(
    store: Store,
    job_id: str,
    *,
    options: AnalysisOptions | None = None,
    baselines: Sequence[str] = (),
    force_baselines: bool = False,
    rules: Sequence[Rule] | None = None,
    write: bool = True,
    discover: Callable[[str, str | None, float | None], str | None] | None = None,
    step: Step | None = None,
    warn: Callable[[str], None] | None = None,
) -> Diagnosis:
    """Diagnose a job already in the cluster (see the module docstring) and return it.

    ``rules`` defaults to the shipped library (give ``[]`` to skip matching); ``write`` False
    leaves the cluster untouched; ``discover(job_id, node, ts)`` builds a Discover link for an
    annotation; ``step`` is told the name of each step as it starts.
    """
    options = options or AnalysisOptions()
    timings: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        if step:
            step(name)
        started = time.monotonic()
        value = fn()
        timings[name] = time.monotonic() - started
        return value

    data = timed("read aggregations", lambda: read_job_tables(store, job_id))
    base_jobs = resolve_baselines(store, data.job, baselines, force=force_baselines, warn=warn)
    pool = timed("read baseline pool", lambda: read_baseline_pool(store, base_jobs))
    stage_of_stack = default_stage_rules().stage_of_stack

    def analysed(d: JobData) -> Analysis:
        return analyze(d, pool, options, stage_of_stack=stage_of_stack)

    across_attempts: tuple[AcrossAttempts, list[AttemptOutcome]] | None = None
    result: Analysis | None = None
    if len(data.job.attempts) >= 2:
        data, result, across_attempts = timed(
            "diagnose each attempt",
            lambda: _each_attempt(store, data, analysed, [j.id for j in base_jobs]),
        )
    library = load_rules() if rules is None else list(rules)
    matches = timed(
        "match fault rules", lambda: match_job(store, job_id, library, scope=job_scope(data.job))
    )
    if result is None:
        result = timed("analyse", lambda: analysed(data))
    samples = timed("fetch sample lines", lambda: _sample_lines(store, data, result))
    report = build_report(
        data,
        result,
        baseline_jobs=[j.id for j in base_jobs],
        rule_matches=matches,
        samples=samples,
        analyzer_version=ANALYZER_VERSION,
        timings=timings,
    )
    if across_attempts is not None:
        report = with_attempts(report, *across_attempts)
    extras = build_extras(data, result, timings)
    texts = {tid: info.text for tid, info in data.templates.items()}
    diagnosis = Diagnosis(
        job=data.job,
        report=report,
        extras=extras,
        findings=tuple(findings(report, matches)),
        template_texts=texts,
    )
    if write:
        timed(
            "write annotations",
            lambda: write_annotations(
                store, diagnosis, matches, analyzer_version=ANALYZER_VERSION, discover=discover
            ),
        )
    if not report.events and not matches and result.fusion.no_baseline and warn:
        warn(f"job {job_id}: nothing stands out (no baseline, no rule match, no outlier)")
    return diagnosis
