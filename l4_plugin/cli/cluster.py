"""``l4 setup``, ``l4 status`` and ``l4 cluster up``: the cluster itself."""

from __future__ import annotations

import sys
import time

import click
from rich.table import Table

from l4_plugin.cli.common import CliState, out, pass_state
from l4_plugin.errors import L4Error
from l4_plugin.store import EmbeddedCluster, open_cluster
from l4_plugin.store.embedded import clear_state, write_state


@click.command()
@pass_state
def setup(cli: CliState) -> None:
    """Install (or update) the index templates of every L4 index."""
    with open_cluster(cli.settings) as store:
        info = store.info()
        out.print(f"cluster: {info.flavour} {info.version} at {info.url}")
        for name, action in store.install_templates():
            out.print(f"index template {name}: {action}")


@click.command()
@pass_state
def status(cli: CliState) -> None:
    """Cluster flavour and version, and L4's indices with their document counts."""
    settings = cli.settings
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


@click.group()
def cluster() -> None:
    """The embedded cluster (osmem-server)."""


@cluster.command("up")
@click.option("--port", default=0, show_default=True, help="Port on 127.0.0.1 (0 = any free).")
@pass_state
def cluster_up(cli: CliState, port: int) -> None:
    """Run an embedded cluster in the foreground; other l4 commands use it until Ctrl-C."""
    settings = cli.settings
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
