"""Cross-job filtering (paper §5.2): drop what successful runs of the same configuration print too.

The paper drops every event of the failed job that is frequent in the normal pool built from
historical successful jobs. Two refinements keep the rule from eating the evidence:

* *frequent*, not *present*: a template seen in fewer than ``threshold`` of the baseline jobs (or in
  fewer than ``min_baselines`` of them) is kept as ``rare-in-baseline`` — failure messages such as
  an occasional NCCL retry do show up once in a healthy run, and "present anywhere → drop" loses
  them;
* *bursts*: a template that is frequent in the baselines is still kept (``burst-vs-baseline``) when
  its per-node rate in the failed job is at least ``burst_factor`` times the baseline rate and it
  occurred at least ``min_burst_count`` times — a warning every healthy run prints twice that the
  failed job prints ten thousand times is the failure, not noise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from l4_plugin.analysis.results import (
    BaselineStat,
    DroppedTemplate,
    FilterResult,
    JobTemplateStat,
    KeptTemplate,
)
from l4_plugin.errors import AnalysisError


class CrossJobFilter:
    """Keeps the failed job's templates that the successful baseline jobs do not explain.

    ``threshold`` is the fraction of baseline jobs a template must appear in to count as normal;
    ``min_baselines`` the minimum number of such jobs; ``burst_factor`` and ``min_burst_count``
    define a burst of a normal template (see the module docstring). With no baseline job at all
    everything is kept and :attr:`FilterResult.no_baseline` is true.
    """

    def __init__(
        self,
        threshold: float = 0.5,
        min_baselines: int = 1,
        burst_factor: float = 10.0,
        min_burst_count: int = 5,
    ) -> None:
        self.threshold = threshold
        self.min_baselines = min_baselines
        self.burst_factor = burst_factor
        self.min_burst_count = min_burst_count

    def _check_params(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise AnalysisError(
                f"cross-job filter: threshold must be in (0, 1], got {self.threshold!r}"
            )
        if self.min_baselines < 1:
            raise AnalysisError(
                f"cross-job filter: min_baselines must be >= 1, got {self.min_baselines!r}"
            )
        if not self.burst_factor > 1.0:
            raise AnalysisError(
                f"cross-job filter: burst_factor must be > 1, got {self.burst_factor!r}"
            )

    def fit(
        self, baseline_counts: Mapping[str, BaselineStat], n_baseline_jobs: int | None = None
    ) -> CrossJobFilter:
        """Learn the normal pool from per-template baseline statistics and return ``self``.

        ``n_baseline_jobs`` is the size of the baseline pool; when omitted it is taken from the
        stats' ``total_jobs`` (which must then agree). An empty pool means "no baseline".
        """
        self._check_params()
        totals = {s.total_jobs for s in baseline_counts.values()}
        if n_baseline_jobs is None:
            if len(totals) > 1:
                raise AnalysisError(
                    f"cross-job filter: baseline stats disagree on total_jobs {sorted(totals)}; "
                    "pass n_baseline_jobs"
                )
            n_baseline_jobs = totals.pop() if totals else 0
        if n_baseline_jobs < 0:
            raise AnalysisError(
                f"cross-job filter: n_baseline_jobs is negative ({n_baseline_jobs})"
            )
        for tid, stat in baseline_counts.items():
            if stat.jobs < 0 or stat.jobs > n_baseline_jobs or stat.rate < 0:
                raise AnalysisError(
                    f"cross-job filter: baseline stat of template {tid!r} is inconsistent "
                    f"(jobs={stat.jobs}, total_jobs={n_baseline_jobs}, rate={stat.rate}) — hint: "
                    "jobs counts baseline jobs that printed it, rate is per node"
                )
        self.n_baseline_jobs_ = n_baseline_jobs
        self.baseline_ = dict(baseline_counts)
        return self

    def transform(self, job_templates: Iterable[JobTemplateStat]) -> FilterResult:
        """Split the failed job's templates into kept (with reason) and dropped (with evidence)."""
        if not hasattr(self, "baseline_"):
            raise AnalysisError("cross-job filter: call fit() before transform()")
        stats = list(job_templates)
        seen: set[str] = set()
        for s in stats:
            if s.template_id in seen:
                raise AnalysisError(f"cross-job filter: template {s.template_id!r} given twice")
            seen.add(s.template_id)
        if self.n_baseline_jobs_ == 0:
            kept = tuple(
                KeptTemplate(s.template_id, "no-baseline", math.inf)
                for s in sorted(stats, key=lambda s: s.template_id)
            )
            return FilterResult(kept=kept, dropped=(), no_baseline=True)

        kept_list: list[KeptTemplate] = []
        dropped_list: list[DroppedTemplate] = []
        for s in sorted(stats, key=lambda s: s.template_id):
            base = self.baseline_.get(s.template_id)
            if base is None or base.jobs == 0:
                kept_list.append(KeptTemplate(s.template_id, "absent-in-baseline", math.inf))
                continue
            fraction = base.jobs / self.n_baseline_jobs_
            ratio = _ratio(s.rate, base.rate)
            if base.jobs < self.min_baselines or fraction < self.threshold:
                kept_list.append(KeptTemplate(s.template_id, "rare-in-baseline", ratio))
            elif ratio >= self.burst_factor and s.count >= self.min_burst_count:
                kept_list.append(KeptTemplate(s.template_id, "burst-vs-baseline", ratio))
            else:
                dropped_list.append(
                    DroppedTemplate(s.template_id, "frequent-in-baseline", fraction, ratio)
                )
        return FilterResult(kept=tuple(kept_list), dropped=tuple(dropped_list), no_baseline=False)

    def fit_transform(
        self,
        baseline_counts: Mapping[str, BaselineStat],
        job_templates: Iterable[JobTemplateStat],
        n_baseline_jobs: int | None = None,
    ) -> FilterResult:
        """``fit(baseline_counts, n_baseline_jobs).transform(job_templates)``."""
        return self.fit(baseline_counts, n_baseline_jobs).transform(job_templates)


def _ratio(job_rate: float, base_rate: float) -> float:
    """Job rate over baseline rate; a zero baseline rate makes any occurrence infinitely larger."""
    if base_rate <= 0.0:
        return math.inf if job_rate > 0.0 else 1.0
    return job_rate / base_rate
