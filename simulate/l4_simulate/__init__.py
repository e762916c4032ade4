"""A multi-node LLM-training log simulator: failed jobs with ground truth, plus baselines.

``simulate(out_dir, nodes=8, iterations=50, fault="nccl-ib-error", seed=0)`` writes
``out_dir/job``, ``out_dir/baselines/<id>`` and ``out_dir/truth.json``; ``FAULT_KINDS`` lists the
faults it can inject.
"""

from __future__ import annotations

from l4_simulate.faults import FAULT_KINDS, FaultSpec
from l4_simulate.generator import simulate
from l4_simulate.truth import Truth

__version__ = "0.2.0"

__all__ = ["FAULT_KINDS", "FaultSpec", "Truth", "simulate"]
