"""The ``l4`` command: thin wrappers that parse arguments, load settings and call the product.

Errors: an ``L4Error`` prints ``error: …`` on one line and exits 1 (usage errors exit 2);
``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from l4_plugin import __version__
from l4_plugin.config import Settings, load_settings
from l4_plugin.display import JSON_ESCAPES, SafeConsole, safe_print
from l4_plugin.errors import L4Error
from l4_plugin.store import EmbeddedCluster, open_cluster
from l4_plugin.store.embedded import clear_state, write_state

out = SafeConsole(highlight=False, soft_wrap=True)


@dataclass
class CliState:
    """Global options of one invocation, resolved into settings on first use."""

    config_file: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    debug: bool = False
    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_file, **self.overrides)
        return self._settings


STATE = CliState()


def _size_options(f: Any) -> Any:
    """``--max-file-size`` / ``--max-job-size``: raise the read limits of a job directory."""
    f = click.option(
        "--max-job-size",
        metavar="SIZE",
        help="Most bytes of logs one job may hold (default 1T; L4_MAX_JOB_SIZE).",
    )(f)
    return click.option(
        "--max-file-size",
        metavar="SIZE",
        help="Most bytes read of one log file, e.g. 500M, 16G (default 16G; L4_MAX_FILE_SIZE).",
    )(f)


def _read_limits(max_file_size: str | None, max_job_size: str | None) -> Any:
    """The read limits from flags (set before the settings are first read), env and file."""
    from l4_plugin.ingest.jobdir import ReadLimits

    STATE.overrides.update({"max_file_size": max_file_size, "max_job_size": max_job_size})
    settings = STATE.settings
    return ReadLimits(settings.max_file_size, settings.max_job_size)


def _job_id(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback: every job id given on the command line passes ``check_job_id``."""
    from l4_plugin.jobid import MAX_JOB_ID, job_id_problem

    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        problem = None if v is None else job_id_problem(v)
        if problem is not None:
            shown = repr(v) if len(v) <= 80 else repr(v[:77]) + "..."
            raise click.BadParameter(
                f"{shown} {problem} — a job id is 1 to {MAX_JOB_ID} printable characters, "
                "no spaces at either end"
            )
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", type=click.Path(path_type=Path), help="YAML settings file.")
@click.option("--es-url", help="Cluster URL (default: L4_ES_URL, else the embedded cluster).")
@click.option("--es-user", help="Basic-auth user (password: L4_ES_PASSWORD or --config).")
@click.option("--ca-certs", type=click.Path(path_type=Path), help="CA bundle for https clusters.")
@click.option("--index-prefix", help="Index name prefix (default l4-).")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="l4")
def app(
    config: Path | None,
    es_url: str | None,
    es_user: str | None,
    ca_certs: Path | None,
    index_prefix: str | None,
    debug: bool,
) -> None:
    """L4: diagnose large-scale LLM training failures from their logs.

    Secrets (API key, password) come from the environment (L4_ES_API_KEY, L4_ES_PASSWORD) or the
    --config file, never from the command line.
    """
    STATE.config_file = config
    STATE.overrides = {
        "es_url": es_url,
        "es_user": es_user,
        "es_ca_certs": ca_certs,
        "index_prefix": index_prefix,
    }
    STATE.debug = STATE.debug or debug


@app.command()
def setup() -> None:
    """Install (or update) the index templates of every L4 index."""
    with open_cluster(STATE.settings) as store:
        info = store.info()
        out.print(f"cluster: {info.flavour} {info.version} at {info.url}")
        for name, action in store.install_templates():
            out.print(f"index template {name}: {action}")


@app.command()
def status() -> None:
    """Cluster flavour and version, and L4's indices with their document counts."""
    settings = STATE.settings
    with open_cluster(settings) as store:
        info = store.info()
        out.print(f"cluster: {info.flavour} {info.version} at {info.url}")
        out.print(f"index prefix: {settings.index_prefix}")
        rows = store.indices()
        if not rows:
            out.print("no L4 indices yet (run `l4 setup`, then ingest a job)")
            return
        table = Table("index", "documents")
        for name, count in rows:
            table.add_row(name, str(count))
        out.print(table)


