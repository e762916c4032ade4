"""``python -m l4_plugin.cli``: the ``l4`` command (tests run it this way)."""

from __future__ import annotations

from l4_plugin.cli.main import run

run()
