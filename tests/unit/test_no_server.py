"""The guard of tests/unit/conftest.py holds: starting the embedded cluster here fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.store.embedded import EmbeddedCluster, EmbeddedClusterError
from tests.l4cli import run_l4


def test_starting_a_cluster_fails_in_process() -> None:
    with pytest.raises(EmbeddedClusterError, match="osmem-server"), EmbeddedCluster():
        pass


def test_an_l4_child_process_cannot_start_one_either(tmp_path: Path) -> None:
    res = run_l4("status", env={"L4_STATE_DIR": str(tmp_path)}, timeout=60)
    assert res.returncode != 0
    assert "osmem-server" in res.stderr
