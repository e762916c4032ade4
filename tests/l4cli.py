"""Run the ``l4`` command as a user does: a fresh interpreter, no ``L4_*`` variables leaking in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

L4 = [sys.executable, "-m", "l4_plugin.cli"]


def run_l4(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``l4 ARGS`` with ``env`` added to this process's environment minus its ``L4_*`` names."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
    full_env.update(env or {})
    return subprocess.run(
        [*L4, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False
