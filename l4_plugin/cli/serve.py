"""``l4 serve`` and ``l4 job``: the service, and the job registry it works from."""

from __future__ import annotations

import time
from typing import Any

import click

from l4_plugin.cli.common import CliState, checked_job_id, out, pass_state
from l4_plugin.store import open_cluster

# The service's flags; their defaults and environment variables are those of the settings'
# ``service:`` section (ServiceSettings), so that a flag not given leaves the file's value.
_SERVE_FLAGS: list[tuple[str, click.ParamType, str]] = [
    ("interval", click.FloatRange(min=0.1), "Seconds between discover+diagnose runs"),
    ("watch_interval", click.FloatRange(min=0.1), "Seconds between rule matches on running jobs"),
    ("lease", click.FloatRange(min=1), "Claim lease in seconds (renewed while analysing)"),
    ("max_attempts", click.IntRange(min=1), "Analyses of one job before giving up"),
    ("batch", click.IntRange(min=1), "Jobs discovered per run"),
    (
        "retention_days",
        click.FloatRange(min=0),
        "Delete rollups/lines of jobs ingested longer ago (annotations stay)",
    ),
    ("retention_interval", click.FloatRange(min=1), "Seconds between retention runs"),
    (
        "health_port",
        click.IntRange(min=0, max=65535),
        "Serve /healthz /readyz /metrics on 127.0.0.1 (0 = any free port, logged)",
    ),
    ("stop_grace", click.FloatRange(min=0), "On SIGTERM, seconds to finish an analysis"),
    ("max_backoff", click.FloatRange(min=0.1), "Longest wait between retries"),
]


def _serve_options(f: Any) -> Any:
    """The ``--<name>`` options of ``_SERVE_FLAGS`` (None when not given)."""
    from l4_plugin.config import ServiceSettings

    for name, kind, text in reversed(_SERVE_FLAGS):
        default = ServiceSettings.model_fields[name].default
        shown = "none" if default is None else f"{default:g}"
        f = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=kind,
            help=f"{text} (default {shown}; service.{name}, L4_SERVE_{name.upper()}).",
        )(f)
    return f


@click.command()
@_serve_options
@click.option(
    "--log-json",
    is_flag=True,
    default=None,
    help="JSON log lines (service.log_json, L4_SERVE_LOG_JSON).",
)
@click.option("--once", is_flag=True, help="Run each task once and exit (cron, CI).")
@click.option("--no-rules", is_flag=True, help="Skip the fault library (and the watch task).")
@click.option("--no-watch", is_flag=True, help="Do not match rules against running jobs.")
@click.option("--debug-log", is_flag=True, help="Also log skipped claims.")
@pass_state
def serve(
    cli: CliState, once: bool, no_rules: bool, no_watch: bool, debug_log: bool, **flags: Any
) -> None:
    """Diagnose every failed job registered in the cluster, on a schedule (see README).

    Every option but --once and --debug-log can also be set in the settings file's service:
    section or by an L4_SERVE_* variable; a flag wins over both.
    """
    import logging

    from l4_plugin.service import Service, setup_logging

    # --no-rules / --no-watch given switch off; not given leave the file's or environment's choice.
    cli.override(
        service={
            **flags,
            "rules": False if no_rules else None,
            "watch": False if no_watch else None,
        }
    )
    service = cli.settings.service
    logger = setup_logging(
        json_lines=service.log_json, level=logging.DEBUG if debug_log else logging.INFO
    )
    code = Service(cli.settings, logger, once=once).run()
    if code:
        raise click.exceptions.Exit(code)


@click.group()
def job() -> None:
    """Register jobs and change their status (what a platform calls)."""


def _print_job(state: Any) -> None:
    analysis = state.analysis or "not analysed"
    if state.version and state.analysis in ("done", "failed"):
        analysis += f" ({state.version})"
    out.print(
        f"job {state.job_id}: status {state.status}, ingest {state.ingest or 'not ingested'}, "
        f"analysis {analysis}, attempts {state.attempts}"
        + (f", claimed by {state.claimed_by}" if state.claimed_by else "")
    )
    if state.error:
        out.print(f"last analysis error: {state.error.splitlines()[0]}")
    if state.writing is not None:
        started = state.writing.get("started")
        since = (
            time.strftime(" since %Y-%m-%dT%H:%M:%SZ", time.gmtime(started / 1000))
            if isinstance(started, int | float)
            else ""
        )
        out.print(
            f"ingest of generation {state.writing.get('generation')}{since} by "
            f"{state.writing.get('owner')} has not completed (still writing, or interrupted: "
            f"the next ingest replaces it); analyses read "
            + (
                f"generation {state.generation}"
                if state.generation
                else "nothing until one completes"
            )
        )
    progress = state.progress
    if state.ingest == "running" and progress:
        eta = progress.get("eta_seconds")
        mb_done, mb = (progress.get("bytes_done") or 0) / 1e6, (progress.get("bytes") or 0) / 1e6
        out.print(
            f"ingest progress: files {progress.get('files_done')}/{progress.get('files')}, "
            f"{progress.get('lines', 0):,} lines, {mb_done:,.0f}/{mb:,.0f} MB, "
            f"{progress.get('lines_per_second', 0):,} lines/s"
            + (f", {eta:,.0f} s left" if eta is not None else "")
        )


@job.command("register")
@click.argument("job_id", callback=checked_job_id)
@click.option(
    "--status", required=True, type=click.Choice(["running", "failed", "succeeded", "unknown"])
)
@click.option("--fingerprint", help="Configuration fingerprint (jobs that share one compare).")
@pass_state
def job_register(cli: CliState, job_id: str, status: str, fingerprint: str | None) -> None:
    """Register JOB_ID (or update its status); failed + ingested jobs get diagnosed."""
    from l4_plugin.service.registry import register_job

    with open_cluster(cli.settings) as store:
        store.install_templates()
        state, created = register_job(store, job_id, status, fingerprint=fingerprint)
        out.print(f"{'registered' if created else 'updated'} in {store.names.jobs}")
        _print_job(state)


@job.command("status")
@click.argument("job_id", callback=checked_job_id)
@click.argument(
    "new_status",
    required=False,
    metavar="[NEW_STATUS]",
    type=click.Choice(["running", "failed", "succeeded", "unknown"]),
)
@pass_state
def job_status(cli: CliState, job_id: str, new_status: str | None) -> None:
    """Show JOB_ID's status and analysis state; NEW_STATUS (running, failed, succeeded,
    unknown) changes the status first — e.g. running → failed makes `l4 serve` diagnose it."""
    from l4_plugin.service.registry import job_state, set_status

    with open_cluster(cli.settings) as store:
        state = set_status(store, job_id, new_status) if new_status else job_state(store, job_id)
        _print_job(state)
