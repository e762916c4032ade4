"""Shared fixtures: one real osmem-server per test session, a fresh index prefix per test."""

from __future__ import annotations

import itertools
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from elastic_transport import Urllib3HttpNode

from l4_plugin.config import Settings, load_settings
from l4_plugin.store import ElasticsearchStore, EmbeddedCluster, IndexNames, OpenSearchStore, Store

# tests/realruns holds fixtures produced by real PyTorch runs and the script that makes them (it
# needs torch, which is no dependency of L4): nothing there is a test.
collect_ignore = ["realruns"]

_counter = itertools.count()


class JsonOnlyNode(Urllib3HttpNode):
    """Test-only bridge for the Elasticsearch client against osmem.

    The elasticsearch 8/9 client sends ``application/vnd.elasticsearch+json; compatible-with=N``;
    a real Elasticsearch accepts it, osmem answers 406. This node rewrites the two headers to plain
    JSON / NDJSON. The product uses the client's default node class on real clusters.
    """

    def perform_request(
        self, method: str, target: str, body: Any = None, headers: Any = None, **kwargs: Any
    ) -> Any:
        if headers is not None:
            headers = headers.copy()
            for name in ("accept", "content-type"):
                value = headers.get(name)
                if value and "vnd.elasticsearch+" in value:
                    headers[name] = (
                        "application/x-ndjson" if "ndjson" in value else "application/json"
                    )
        return super().perform_request(method, target, body=body, headers=headers, **kwargs)


@pytest.fixture(scope="session")
def osmem_url() -> Iterator[str]:
    """URL of a real osmem-server process shared by the whole session."""
    with EmbeddedCluster(startup_timeout=60) as cluster:
        yield cluster.url


def _prefix() -> str:
    return f"t{os.getpid()}-{next(_counter)}-l4-"


@pytest.fixture
def settings(osmem_url: str, tmp_path: Any) -> Settings:
    """Settings pointing at the session server with a prefix of this test's own."""
    return load_settings(None, es_url=osmem_url, index_prefix=_prefix(), state_dir=tmp_path / "st")


@pytest.fixture
def store(osmem_url: str) -> Iterator[Store]:
    """OpenSearch adapter on osmem, unique prefix, templates installed; indices dropped after."""
    s = OpenSearchStore(osmem_url, IndexNames(_prefix()), retry_backoff=0.05)
    s.install_templates()
    yield s
    s.drop_indices()
    s.close()


@pytest.fixture
def es_store(osmem_url: str) -> Iterator[Store]:
    """Elasticsearch adapter on osmem through the test-only JSON bridge."""
    s = ElasticsearchStore(
        osmem_url, IndexNames(_prefix()), node_class=JsonOnlyNode, retry_backoff=0.05
    )
    s.install_templates()
    yield s
    s.drop_indices()
    s.close()


@pytest.fixture(params=["opensearch", "elasticsearch"])
def any_store(request: pytest.FixtureRequest) -> Store:
    """Both adapters, one after the other."""
    name = "store" if request.param == "opensearch" else "es_store"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


# -- the l4 command in this process (tests/unit and tests/cluster) ---------------------------
@pytest.fixture
def state_env(tmp_path: Path) -> dict[str, str]:
    return {"L4_STATE_DIR": str(tmp_path / "state")}


@pytest.fixture
def in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Any]:
    """``l4 ARGS`` in this process with a clean L4_* environment: (exit code, stdout, stderr)."""
    from l4_plugin import cli

    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("L4_STATE_DIR", str(tmp_path / "state"))
    previous = signal.getsignal(signal.SIGTERM)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    yield run
    signal.signal(signal.SIGTERM, previous)