@app.group()
def cluster() -> None:
    """The embedded cluster (osmem-server)."""


@cluster.command("up")
@click.option("--port", default=0, show_default=True, help="Port on 127.0.0.1 (0 = any free).")
def cluster_up(port: int) -> None:
    """Run an embedded cluster in the foreground; other l4 commands use it until Ctrl-C."""
    settings = STATE.settings
    with EmbeddedCluster(
        startup_timeout=settings.embedded_startup_timeout, addr=f"127.0.0.1:{port}"
    ) as embedded:
        write_state(settings.state_dir, embedded.url, embedded.pid or 0)
        try:
            out.print(f"embedded cluster running at {embedded.url}")
            out.print(
                f"other l4 commands on this machine use it; elsewhere: "
                f"export L4_ES_URL={embedded.url}"
            )
            out.print("press Ctrl-C to stop (all data is in memory and is lost)")
            sys.stdout.flush()
            while embedded.alive():
                time.sleep(0.5)
            raise L4Error("the embedded cluster exited unexpectedly")
        except KeyboardInterrupt:
            out.print("stopping the embedded cluster")
        finally:
            clear_state(settings.state_dir, embedded.url)


def _workers_option(f: Any) -> Any:
    return click.option(
        "--workers",
        type=click.IntRange(1, 1024),
        help="Worker processes scanning the files (default: L4_INGEST_WORKERS, else the cores).",
    )(f)


@app.command()
@click.argument("job_dir", type=click.Path(path_type=Path, file_okay=False), required=False)
@click.option(
    "--job-id", callback=_job_id, help="Job id (default: job.yaml id, else the folder name)."
)
@click.option(
    "--status",
    type=click.Choice(["succeeded", "failed", "running", "unknown"]),
    help="Job status (default: job.yaml status).",
)
@click.option(
    "--config",
    "config_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Configuration field (repeatable); overrides job.yaml config.",
)
@click.option("--node-pattern", help="Regex with (?P<node>...) [and (?P<rank>...)] over paths.")
@click.option("--full", is_flag=True, help="Also index every raw line into l4-lines.")
@click.option(
    "--from-index", metavar="PATTERN", help="Read lines a shipper indexed instead of JOB_DIR."
)
@click.option("--job-field", default="l4.job.id", show_default=True, help="--from-index: job id.")
@click.option("--node-field", default="host.name", show_default=True, help="--from-index: node.")
@click.option(
    "--rank-field",
    default="l4.rank",
    show_default=True,
    help="--from-index: rank (if absent: from the file name).",
)
@click.option("--message-field", default="message", show_default=True)
@click.option("--timestamp-field", default="@timestamp", show_default=True)
@click.option("--path-field", default="log.file.path", show_default=True)
@click.option("--offset-field", default="log.offset", show_default=True)
@_size_options
@_workers_option
def ingest(
    job_dir: Path | None,
    job_id: str | None,
    status: str | None,
    config_pairs: tuple[str, ...],
    node_pattern: str | None,
    full: bool,
    from_index: str | None,
    job_field: str,
    node_field: str,
    rank_field: str,
    message_field: str,
    timestamp_field: str,
    path_field: str,
    offset_field: str,
    max_file_size: str | None,
    max_job_size: str | None,
    workers: int | None,
) -> None:
    """Parse a job's logs (JOB_DIR, or --from-index) into rollups, kept lines and templates."""
    from l4_plugin.ingest.index_source import RawFields, ingest_index
    from l4_plugin.ingest.jobdir import parse_config_overrides
    from l4_plugin.ingest.pipeline import ingest_job
    from l4_plugin.ingest.workers import ScanProgress

    if (job_dir is None) == (from_index is None):
        raise click.UsageError("give either JOB_DIR or --from-index PATTERN")
    overrides = parse_config_overrides(list(config_pairs))
    limits = _read_limits(max_file_size, max_job_size)
    n_workers = workers or STATE.settings.ingest_workers
    with open_cluster(STATE.settings) as store:
        store.install_templates()
        # One line, rewritten in place; only on a terminal (rich draws nothing otherwise).
        with SafeConsole(stderr=True, highlight=False).status("ingest") as line:

            def progress(p: ScanProgress) -> None:
                line.update(f"ingest {p.describe()}")

            if from_index is not None:
                fields = RawFields(
                    job_field,
                    node_field,
                    rank_field or None,
                    message_field,
                    timestamp_field,
                    path_field or None,
                    offset_field or None,
                )
                summaries = ingest_index(
                    store,
                    from_index,
                    fields,
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
                    )
                ]
        for summary in summaries:
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
                safe_print(
                    f"warning: … and {len(summary.problems) - 20} more problems", file=sys.stderr
                )


