"""``l4 simulate``: write a synthetic failed job with baselines and its ground truth."""

from __future__ import annotations

from pathlib import Path

import click

from l4_plugin.cli.common import out
from l4_plugin.errors import L4Error


@click.command()
@click.argument("out_dir", type=click.Path(path_type=Path), required=False)
@click.option("--nodes", default=8, show_default=True, help="Nodes in the failed job.")
@click.option("--iterations", default=50, show_default=True, help="Training iterations.")
@click.option(
    "--fault", default="nccl-ib-error", show_default=True, help="Fault kind (see --list-faults)."
)
@click.option("--seed", default=0, show_default=True, help="Random seed (same seed, same bytes).")
@click.option("--baselines", default=2, show_default=True, help="Successful baseline runs.")
@click.option("--ranks-per-node", default=8, show_default=True)
@click.option(
    "--lines-per-iteration",
    default=1,
    show_default=True,
    help="Extra progress lines per iteration (volume for benchmarks).",
)
@click.option("--list-faults", is_flag=True, help="List the fault kinds and exit.")
def simulate(
    out_dir: Path | None,
    nodes: int,
    iterations: int,
    fault: str,
    seed: int,
    baselines: int,
    ranks_per_node: int,
    lines_per_iteration: int,
    list_faults: bool,
) -> None:
    """Write a realistic multi-node training job with a fault, its baselines and truth.json."""
    # The simulator is its own distribution (l4-simulate), absent from a plain wheel install.
    try:
        from l4_simulate import FAULT_KINDS
        from l4_simulate import simulate as run_simulation
    except ModuleNotFoundError as exc:
        if exc.name != "l4_simulate":
            raise  # installed but broken: show the real missing module
        raise L4Error(
            "the simulator is not installed — l4 simulate — no module l4_simulate — install L4 "
            'with its extra from your checkout: pip install "/path/to/l4[simulate]" '
            "(or pip install -e /path/to/l4)"
        ) from None

    if list_faults:
        for name, spec in sorted(FAULT_KINDS.items()):
            out.print(f"{name:24} {spec.category:30} {spec.description}")
        return
    if out_dir is None:
        raise click.UsageError("Missing argument 'OUT_DIR'.")
    truth = run_simulation(
        out_dir,
        nodes=nodes,
        iterations=iterations,
        fault=fault,
        seed=seed,
        baselines=baselines,
        ranks_per_node=ranks_per_node,
        lines_per_iteration=lines_per_iteration,
    )
    out.print(f"job {truth.job_id} ({fault}) written to {out_dir / 'job'}")
    out.print(f"baselines: {', '.join(truth.baseline_jobs) or 'none'} in {out_dir / 'baselines'}")
    out.print(
        f"ground truth: {out_dir / 'truth.json'} (faulty nodes: "
        f"{', '.join(truth.faulty_nodes) or 'none'})"
    )
