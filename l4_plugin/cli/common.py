"""What the ``l4`` commands share: the console, the invocation's state, common options."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from l4_plugin.config import Settings, load_settings
from l4_plugin.display import SafeConsole

out = SafeConsole(highlight=False, soft_wrap=True)


@dataclass
class CliState:
    """The global options of one invocation (``click.Context.obj``), resolved into settings on
    first use.

    ``l4`` makes a fresh one per run (:func:`l4_plugin.cli.main.main`), so nothing carries over
    between invocations in one process; tests may pass their own with ``CliRunner.invoke(obj=…)``.
    """

    config_file: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    debug: bool = False
    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        """The settings: flags (``overrides``) > environment > ``--config`` file > defaults."""
        if self._settings is None:
            self._settings = load_settings(self.config_file, **self.overrides)
        return self._settings

    def override(self, **values: Any) -> None:
        """Add command flags (None = not given) to the overrides, before settings are read."""
        self.overrides.update(values)
        self._settings = None


# Commands that read settings take the invocation's CliState as first argument.
pass_state = click.make_pass_decorator(CliState, ensure=True)


def size_options(f: Any) -> Any:
    """The read limits of a job directory: ``--max-file-size`` / ``--max-job-size`` and the
    decompression guard (``--max-inflate-ratio``, ``--max-inflated-size``,
    ``--max-read-seconds``); ``read_limits`` takes them as keyword arguments."""
    options = [
        click.option(
            "--max-read-seconds",
            type=click.FloatRange(min=0, min_open=True),
            help="Most seconds reading and inflating one compressed log may take; the file is "
            "cut there (default 60; L4_MAX_READ_SECONDS).",
        ),
        click.option(
            "--max-inflated-size",
            metavar="SIZE",
            help="Most bytes one compressed log may inflate to; the file is cut there "
            "(default 4G; L4_MAX_INFLATED_SIZE).",
        ),
        click.option(
            "--max-inflate-ratio",
            type=click.FloatRange(min=1, min_open=True),
            help="Most a compressed log may inflate per compressed byte, over any 1 MiB; a file "
            "beyond is cut there, a compression bomb (default 100; L4_MAX_INFLATE_RATIO).",
        ),
        click.option(
            "--max-job-size",
            metavar="SIZE",
            help="Most bytes of logs one job may hold (default 1T; L4_MAX_JOB_SIZE).",
        ),
        click.option(
            "--max-file-size",
            metavar="SIZE",
            help="Most bytes read of one log file, e.g. 500M, 16G (default 16G; L4_MAX_FILE_SIZE).",
        ),
    ]
    for option in options:
        f = option(f)
    return f


#: The flags ``size_options`` adds, by parameter name.
SIZE_FLAGS = (
    "max_file_size",
    "max_job_size",
    "max_inflate_ratio",
    "max_inflated_size",
    "max_read_seconds",
)


def read_limits(cli: CliState, flags: dict[str, Any]) -> Any:
    """The read limits from the ``size_options`` in ``flags`` (taken out of it; set before the
    settings are first read), the environment and the config file."""
    cli.override(**{name: flags.pop(name, None) for name in SIZE_FLAGS})
    return cli.settings.read_limits()


def checked_job_id(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
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


def workers_option(f: Any) -> Any:
    """``--workers N`` and ``--scheduler ADDRESS``: where an ingest's work runs."""
    f = click.option(
        "--scheduler",
        metavar="ADDRESS",
        help="Ingest on a Dask cluster: its scheduler, e.g. tcp://HOST:8786 (default: "
        "L4_INGEST_SCHEDULER, else local processes; needs pip install 'l4-plugin[dask]').",
    )(f)
    return click.option(
        "--workers",
        type=click.IntRange(1, 1024),
        help="Processes scanning the files and building the documents (default: "
        "L4_INGEST_WORKERS, else the cores; with --scheduler: at most this many of its "
        "workers' threads).",
    )(f)
