"""The parameters of one diagnosis: every tuning constant of the analysis, named in one place.

:class:`AnalysisOptions` is the single object the recipe (:mod:`l4_plugin.analysis.recipe`) and
the evidence heuristics (:mod:`l4_plugin.analysis.evidence`) read; its defaults are the evaluated
values. The CLI and the service build it (flags, and later the settings file's ``analysis:``
section); nothing in the analysis keeps a tuning constant of its own outside the estimators'
hyper-parameters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AnalysisOptions:
    """Hyper-parameters of one diagnosis (defaults are the evaluated ones).

    ``crossjob`` False skips cross-job filtering (the ablation); ``spatial_method`` is
    ``combined`` or ``iforest`` (the paper's plain forest); ``dtw_backend`` ``numpy`` or
    ``tslearn``; ``filter_threshold`` is the fraction of baseline jobs a template must appear in
    to be normal. The fields after ``max_events`` tune the evidence heuristics; each is described
    where it is declared.
    """

    crossjob: bool = True
    filter_threshold: float = 0.5
    spatial_method: str = "combined"
    dtw_backend: str = "numpy"
    window: int = 10
    sigma: float = 3.0
    random_state: int = 0
    max_events: int = 20
    # Templates the spatial analysis lists per node as what sets it apart.
    n_attributions: int = 12
    # Kernel and BMC clocks tick in whole seconds and drift from the ranks' clocks: "at the same
    # moment" (the fusion's earliest evidence) is this many seconds wide.
    root_window: float = 5.0
    # Below this many exact (one-iteration) buckets the coarse early buckets are analysed too.
    min_exact_iterations: int = 8
    # A recurring event counts as chronic (benign background) when it was already printed
    # ``chronic_lead`` iteration buckets before the job's last one, in at least
    # ``chronic_buckets`` buckets; its score is then scaled by ``chronic_factor``.
    chronic_lead: int = 3
    chronic_buckets: int = 3
    chronic_factor: float = 0.35
    # A template of fewer than three words of text.
    low_information_factor: float = 0.3
    # Explanatory prose printed within ``block_seconds`` of a factual line of the same block.
    boilerplate_factor: float = 0.4
    block_seconds: float = 2.0
    # A line a node prints ``reaction_min_seconds`` (later than its own error block) to
    # ``reaction_max_seconds`` after its first error.
    reaction_factor: float = 0.4
    # A warning last printed before the job's last ``chronic_lead`` iteration buckets, which
    # the job trained on past (a link that flapped and came back).
    recovered_factor: float = 0.5
    reaction_min_seconds: float = 0.5
    reaction_max_seconds: float = 60.0
    # A node that printed an error of its own this close to its last line died loudly: it
    # stopped, but it is not what "silent" warns of (a hung or dead rank that prints nothing).
    loud_end_seconds: float = 60.0
    # Score of a silent node its peers name, times the share of witnesses naming it.
    named_silent_score: float = 0.9
    # With nothing to compare with, a line naming a known failure (weight w in the lexicon) gets
    # w × ``prior_weight``. A consequence's words (a watchdog timeout, the launcher's teardown)
    # and a handled condition's (corrected, a software power cap) rank the line later by these
    # factors, with or without a baseline.
    prior_weight: float = 0.6
    cascade_words_factor: float = 0.5
    benign_words_factor: float = 0.5
    # An application's error naming a hardware fault that the node's kernel or driver reported
    # too (a CUDA ECC error beside Xid 48, an I/O error beside a Lustre eviction) ranks after
    # that report by this factor: the system log says what the device did, the program what it
    # saw of it (and the kernel's lines often carry no wall-clock time to be first by).
    symptom_factor: float = 0.8
    # The window around a job-wide slowdown's onset in which a kernel or BMC line (no iteration
    # of its own) starts with it: from ``slowdown_lead_seconds`` before the onset bucket's start
    # to ``slowdown_tail_seconds`` after the end of the bucket after it.
    slowdown_lead_seconds: float = 30.0
    slowdown_tail_seconds: float = 120.0


DEFAULT_OPTIONS = AnalysisOptions()
