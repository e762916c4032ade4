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
from rich.console import Console
from rich.table import Table

from l4_plugin import __version__
from l4_plugin.config import Settings, load_settings
from l4_plugin.errors import L4Error
from l4_plugin.store import EmbeddedCluster, open_cluster
from l4_plugin.store.embedded import clear_state, write_state

out = Console(highlight=False)


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


def _on_sigterm(signum: int, frame: object) -> None:
    # Turn SIGTERM into a normal exit so context managers stop the embedded cluster.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    STATE.debug = "--debug" in args
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app.main(args=args, prog_name="l4", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        print("error: interrupted", file=sys.stderr)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except L4Error as exc:
        if STATE.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


def run() -> None:
    """``l4`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    run()
