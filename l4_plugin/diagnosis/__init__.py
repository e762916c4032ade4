"""Diagnose one job that is in the cluster: rules, analyses, verdict, report, annotations.

``steps.diagnose`` runs one diagnosis (ARCHITECTURE.md, *The path of one diagnosis*) and
``steps.diagnose_job`` one of a job named by id; ``preparation`` ingests job directories first for
``l4 diagnose DIR``; ``pool`` resolves the baseline pool; ``queries`` reads the cluster,
``assembly`` builds the report, ``storage`` writes it back and reads it again.
"""

from __future__ import annotations

from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.diagnosis.assembly import Diagnosis
from l4_plugin.diagnosis.pool import find_pool, resolve_pool
from l4_plugin.diagnosis.steps import ANALYZER_VERSION, diagnose, diagnose_job
from l4_plugin.diagnosis.storage import load_summary

__all__ = [
    "ANALYZER_VERSION",
    "AnalysisOptions",
    "Diagnosis",
    "diagnose",
    "diagnose_job",
    "find_pool",
    "load_summary",
    "resolve_pool",
]
