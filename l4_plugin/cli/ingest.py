"""``l4 ingest`` and ``l4 parse``: logs into the cluster, or the parser on its own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

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
from l4_plugin.errors import L4Error
from l4_plugin.store import fields as F
from l4_plugin.store import open_cluster


@click.command()
@click.argument("job_dir", type=click.Path(path_type=Path, file_okay=False), required=False)
@click.option(
    "--job-id", callback=checked_job_id, help="Job id (default: job.yaml id, else the folder name)."
)
@click.option(
    "--status",
    type=click.Choice(["succeeded", "failed", "running", "unknown"]),
    help="Job status (default: job.yaml status).",
)
@click.option(
    "--set",
    "config_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Job configuration field (repeatable); overrides job.yaml config.",
)
@click.option(
    "--config", "old_config_pairs", multiple=True, hidden=True
)  # the old spelling of --set
@click.option("--node-pattern", help="Regex with (?P<node>...) [and (?P<rank>...)] over paths.")
@click.option("--full", is_flag=True, help="Also index every raw line into l4-lines.")
@click.option(
    "--from-index", metavar="PATTERN", help="Read lines a shipper indexed instead of JOB_DIR."
)
@click.option("--job-field", default=F.JOB_ID, show_default=True, help="--from-index: job id.")
@click.option("--node-field", default="host.name", show_default=True, help="--from-index: node.")
@click.option(
    "--rank-field",
    default=F.RANK,
    show_default=True,
    help="--from-index: rank (if absent: from the file name).",
)
@click.option("--message-field", default="message", show_default=True)
@click.option("--timestamp-field", default="@timestamp", show_default=True)
@click.option("--path-field", default="log.file.path", show_default=True)
@click.option("--offset-field", default="log.offset", show_default=True)
@size_options
@workers_option
@pass_state
def ingest(
    cli: CliState,
    job_dir: Path | None,
    job_id: str | None,
    status: str | None,
    config_pairs: tuple[str, ...],
    old_config_pairs: tuple[str, ...],
    node_pattern: str | None,
    full: bool,
    from_index: str | None,
    workers: int | None,
    scheduler: str | None,
    **raw_fields: Any,
) -> None:
    """Parse a job's logs (JOB_DIR, or --from-index) into rollups, kept lines and templates."""
    from l4_plugin.ingest.index_source import ingest_index
    from l4_plugin.ingest.pipeline import ingest_job
    from l4_plugin.ingest.workers import ScanProgress

    if (job_dir is None) == (from_index is None):
        raise click.UsageError("give either JOB_DIR or --from-index PATTERN")
    overrides = _job_config(config_pairs, old_config_pairs)
    limits = read_limits(cli, raw_fields)  # takes the size flags out of the raw fields
    n_workers = workers or cli.settings.ingest_workers
    with open_cluster(cli.settings) as store:
        store.install_templates()
        # One line, rewritten in place; only on a terminal (rich draws nothing otherwise).
        with SafeConsole(stderr=True, highlight=False).status("ingest") as line:

            def progress(p: ScanProgress) -> None:
                line.update(f"ingest {p.describe()}")

            if from_index is not None:
                summaries = ingest_index(
                    store,
                    from_index,
                    _raw_fields(**raw_fields),
                    job_id=job_id,
                    status=status,
                    config=overrides,
                    full=full,
                    progress=progress,
                )
            else:
                assert job_dir is not None
                summaries = [
                    ingest_job(
                        store,
                        job_dir,
                        job_id=job_id,
                        status=status,
                        config=overrides,
                        node_pattern=node_pattern,
                        full=full,
                        progress=progress,
                        limits=limits,
                        workers=n_workers,
                        scheduler=scheduler or cli.settings.ingest_scheduler,
                    )
                ]
        for summary in summaries:
            _print_summary(summary, full)


def _job_config(pairs: tuple[str, ...], old_pairs: tuple[str, ...]) -> dict[str, str]:
    """The ``--set KEY=VALUE`` pairs (and the deprecated ``--config KEY=VALUE``) as a mapping."""
    from l4_plugin.ingest.jobdir import parse_config_overrides

    if old_pairs:
        safe_print(
            "warning: `l4 ingest --config KEY=VALUE` is deprecated: use --set KEY=VALUE "
            "(`l4 --config FILE` is the settings file)",
            file=sys.stderr,
        )
    return parse_config_overrides([*old_pairs, *pairs])


def _raw_fields(
    job_field: str,
    node_field: str,
    rank_field: str,
    message_field: str,
    timestamp_field: str,
    path_field: str,
    offset_field: str,
) -> Any:
    """The ``--from-index`` field names (an empty optional one: not in the documents)."""
    from l4_plugin.ingest.index_source import RawFields

    return RawFields(
        job_field,
        node_field,
        rank_field or None,
        message_field,
        timestamp_field,
        path_field or None,
        offset_field or None,
    )


def _print_summary(summary: Any, full: bool) -> None:
    """What one ingest did, and its first 20 problems as warnings on stderr."""
    job = summary.job
    out.print(
        f"job {job.id} ({job.status}, fingerprint {job.fingerprint}): {summary.files} "
        f"files, {summary.nodes} nodes, {summary.lines:,} lines in {summary.seconds:.1f} s"
    )
    out.print(
        f"indexed {summary.events_docs:,} rollups, {summary.lines_docs:,} "
        f"{'raw' if full else 'kept'} lines, {summary.new_templates} new templates"
    )
    for problem in summary.problems[:20]:
        safe_print(f"warning: {problem}", file=sys.stderr)
    if len(summary.problems) > 20:
        safe_print(f"warning: … and {len(summary.problems) - 20} more problems", file=sys.stderr)


@click.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--jsonl", is_flag=True, help="One JSON object per input line.")
@size_options
@pass_state
def parse(cli: CliState, file: Path, jsonl: bool, **flags: Any) -> None:
    """Parse one log file (plain or .gz) into templates: the parser on its own."""
    import json

    from l4_plugin.ingest.parser import parse_file

    if not file.exists():
        raise L4Error(f"cannot open log file — {file} — no such file")
    limits = read_limits(cli, flags)
    counts: dict[str, int] = {}
    texts: dict[str, str] = {}
    write = sys.stdout.write
    for parsed in parse_file(file, limits=limits):
        if jsonl:
            write(
                json.dumps(
                    {
                        "line": parsed.line,
                        "template_id": parsed.template_id,
                        "template": parsed.template,
                    }
                )
                + "\n"
            )
        else:
            counts[parsed.template_id] = counts.get(parsed.template_id, 0) + 1
            texts[parsed.template_id] = parsed.template
    if not jsonl:
        table = Table("template id", "count", "template")
        for tid, count in sorted(counts.items(), key=lambda kv: -kv[1]):
            table.add_row(tid, str(count), texts[tid])
        out.print(table)
