"""``l4 diagnose``, ``l4 analyze`` and ``l4 report``: one diagnosis, and its rendering."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from l4_plugin.cli.common import (
    CliState,
    checked_job_id,
    out,
    pass_state,
    read_limits,
    size_options,
    workers_option,
)
from l4_plugin.display import SafeConsole, safe_print
from l4_plugin.store import open_cluster

if TYPE_CHECKING:
    from l4_plugin.diagnosis import Diagnosis


def _diagnosis_options(f: Any) -> Any:
    """Options shared by ``diagnose`` and ``analyze``."""
    options = [
        click.option(
            "--json",
            "json_out",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Write the ARCHITECTURE.md, *The report* JSON report here ('-' = stdout).",
        ),
        click.option(
            "--html",
            "html_out",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Write the self-contained HTML report here.",
        ),
        click.option(
            "--force-baseline",
            is_flag=True,
            help="Use --baseline jobs even when their configuration fingerprint differs.",
        ),
        click.option(
            "--no-rules", is_flag=True, help="Skip the fault library (analysis.rules: false)."
        ),
        click.option(
            "--no-filter",
            is_flag=True,
            help="Skip cross-job filtering (ablation; the report says so; analysis.filter: false).",
        ),
        click.option(
            "--spatial",
            type=click.Choice(["combined", "iforest"]),
            help="Spatial method (iforest = the paper's plain forest; default combined; "
            "analysis.spatial, L4_ANALYSIS_SPATIAL).",
        ),
        click.option(
            "--dtw",
            type=click.Choice(["numpy", "tslearn"]),
            help="DTW backend (tslearn compiles with numba first; default numpy; analysis.dtw, "
            "L4_ANALYSIS_DTW).",
        ),
        click.option("--dry-run", is_flag=True, help="Do not write annotations."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _analysis_flags(cli: CliState, flags: dict[str, Any]) -> None:
    """Take the analysis flags out of ``flags`` into the settings' ``analysis:`` overrides (a
    flag not given leaves the file's or environment's value)."""
    cli.override(
        analysis={
            "rules": False if flags.pop("no_rules") else None,
            "filter": False if flags.pop("no_filter") else None,
            "spatial": flags.pop("spatial"),
            "dtw": flags.pop("dtw"),
        }
    )


def _run_diagnosis(
    cli: CliState,
    store: Any,
    job_id: str,
    run: Callable[..., Diagnosis],
    *,
    json_out: Path | None,
    html_out: Path | None,
    dry_run: bool,
) -> None:
    """``run(**how)`` (a diagnosis of ``job_id``) with the settings' analysis options, a status
    line and warnings on stderr; then the summary, the files asked for and where they went."""
    from l4_plugin.dashboards.links import discover_linker
    from l4_plugin.report.files import write_report_files
    from l4_plugin.report.terminal import render_terminal

    settings = cli.settings
    err = SafeConsole(stderr=True, highlight=False)
    with err.status("analysing") as spinner:
        diagnosis = run(
            options=settings.analysis_options(),
            rules=None if settings.analysis.rules else [],
            write=not dry_run,
            discover=discover_linker(settings),
            step=lambda name: spinner.update(f"{job_id}: {name}"),
            warn=_warn,
        )
    if str(json_out) != "-":
        render_terminal(diagnosis.report, out)
    write_report_files(diagnosis.report, diagnosis.extras, json_out=json_out, html_out=html_out)
    for target in (json_out, html_out):
        if target is not None and str(target) != "-":
            err.print(f"wrote {target}")
    if not dry_run:
        err.print(f"annotations written to {store.names.annotations}")


def _warn(message: str) -> None:
    safe_print(f"warning: {message}", file=sys.stderr)


@click.command()
@click.argument("job_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--baseline",
    "baseline_dirs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A successful job of the same configuration, or a folder of them (repeatable).",
)
@click.option(
    "--job-id", callback=checked_job_id, help="Job id (default: job.yaml id, else the folder name)."
)
@click.option("--node-pattern", help="Regex with (?P<node>...) [and (?P<rank>...)] over paths.")
@click.option("--reingest", is_flag=True, help="Ingest again even if the cluster has the job.")
@size_options
@workers_option
@_diagnosis_options
@pass_state
def diagnose(
    cli: CliState,
    job_dir: Path,
    baseline_dirs: tuple[Path, ...],
    job_id: str | None,
    node_pattern: str | None,
    reingest: bool,
    workers: int | None,
    scheduler: str | None,
    **kwargs: Any,
) -> None:
    """Diagnose a failed job's log directory: ingest (baselines first), match rules, analyse."""
    from l4_plugin.diagnosis import diagnose
    from l4_plugin.diagnosis.preparation import How, prepare_all
    from l4_plugin.ingest.workers import ScanProgress

    limits = read_limits(cli, kwargs)  # takes the size flags out of kwargs
    _analysis_flags(cli, kwargs)
    force = kwargs.pop("force_baseline")
    with open_cluster(cli.settings) as store:
        store.install_templates()
        err = SafeConsole(stderr=True, highlight=False)
        status_line = err.status("ingesting")

        def progress(name: str) -> Any:
            def tick(p: ScanProgress) -> None:
                status_line.update(f"ingest {name}: {p.describe()}")

            return tick

        how = How(
            node_pattern=node_pattern,
            reingest=reingest,
            limits=limits,
            workers=workers or cli.settings.ingest_workers,
            progress=progress,
            scheduler=scheduler or cli.settings.ingest_scheduler,
        )
        with status_line:
            intake = prepare_all(
                store,
                job_dir,
                list(baseline_dirs),
                job_id=job_id,
                how=how,
                force_baselines=force,
                warn=_warn,
            )
        for p in [*intake.baselines, intake.job]:
            state = (
                f"ingested {p.ingested.lines:,} lines in {p.ingested.seconds:.1f} s"
                if p.ingested
                else "already in the cluster"
            )
            err.print(f"{p.job_id}: {state}")
            for problem in (p.ingested.problems if p.ingested else [])[:5]:
                safe_print(f"warning: {problem}", file=sys.stderr)
        run = partial(diagnose, store, intake.job.doc, intake.pool)
        _run_diagnosis(cli, store, intake.job.job_id, run, **kwargs)


