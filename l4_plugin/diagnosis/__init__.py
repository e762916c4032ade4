"""Diagnose one job that is in the cluster: rules, analyses, verdict, report, annotations.

``steps.diagnose_job`` runs one diagnosis (ARCHITECTURE.md, *The path of one diagnosis*);
``preparation`` ingests job directories first for ``l4 diagnose DIR``; ``queries`` reads the
cluster, ``assembly`` builds the report, ``annotations`` writes it back and reads it again.
"""

from __future__ import annotations

from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.diagnosis.annotations import load_summary
from l4_plugin.diagnosis.assembly import Diagnosis
from l4_plugin.diagnosis.steps import ANALYZER_VERSION, diagnose_job, resolve_baselines

__all__ = [
    "ANALYZER_VERSION",
    "AnalysisOptions",
    "Diagnosis",
    "diagnose_job",
    "load_summary",
    "resolve_baselines",
]
