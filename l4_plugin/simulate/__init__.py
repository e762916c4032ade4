"""A multi-node LLM-training log simulator: failed jobs with ground truth, plus baselines.

``simulate(out_dir, nodes=8, iterations=50, fault="nccl-ib-error", seed=0)`` writes
``out_dir/job``, ``out_dir/baselines/<id>`` and ``out_dir/truth.json``; ``FAULT_KINDS`` lists the
faults it can inject.
"""

from __future__ import annotations

from l4_plugin.simulate.faults import FAULT_KINDS, FaultSpec
from l4_plugin.simulate.generator import simulate
from l4_plugin.simulate.truth import Truth

__all__ = ["FAULT_KINDS", "FaultSpec", "Truth", "simulate"]