@app.command()
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


@app.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--jsonl", is_flag=True, help="One JSON object per input line.")
def parse(file: Path, jsonl: bool) -> None:
    """Parse one log file (plain or .gz) into templates: the parser on its own."""
    import json

    from l4_plugin.ingest.parser import parse_file

    if not file.exists():
        raise L4Error(f"cannot open log file — {file} — no such file")
    counts: dict[str, int] = {}
    texts: dict[str, str] = {}
    write = sys.stdout.write
    for parsed in parse_file(file):
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


def _diagnosis_options(f: Any) -> Any:
    """Options shared by ``diagnose`` and ``analyze``."""
    options = [
        click.option(
            "--json",
            "json_out",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Write the DESIGN §6 JSON report here ('-' = stdout).",
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
        click.option("--no-rules", is_flag=True, help="Skip the fault library."),
        click.option(
            "--no-filter",
            is_flag=True,
            help="Skip cross-job filtering (ablation; the report says so).",
        ),
        click.option(
            "--spatial",
            type=click.Choice(["combined", "iforest"]),
            default="combined",
            show_default=True,
            help="Spatial method (iforest = the paper's plain forest).",
        ),
        click.option(
            "--dtw",
            type=click.Choice(["numpy", "tslearn"]),
            default="numpy",
            show_default=True,
            help="DTW backend (tslearn compiles with numba first).",
        ),
        click.option("--dry-run", is_flag=True, help="Do not write annotations."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _run_diagnosis(
    store: Any,
    job_id: str,
    baselines: list[str],
    *,
    json_out: Path | None,
    html_out: Path | None,
    force_baseline: bool,
    no_rules: bool,
    no_filter: bool,
    spatial: str,
    dtw: str,
    dry_run: bool,
) -> None:
    from l4_plugin.diagnosis import AnalysisOptions, diagnose_job
    from l4_plugin.diagnosis.output import discover_linker, write_outputs
    from l4_plugin.report.terminal import render_terminal

    settings = STATE.settings
    err = SafeConsole(stderr=True, highlight=False)
    with err.status("analysing") as spinner:
        diagnosis = diagnose_job(
            store,
            job_id,
            options=AnalysisOptions(
                crossjob=not no_filter,
                spatial_method=spatial,
                dtw_backend=dtw,
                random_state=settings.random_state,
            ),
            baselines=baselines,
            force_baselines=force_baseline,
            rules=[] if no_rules else None,
            write=not dry_run,
            discover=discover_linker(settings),
            step=lambda name: spinner.update(f"{job_id}: {name}"),
            warn=lambda msg: safe_print(f"warning: {msg}", file=sys.stderr),
        )
    if str(json_out) != "-":
        render_terminal(diagnosis.report, out)
    write_outputs(diagnosis, json_out=json_out, html_out=html_out)
    for target in (json_out, html_out):
        if target is not None and str(target) != "-":
            err.print(f"wrote {target}")
    if not dry_run:
        err.print(f"annotations written to {store.names.annotations}")


@app.command()
@click.argument("job_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--baseline",
    "baseline_dirs",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A successful job of the same configuration, or a folder of them (repeatable).",
)
@click.option(
    "--job-id", callback=_job_id, help="Job id (default: job.yaml id, else the folder name)."
)
@click.option("--node-pattern", help="Regex with (?P<node>...) [and (?P<rank>...)] over paths.")
@click.option("--reingest", is_flag=True, help="Ingest again even if the cluster has the job.")
@_size_options
@_workers_option
@_diagnosis_options
def diagnose(
    job_dir: Path,
    baseline_dirs: tuple[Path, ...],
    job_id: str | None,
    node_pattern: str | None,
    reingest: bool,
    max_file_size: str | None,
    max_job_size: str | None,
    workers: int | None,
    **kwargs: Any,
) -> None:
    """Diagnose a failed job's log directory: ingest (baselines first), match rules, analyse."""
    from l4_plugin.diagnosis.jobdirs import prepare_all
    from l4_plugin.ingest.workers import ScanProgress

    limits = _read_limits(max_file_size, max_job_size)
    with open_cluster(STATE.settings) as store:
        store.install_templates()
        err = SafeConsole(stderr=True, highlight=False)
        status_line = err.status("ingesting")

        def progress(name: str) -> Any:
            def tick(p: ScanProgress) -> None:
                status_line.update(f"ingest {name}: {p.describe()}")

            return tick

        with status_line:
            job, base = prepare_all(
                store,
                job_dir,
                list(baseline_dirs),
                job_id=job_id,
                node_pattern=node_pattern,
                progress=progress,
                reingest=reingest,
                limits=limits,
                workers=workers or STATE.settings.ingest_workers,
            )
        for p in [*base, job]:
            state = (
                f"ingested {p.ingested.lines:,} lines in {p.ingested.seconds:.1f} s"
                if p.ingested
                else "already in the cluster"
            )
            err.print(f"{p.job_id}: {state}")
            for problem in (p.ingested.problems if p.ingested else [])[:5]:
                safe_print(f"warning: {problem}", file=sys.stderr)
        _run_diagnosis(store, job.job_id, [b.job_id for b in base], **kwargs)


@app.command()
@click.argument("job_id", callback=_job_id)
@click.option(
    "--baseline",
    "baseline_ids",
    multiple=True,
    callback=_job_id,
    help="Baseline job id (repeatable).",
)
@_diagnosis_options
def analyze(job_id: str, baseline_ids: tuple[str, ...], **kwargs: Any) -> None:
    """Diagnose a job that is already in the cluster (same output as diagnose)."""
    with open_cluster(STATE.settings) as store:
        _run_diagnosis(store, job_id, list(baseline_ids), **kwargs)


@app.command()
@click.argument("job_id", callback=_job_id)
@click.option("--html", "html_out", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False))
def report(job_id: str, html_out: Path | None, json_out: Path | None) -> None:
    """Render a job's stored diagnosis (from l4-annotations) without analysing again."""
    from l4_plugin.diagnosis import load_summary
    from l4_plugin.diagnosis.output import write_report_files
    from l4_plugin.report.terminal import render_terminal

    with open_cluster(STATE.settings) as store:
        data, extras = load_summary(store, job_id)
    if html_out is None and json_out is None:
        render_terminal(data, out)
    write_report_files(data, extras, json_out=json_out, html_out=html_out)


@app.group()
def rules() -> None:
    """The fault library: check rules, run their embedded tests, match a job."""


@rules.command("check")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
def rules_check(paths: tuple[Path, ...]) -> None:
    """Validate rule files (default: the shipped library); report every problem."""
    from l4_plugin.rules import check_paths, load_rules

    problems = check_paths(list(paths) or None)
    for problem in problems:
        safe_print(f"error: {problem}", file=sys.stderr)
    if problems:
        raise click.exceptions.Exit(1)
    out.print(f"{len(load_rules(list(paths) or None))} rules OK")


@rules.command("test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
def rules_test(paths: tuple[Path, ...]) -> None:
    """Run the rules' embedded tests (default: the library) in a scratch index prefix."""
    from l4_plugin.rules.commands import checked_rules, library_tests, summarize

    library = checked_rules(paths)
    summary = summarize(library, library_tests(STATE.settings, library))
    for line in summary.lines:
        out.print(line, markup=False)
    out.print(f"{summary.rules - summary.failed} of {summary.rules} rules passed their tests")
    if not summary.ok:
        raise click.exceptions.Exit(1)


@rules.command("match")
@click.argument("job_id", callback=_job_id)
@click.option(
    "--rules",
    "rule_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Rule files or folders (repeatable; default: the library).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rule_matches list as JSON.")
def rules_match(job_id: str, rule_paths: tuple[Path, ...], as_json: bool) -> None:
    """Match the fault rules against an ingested job, root causes first."""
    from l4_plugin.rules.commands import checked_rules, match_text, matches_for, matches_json

    library = checked_rules(rule_paths)
    with open_cluster(STATE.settings) as store:
        found = matches_for(store, job_id, library)
    if as_json:
        print(matches_json(found).translate(JSON_ESCAPES))
    else:
        out.print(match_text(job_id, found, len(library)), markup=False)


@rules.command("new")
@click.option(
    "--from-job",
    "job_id",
    required=True,
    callback=_job_id,
    help="Job whose diagnosis to draft from.",
)
@click.option("--id", "rule_id", help="Rule id (kebab-case; default: from the top event).")
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    help="Rules folder or <category>/<id>.yaml file to write (default: print the YAML).",
)
def rules_new(job_id: str, rule_id: str | None, out_path: Path | None) -> None:
    """Draft a status: draft rule from a job's top events (its annotations)."""
    from l4_plugin.rules.commands import draft_from_job, write_draft

    with open_cluster(STATE.settings) as store:
        draft = draft_from_job(store, job_id, rule_id)
    if draft.source == "lines":
        safe_print(
            f"note: job {job_id} has no event annotations yet (run `l4 diagnose` first); "
            "drafted from its ERROR-level kept lines, rarest first",
            file=sys.stderr,
        )
    if out_path is None:
        sys.stdout.write(draft.yaml)
        return
    path = write_draft(draft, out_path)
    out.print(f"draft rule {draft.rule_id} written to {path} (review it, then `l4 rules test`)")


@app.group()
def dashboards() -> None:
    """Saved objects for Kibana and OpenSearch Dashboards."""


@dashboards.command("export")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Folder to write <flavour>/l4.ndjson into.",
)
def dashboards_export(out_dir: Path) -> None:
    """Write the saved objects as NDJSON for both tools."""
    from l4_plugin.dashboards import FLAVOURS, export_ndjson

    for flavour in FLAVOURS:
        path = export_ndjson(flavour, out_dir, STATE.settings.index_prefix)
        out.print(f"{flavour}: {path}")


@dashboards.command("install")
@click.option("--url", required=True, help="Kibana or OpenSearch Dashboards URL.")
@click.option(
    "--flavour",
    type=click.Choice(["kibana", "opensearch-dashboards"]),
    help="Default: detected from /api/status.",
)
@click.option("--space", help="Kibana space id.")
def dashboards_install(url: str, flavour: str | None, space: str | None) -> None:
    """Import the saved objects through the tool's saved-objects import API (overwrite)."""
    from l4_plugin.dashboards import install

    settings = STATE.settings
    result = install(
        url,
        flavour,  # type: ignore[arg-type]
        space=space,
        index_prefix=settings.index_prefix,
        api_key=settings.es_api_key.get_secret_value() if settings.es_api_key else None,
        username=settings.es_user,
        password=settings.es_password.get_secret_value() if settings.es_password else None,
        ca_certs=settings.es_ca_certs,
        verify_certs=settings.es_verify_certs,
    )
    out.print(result.summary())
    if not result.ok:
        raise click.exceptions.Exit(1)


@app.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    envvar="L4_SERVE_INTERVAL",
    help="Seconds between discover+diagnose runs.",
)
@click.option(
    "--watch-interval",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    envvar="L4_SERVE_WATCH_INTERVAL",
    help="Seconds between rule matches on running jobs.",
)
@click.option(
    "--lease",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    envvar="L4_SERVE_LEASE",
    help="Claim lease in seconds (renewed while analysing).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    envvar="L4_SERVE_MAX_ATTEMPTS",
    help="Analyses of one job before giving up.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    envvar="L4_SERVE_BATCH",
    help="Jobs discovered per run.",
)
@click.option(
    "--retention-days",
    type=click.FloatRange(min=0),
    envvar="L4_SERVE_RETENTION_DAYS",
    help="Delete rollups/lines of jobs ingested longer ago (annotations stay).",
)
@click.option(
    "--retention-interval",
    type=click.FloatRange(min=1),
    default=3600.0,
    show_default=True,
    envvar="L4_SERVE_RETENTION_INTERVAL",
    help="Seconds between retention runs.",
)
@click.option(
    "--health-port",
    type=click.IntRange(min=0, max=65535),
    envvar="L4_SERVE_HEALTH_PORT",
    help="Serve /healthz /readyz /metrics on 127.0.0.1 (0 = any free port, logged).",
)
@click.option("--log-json", is_flag=True, envvar="L4_SERVE_LOG_JSON", help="JSON log lines.")
@click.option("--once", is_flag=True, help="Run each task once and exit (cron, CI).")
@click.option("--no-rules", is_flag=True, help="Skip the fault library (and the watch task).")
@click.option("--no-watch", is_flag=True, help="Do not match rules against running jobs.")
@click.option(
    "--stop-grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    envvar="L4_SERVE_STOP_GRACE",
    help="On SIGTERM, seconds to finish an analysis.",
)
@click.option(
    "--max-backoff",
    type=click.FloatRange(min=0.1),
    default=300.0,
    show_default=True,
    envvar="L4_SERVE_MAX_BACKOFF",
    help="Longest wait between retries.",
)
@click.option("--debug-log", is_flag=True, help="Also log skipped claims.")
def serve(**kwargs: Any) -> None:
    """Diagnose every failed job registered in the cluster, on a schedule (see README)."""
    import logging

    from l4_plugin.service import Service, ServiceOptions, setup_logging

    logger = setup_logging(
        json_lines=kwargs.pop("log_json"),
        level=logging.DEBUG if kwargs.pop("debug_log") else logging.INFO,
    )
    options = ServiceOptions(
        lease_seconds=kwargs.pop("lease"),
        rules=not kwargs.pop("no_rules"),
        watch=not kwargs.pop("no_watch"),
        **kwargs,
    )
    code = Service(STATE.settings, options, logger).run()
    if code:
        raise click.exceptions.Exit(code)


