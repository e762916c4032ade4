"""``l4 dashboards``: saved objects for Kibana and OpenSearch Dashboards."""

from __future__ import annotations

from pathlib import Path

import click

from l4_plugin.cli.common import CliState, out, pass_state


@click.group()
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
@pass_state
def dashboards_export(cli: CliState, out_dir: Path) -> None:
    """Write the saved objects as NDJSON for both tools."""
    from l4_plugin.dashboards import FLAVOURS, export_ndjson

    for flavour in FLAVOURS:
        path = export_ndjson(flavour, out_dir, cli.settings.index_prefix)
        out.print(f"{flavour}: {path}")


@dashboards.command("install")
@click.option("--url", required=True, help="Kibana or OpenSearch Dashboards URL.")
@click.option(
    "--flavour",
    type=click.Choice(["kibana", "opensearch-dashboards"]),
    help="Default: detected from /api/status.",
)
@click.option("--space", help="Kibana space id.")
@pass_state
def dashboards_install(cli: CliState, url: str, flavour: str | None, space: str | None) -> None:
    """Import the saved objects through the tool's saved-objects import API (overwrite)."""
    from l4_plugin.dashboards import install

    settings = cli.settings
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
