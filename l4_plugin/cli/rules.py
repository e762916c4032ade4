"""``l4 rules``: check, test and match the fault library; draft a rule."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from l4_plugin.cli.common import CliState, checked_job_id, out, pass_state
from l4_plugin.display import JSON_ESCAPES, safe_print
from l4_plugin.store import open_cluster


@click.group()
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
@pass_state
def rules_test(cli: CliState, paths: tuple[Path, ...]) -> None:
    """Run the rules' embedded tests (default: the library) in a scratch index prefix."""
    from l4_plugin.cli.rule_commands import checked_rules, library_tests, summarize

    library = checked_rules(paths)
    summary = summarize(library, library_tests(cli.settings, library))
    for line in summary.lines:
        out.print(line, markup=False)
    out.print(f"{summary.rules - summary.failed} of {summary.rules} rules passed their tests")
    if not summary.ok:
        raise click.exceptions.Exit(1)


@rules.command("match")
@click.argument("job_id", callback=checked_job_id)
@click.option(
    "--rules",
    "rule_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Rule files or folders (repeatable; default: the library).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the rule_matches list as JSON.")
@pass_state
def rules_match(cli: CliState, job_id: str, rule_paths: tuple[Path, ...], as_json: bool) -> None:
    """Match the fault rules against an ingested job, root causes first."""
    from l4_plugin.cli.rule_commands import checked_rules, match_text, matches_for, matches_json

    library = checked_rules(rule_paths)
    with open_cluster(cli.settings) as store:
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
    callback=checked_job_id,
    help="Job whose diagnosis to draft from.",
)
@click.option("--id", "rule_id", help="Rule id (kebab-case; default: from the top event).")
@click.option(
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    help="Rules folder or <category>/<id>.yaml file to write (default: print the YAML).",
)
@pass_state
def rules_new(cli: CliState, job_id: str, rule_id: str | None, out_path: Path | None) -> None:
    """Draft a status: draft rule from a job's top events (its annotations)."""
    from l4_plugin.cli.rule_commands import draft_from_job, write_draft

    with open_cluster(cli.settings) as store:
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
