"""``simulate``: one failed (or successful) job, its baselines and the ground truth."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from l4_plugin.errors import ConfigError
from l4_simulate.faults import FAULT_KINDS
from l4_simulate.incidents import build_incident
from l4_simulate.job import write_run
from l4_simulate.noise import draw_noise
from l4_simulate.plan import (
    IMAGES_ASCEND,
    JobConfig,
    JobPlan,
    draw_config,
    draw_plan,
    job_start,
)
from l4_simulate.truth import Truth


def simulate(
    out_dir: Path,
    *,
    nodes: int = 8,
    iterations: int = 50,
    fault: str = "nccl-ib-error",
    seed: int = 0,
    baselines: int = 2,
    ranks_per_node: int = 8,
    lines_per_iteration: int = 1,
) -> Truth:
    """Write ``out_dir/job`` (the run with ``fault`` injected), ``out_dir/baselines/<id>``
    (successful runs of the same configuration on other nodes) and ``out_dir/truth.json``.

    The output depends only on the arguments: the same seed gives byte-identical files.
    """
    spec = FAULT_KINDS.get(fault)
    if spec is None:
        raise ConfigError(
            f"unknown fault kind — --fault — {fault!r} — one of: {', '.join(sorted(FAULT_KINDS))}"
        )
    _check_size(nodes, ranks_per_node, iterations, baselines, lines_per_iteration)
    out_dir = Path(out_dir)
    job_dir = out_dir / "job"
    if job_dir.exists() and any(job_dir.iterdir()):
        raise ConfigError(f"output directory not empty — {job_dir} — choose a new OUT_DIR")
    config = draw_config(seed, spec.accelerator)
    accelerator = "ascend" if config.image in IMAGES_ASCEND else "cuda"
    start = job_start(seed)
    plan = draw_plan(
        seed,
        "job",
        config,
        accelerator,
        nodes=nodes,
        iterations=iterations,
        ranks_per_node=ranks_per_node,
        lines_per_iteration=lines_per_iteration,
        naming_offset=0,
        force_kernel_log=spec.needs_kernel_log,
        start_time=start,
    )
    if fault == "time-limit":
        plan = dataclasses.replace(plan, launcher="slurm")
    incident, timeline = build_incident(plan, fault)
    noise = draw_noise(plan, timeline, "job", set(incident.faulty_nodes))
    status = "failed" if incident.failed else "succeeded"
    write_run(job_dir, plan, timeline, incident, noise, status, config.as_dict(nodes))
    baseline_ids = _write_baselines(out_dir, plan, seed, config, accelerator, start, baselines)
    truth = Truth(
        job_id=plan.job_id,
        fault=fault,
        category=spec.category,
        faulty_nodes=tuple(plan.nodes[i] for i in sorted(incident.faulty_nodes)),
        indicators=tuple(incident.root + incident.cascade),
        root_indicators=tuple(incident.root),
        cascade_indicators=tuple(incident.cascade),
        stage=incident.stage,
        iteration=incident.iteration,
        baseline_jobs=tuple(baseline_ids),
    )
    truth.write(out_dir / "truth.json")
    return truth


def _check_size(
    nodes: int, ranks_per_node: int, iterations: int, baselines: int, lines_per_iteration: int
) -> None:
    """Refuse a simulation too small for the incidents to play out (a ``ConfigError``)."""
    if (
        nodes < 2
        or ranks_per_node < 1
        or iterations < 10
        or baselines < 0
        or lines_per_iteration < 1
    ):
        raise ConfigError(
            "simulation too small — nodes >= 2, ranks_per_node >= 1, iterations >= 10, "
            f"baselines >= 0, lines_per_iteration >= 1 — got nodes={nodes}, "
            f"ranks_per_node={ranks_per_node}, iterations={iterations}, "
            f"baselines={baselines}, lines_per_iteration={lines_per_iteration}"
        )


def _write_baselines(
    out_dir: Path,
    job: JobPlan,
    seed: int,
    config: JobConfig,
    accelerator: str,
    start: float,
    count: int,
) -> list[str]:
    """Write ``count`` successful runs of ``job``'s configuration, each on a different number of
    nodes and iterations and a few days earlier, under ``out_dir/baselines``; return their ids."""
    nodes, iterations = len(job.nodes), job.iterations
    rng = random.Random(f"baselines:{seed}")
    baseline_ids = []
    for i in range(count):
        b_nodes = _other(rng, nodes, lo=2)
        b_iters = _other(rng, iterations, lo=10)
        b_plan = draw_plan(
            seed,
            f"baseline-{i}",
            config,
            accelerator,
            nodes=b_nodes,
            iterations=b_iters,
            ranks_per_node=job.ranks_per_node,
            lines_per_iteration=job.lines_per_iteration,
            naming_offset=i + 1,
            force_kernel_log=False,
            start_time=start - (i + 1) * 86400.0 * 3,
        )
        b_incident, b_timeline = build_incident(b_plan, "none")
        b_noise = draw_noise(b_plan, b_timeline, "baseline", set())
        write_run(
            out_dir / "baselines" / b_plan.job_id,
            b_plan,
            b_timeline,
            b_incident,
            b_noise,
            "succeeded",
            config.as_dict(b_nodes),
        )
        baseline_ids.append(b_plan.job_id)
    return baseline_ids


def _other(rng: random.Random, value: int, *, lo: int) -> int:
    """A value near ``value`` but different from it (and at least ``lo``)."""
    choices = [v for v in range(max(lo, value // 2), value * 3 // 2 + 3) if v != value]
    return rng.choice(choices)
