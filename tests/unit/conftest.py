"""tests/unit runs without any server: starting one, in this process or a child, fails.

``osmem-server`` is found through ``OSMEM_SERVER_BIN`` first; pointing it at nothing makes both
the session's cluster fixture and an ``l4`` child process that would start the embedded cluster
fail at once, so a test that needs a cluster cannot sit here unnoticed (put it in tests/cluster).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

NO_SERVER = "/nonexistent/osmem-server (tests/unit runs without a server)"


@pytest.fixture(autouse=True)
def _no_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OSMEM_SERVER_BIN", NO_SERVER)
    monkeypatch.delenv("L4_ES_URL", raising=False)
    yield


@pytest.fixture(scope="session")
def osmem_url() -> str:
    """Overrides the cluster fixture of tests/conftest.py: a unit test asking for it fails."""
    raise pytest.UsageError("a test in tests/unit asked for the cluster; move it to tests/cluster")
