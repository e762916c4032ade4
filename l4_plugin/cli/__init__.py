"""The ``l4`` command line: ``app`` is the click group, ``run`` the console script.

One module per command family; :mod:`l4_plugin.cli.main` holds the group, its global options
and the mapping of errors to exit codes.
"""

from __future__ import annotations

from l4_plugin.cli.main import app, main, run

__all__ = ["app", "main", "run"]
