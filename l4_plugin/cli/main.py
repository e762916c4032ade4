"""The ``l4`` command: thin wrappers that parse arguments, load settings and call the product.

Errors: an ``L4Error`` prints ``error: …`` on one line and exits 1 (usage errors exit 2);
``--debug`` shows the traceback as well.
"""

from __future__ import annotations

import signal
import sys
import traceback
from pathlib import Path

import click

from l4_plugin import __version__
from l4_plugin.cli.cluster import cluster, setup, status
from l4_plugin.cli.common import CliState
from l4_plugin.cli.dashboards import dashboards
from l4_plugin.cli.diagnose import analyze, diagnose, report
from l4_plugin.cli.ingest import ingest, parse
from l4_plugin.cli.rules import rules
from l4_plugin.cli.serve import job, serve
from l4_plugin.cli.simulate import simulate
from l4_plugin.display import safe_print
from l4_plugin.errors import L4Error


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config", type=click.Path(path_type=Path), help="YAML settings file.")
@click.option("--es-url", help="Cluster URL (default: L4_ES_URL, else the embedded cluster).")
@click.option("--es-user", help="Basic-auth user (password: L4_ES_PASSWORD or --config).")
@click.option("--ca-certs", type=click.Path(path_type=Path), help="CA bundle for https clusters.")
@click.option("--index-prefix", help="Index name prefix (default l4-).")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="l4")
@click.pass_context
def app(
    ctx: click.Context,
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
    state = ctx.ensure_object(CliState)
    state.config_file = config
    state.override(es_url=es_url, es_user=es_user, es_ca_certs=ca_certs, index_prefix=index_prefix)
    state.debug = state.debug or debug


for _command in (
    setup,
    status,
    cluster,
    ingest,
    simulate,
    parse,
    diagnose,
    analyze,
    report,
    rules,
    dashboards,
    serve,
    job,
):
    app.add_command(_command)


def _on_sigterm(signum: int, frame: object) -> None:
    # Turn SIGTERM into a normal exit so context managers stop the embedded cluster.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is known before click parses anything, so that a usage error can show a traceback.
    state = CliState(debug="--debug" in args)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = app.main(args=args, prog_name="l4", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        safe_print("error: interrupted", file=sys.stderr)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except L4Error as exc:
        if state.debug:
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
