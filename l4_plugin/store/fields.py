"""Every ``l4.*`` field name of the documents L4 keeps in the cluster, spelled once.

The indices' mappings are the data files of ``ingest/index_templates/``; this module is the code's
side of the same contract. Any module that reads or writes a document field names it through these
constants (``from l4_plugin.store import fields as F``; ``F.JOB_ID``), and ``tests/unit`` fails if
an ``l4.*`` literal appears anywhere else in ``l4_plugin`` or if a name here is not mapped. ECS
fields (``@timestamp``, ``host.name``, ``message``, ``log.level``) keep their ECS spelling where
they are used. Prefixes (``ROOT``, ``RULE``, ``ANALYSIS``) are for the few writers that build a
name from a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROOT = "l4"

# --- shared by several indices ---------------------------------------------------------------
JOB_ID = "l4.job.id"
TEMPLATE_ID = "l4.template.id"
TEMPLATE_TEXT = "l4.template.text"
STAGE = "l4.stage"
ITERATION = "l4.iteration"
GENERATION = "l4.generation"  # the ingest generation a rollup or line belongs to
ATTEMPT = "l4.attempt"  # the attempt of a restarted job a rollup or line belongs to

# --- l4-events: one rollup per job x node x template x stage x iteration bucket ----------------
COUNT = "l4.count"
FIRST_TS = "l4.first_ts"
LAST_TS = "l4.last_ts"
FIRST_POS = "l4.first_pos"
LAST_POS = "l4.last_pos"
RANKS = "l4.ranks"
BUCKET = "l4.bucket"
ITERATION_SPAN = "l4.iteration_span"
ITERATION_SECONDS = "l4.iteration_seconds"
COUNT_ALL = "l4.count_all"  # the job-wide count: l4.count x l4.nodes on a pack
NODES = "l4.nodes"  # on a pack only (store/packs.py): how many nodes it stands for
PACK = "l4.pack"  # on a pack only: each node's own values (stored, not indexed)

# --- l4-lines: kept raw lines -------------------------------------------------------------------
RANK = "l4.rank"
LINE = "l4.line"
FLAGS = "l4.flags"
FOLDED = "l4.folded"  # lines of other ranks this line stands for (pipeline._fold_ranks)
UNTIL = "l4.until"  # when the last of them was printed, if later than this line

# --- l4-templates ---------------------------------------------------------------------------------
TEMPLATE_FIRST_JOB = "l4.template.first_job"
TEMPLATE_LEVEL = "l4.template.level"
TEMPLATE_OCCURRENCES = "l4.template.occurrences"

# --- l4-jobs: what the job is ---------------------------------------------------------------------
JOB_STATUS = "l4.job.status"
JOB_FINGERPRINT = "l4.job.fingerprint"
JOB_SOURCE = "l4.job.source"
JOB_CONFIG = "l4.job.config"
JOB_NODES = "l4.job.nodes"
JOB_PROGRESS_NODES = "l4.job.progress_nodes"
JOB_NODE_COUNT = "l4.job.node_count"
JOB_RANKS = "l4.job.ranks"
JOB_LINES = "l4.job.lines"
JOB_ITERATIONS = "l4.job.iterations"
JOB_TEMPLATE_STATS = "l4.job.template_stats"
JOB_SYSTEM_LOGS = "l4.job.system_logs"
JOB_SYSTEM_TEMPLATES = "l4.job.system_templates"
JOB_AUX_TEMPLATES = "l4.job.aux_templates"
JOB_SKIPPED_FILES = "l4.job.skipped_files"
JOB_CUT_FILES = "l4.job.cut_files"
JOB_START_TS = "l4.job.start_ts"
JOB_END_TS = "l4.job.end_ts"
JOB_REGISTERED = "l4.job.registered"
JOB_DUMPS = "l4.job.dumps"  # Flight Recorder traces and py-spy stacks (stored, not indexed)
JOB_ATTEMPTS = "l4.job.attempts"  # a restarted job's attempts: nodes, time span (not indexed)

# --- l4-jobs: the ingest's state (generations, progress) ---------------------------------------
INGEST_STATE = "l4.ingest.state"
INGEST_UPDATED = "l4.ingest.updated"
INGEST_FILES = "l4.ingest.files"
INGEST_GENERATION = "l4.ingest.generation"
INGEST_PROBLEMS = "l4.ingest.problems"
INGEST_SOURCE = "l4.ingest.source"
INGEST_SEQUENCE = "l4.ingest.sequence"
INGEST_STARTED = "l4.ingest.started"
INGEST_EVENTS_DOCS = "l4.ingest.events_docs"
INGEST_LINES_DOCS = "l4.ingest.lines_docs"
INGEST_WRITING = "l4.ingest.writing"  # object: generation, started, files, owner
INGEST_PROGRESS = "l4.ingest.progress"  # object: files_done, lines, bytes_done, rate, eta …

# --- l4-jobs: the service's claim on the analysis ---------------------------------------------
ANALYSIS = "l4.analysis"
ANALYSIS_STATE = "l4.analysis.state"
ANALYSIS_VERSION = "l4.analysis.version"
ANALYSIS_CLAIMED_BY = "l4.analysis.claimed_by"
ANALYSIS_LEASE_UNTIL = "l4.analysis.lease_until"
ANALYSIS_ATTEMPTS = "l4.analysis.attempts"
ANALYSIS_ERROR = "l4.analysis.error"
ANALYSIS_UPDATED = "l4.analysis.updated"
ANALYSIS_WATCH_CHECKPOINT = "l4.analysis.watch_checkpoint"

# --- l4-jobs: retention -------------------------------------------------------------------------
RETENTION_PURGED = "l4.retention.purged"
RETENTION_DELETED_DOCS = "l4.retention.deleted_docs"

# --- l4-annotations: what a diagnosis writes back ----------------------------------------------
ANNOTATION_KIND = "l4.annotation.kind"
ANNOTATION_KEY = "l4.annotation.key"
ANNOTATION_SCORE = "l4.annotation.score"
ANNOTATION_RANK = "l4.annotation.rank"
ANNOTATION_REASONS = "l4.annotation.reasons"
ANNOTATION_NODES = "l4.annotation.nodes"
ANNOTATION_DISCOVER_URL = "l4.annotation.discover_url"
ANNOTATION_DETAILS = "l4.annotation.details"
ANALYZER_VERSION = "l4.analyzer.version"
REVIEW_STATE = "l4.review.state"
RULE = "l4.rule"
RULE_ID = "l4.rule.id"
RULE_TITLE = "l4.rule.title"
RULE_CATEGORY = "l4.rule.category"
RULE_SEVERITY = "l4.rule.severity"


def source_field(source: Mapping[str, Any], name: str) -> Any:
    """A field of a ``_source``, written with dotted keys (as L4 writes) or as nested objects."""
    if name in source:
        return source[name]
    node: Any = source
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node
