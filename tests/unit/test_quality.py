"""Lint and type checks run with the suite, so a red ruff or mypy fails CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed next to {sys.executable} (pip install -e '.[dev]')")
    return found


def test_ruff_is_clean() -> None:
    res = subprocess.run(
        [_tool("ruff"), "check", "l4_plugin", "simulate", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_is_clean() -> None:
    # No arguments: the packages in pyproject's [tool.mypy], l4_plugin and l4_simulate.
    res = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