@app.group()
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
@click.argument("job_id", callback=_job_id)
@click.option(
    "--status", required=True, type=click.Choice(["running", "failed", "succeeded", "unknown"])
)
@click.option("--fingerprint", help="Configuration fingerprint (jobs that share one compare).")
def job_register(job_id: str, status: str, fingerprint: str | None) -> None:
    """Register JOB_ID (or update its status); failed + ingested jobs get diagnosed."""
    from l4_plugin.service.registry import register_job

    with open_cluster(STATE.settings) as store:
        store.install_templates()
        state, created = register_job(store, job_id, status, fingerprint=fingerprint)
        out.print(f"{'registered' if created else 'updated'} in {store.names.jobs}")
        _print_job(state)


@job.command("status")
@click.argument("job_id", callback=_job_id)
@click.argument(
    "new_status",
    required=False,
    metavar="[NEW_STATUS]",
    type=click.Choice(["running", "failed", "succeeded", "unknown"]),
)
def job_status(job_id: str, new_status: str | None) -> None:
    """Show JOB_ID's status and analysis state; NEW_STATUS (running, failed, succeeded,
    unknown) changes the status first — e.g. running → failed makes `l4 serve` diagnose it."""
    from l4_plugin.service.registry import job_state, set_status

    with open_cluster(STATE.settings) as store:
        state = set_status(store, job_id, new_status) if new_status else job_state(store, job_id)
        _print_job(state)


def _on_sigterm(signum: int, frame: object) -> None:
    # Turn SIGTERM into a normal exit so context managers stop the embedded cluster.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    STATE.debug = "--debug" in args
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app.main(args=args, prog_name="l4", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        safe_print("error: interrupted", file=sys.stderr)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except L4Error as exc:
        if STATE.debug:
            traceback.print_exc()
        safe_print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        safe_print("error: interrupted", file=sys.stderr)
        return 130
    # Without standalone mode, click returns the code of a ``click.exceptions.Exit`` it caught.
    return code if isinstance(code, int) else 0


def run() -> None:
    """``l4`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