@click.command()
@click.argument("job_id", callback=checked_job_id)
@click.option(
    "--baseline",
    "baseline_ids",
    multiple=True,
    callback=checked_job_id,
    help="Baseline job id (repeatable).",
)
@_diagnosis_options
@pass_state
def analyze(cli: CliState, job_id: str, baseline_ids: tuple[str, ...], **kwargs: Any) -> None:
    """Diagnose a job that is already in the cluster (same output as diagnose)."""
    from l4_plugin.diagnosis import diagnose_job

    _analysis_flags(cli, kwargs)
    force = kwargs.pop("force_baseline")
    with open_cluster(cli.settings) as store:
        run = partial(
            diagnose_job, store, job_id, baselines=list(baseline_ids), force_baselines=force
        )
        _run_diagnosis(cli, store, job_id, run, **kwargs)


@click.command()
@click.argument("job_id", callback=checked_job_id)
@click.option("--html", "html_out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False))
@pass_state
def report(cli: CliState, job_id: str, html_out: Path | None, json_out: Path | None) -> None:
    """Render a job's stored diagnosis (from l4-annotations) without analysing again."""
    from l4_plugin.diagnosis import load_summary
    from l4_plugin.report.files import write_report_files
    from l4_plugin.report.terminal import render_terminal

    with open_cluster(cli.settings) as store:
        data, extras = load_summary(store, job_id)
    if html_out is None and json_out is None:
        render_terminal(data, out)
    write_report_files(data, extras, json_out=json_out, html_out=html_out)
