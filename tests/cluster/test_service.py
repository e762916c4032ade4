"""``l4 serve`` as a real process against osmem: diagnosis within a few ticks, two services,
kill -9 and lease take-over, SIGTERM mid-analysis, a cluster that goes away, the health endpoint.

Each test has its own index prefix; intervals and leases are short (flags) to keep this fast.
Service logs are read as JSON lines (``--log-json``) from the process's stderr.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.service import claims
from l4_plugin.service.registry import set_status
from l4_plugin.store import EmbeddedCluster, IndexNames, OpenSearchStore, Store
from l4_plugin.store.jobs import job_doc_id
from l4_simulate import simulate

pytestmark = pytest.mark.slow

SERVE = [sys.executable, "-m", "l4_plugin.cli"]
FAST = ["--interval", "0.5", "--watch-interval", "0.5", "--max-backoff", "1", "--log-json"]


class ServiceProcess:
    """One ``l4 serve`` process; its JSON log events are collected as they arrive."""

    def __init__(self, url: str, prefix: str, *args: str, state_dir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("L4_")}
        # Fail fast inside one call; the service's own backoff does the waiting.
        env.update(
            L4_MAX_RETRIES="1",
            L4_RETRY_BACKOFF="0.1",
            L4_REQUEST_TIMEOUT="5",
            L4_STATE_DIR=str(state_dir),
        )
        self.proc = subprocess.Popen(
            [*SERVE, "--es-url", url, "--index-prefix", prefix, "serve", *FAST, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.events: list[dict[str, Any]] = []
        self.other: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._cond:
                if isinstance(event, dict):
                    self.events.append(event)
                else:
                    self.other.append(line)
                self._cond.notify_all()

    def named(self, action: str, job_id: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [
                e
                for e in self.events
                if e.get("event.action") == action
                and (job_id is None or e.get("l4.job.id") == job_id)
            ]

    def wait_for(self, action: str, *, timeout: float = 60, after: int = 0) -> dict[str, Any]:
        """The ``after``-th (0-based) event ``action``, waiting up to ``timeout`` s for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = self.named(action)
                if len(found) > after:
                    return found[after]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(
                        f"no {action!r} event (exit {self.proc.poll()}); log:\n{self.log()}"
                    )
                self._cond.wait(min(left, 0.2))

    def log(self) -> str:
        with self._cond:
            return "\n".join([json.dumps(e) for e in self.events[-40:]] + self.other[-20:])

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Kill the process if it still runs, and close its pipes once its log is read."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    started: list[ServiceProcess] = []

    def start(url: str, prefix: str, *args: str) -> ServiceProcess:
        proc = ServiceProcess(url, prefix, *args, state_dir=tmp_path / "state")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    simulate(out, nodes=4, iterations=30, fault="nccl-ib-error", seed=1, baselines=0)
    return out / "job"


def job_source(store: Store, job_id: str) -> dict[str, Any]:
    doc = store.get(store.names.jobs, job_doc_id(job_id))
    return {} if doc is None else doc.source


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def annotations(store: Store, job_id: str) -> list[dict[str, Any]]:
    store.refresh(store.names.annotations)
    if not store.count(store.names.annotations):
        return []
    body = {"size": 1000, "query": {"term": {"l4.job.id": job_id}}}
    return store.search(store.names.annotations, body)["hits"]["hits"]  # type: ignore[no-any-return]


def get_json(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def state_of(store: Store, job_id: str) -> str | None:
    return job_source(store, job_id).get(claims.STATE)


def test_failed_job_diagnosed_running_job_watched_health_sigterm(
    store: Store, osmem_url: str, job_dir: Path, services: Any
) -> None:
    prefix = store.names.prefix
    svc = services(osmem_url, prefix, "--health-port", "0")
    # Jobs arrive while the service runs (it starts on an empty prefix).
    ingest_job(store, job_dir, job_id="svc-failed", status="failed")
    ingest_job(store, job_dir, job_id="svc-running", status="running")
    wait_until("the failed job's analysis", lambda: state_of(store, "svc-failed") == "done")
    kinds = {a["_source"]["l4.annotation.kind"] for a in annotations(store, "svc-failed")}
    assert {"summary", "rule_match", "node"} <= kinds
    done = svc.wait_for("job.diagnosed")
    assert done["l4.job.id"] == "svc-failed" and "ib-port-error-async-event" in done["l4.rules"]

    # The running job gets early rule_match annotations, and no analysis yet.
    svc.wait_for("watch.matched")
    early = annotations(store, "svc-running")
    assert early and {a["_source"]["l4.annotation.kind"] for a in early} == {"rule_match"}
    assert claims.CHECKPOINT in job_source(store, "svc-running")

    port = svc.wait_for("health.listening")["l4.port"]
    assert get_json(port, "/healthz") == (200, {"status": "ok"})
    status, ready = get_json(port, "/readyz")
    assert status == 200 and ready["status"] == "ready"
    status, metrics = get_json(port, "/metrics")
    assert status == 200 and metrics["counters"]["jobs_diagnosed"] >= 1
    assert metrics["tasks"]["diagnose"]["last_ok"] and metrics["tasks"]["watch"]["runs"] >= 1
    assert metrics["cluster"]["reachable"] and metrics["owner"]
    assert get_json(port, "/nope")[0] == 404

    # The platform declares the running job failed: the service diagnoses it.
    set_status(store, "svc-running", "failed")
    wait_until("the second analysis", lambda: state_of(store, "svc-running") == "done")
    kinds = {a["_source"]["l4.annotation.kind"] for a in annotations(store, "svc-running")}
    assert "summary" in kinds
    assert svc.terminate() == 0
    assert svc.named("service.stopped")


def test_two_services_never_analyse_a_job_twice(
    store: Store, osmem_url: str, job_dir: Path, services: Any
) -> None:
    prefix = store.names.prefix
    one = services(osmem_url, prefix, "--no-rules")
    two = services(osmem_url, prefix, "--no-rules")
    jobs = [f"pair-{i}" for i in range(3)]
    for job_id in jobs:
        ingest_job(store, job_dir, job_id=job_id, status="failed")
    for job_id in jobs:
        wait_until(f"{job_id} analysed", lambda j=job_id: state_of(store, j) == "done")
    time.sleep(1.5)  # a few more ticks: a second analysis would show up now
    diagnosed = collections.Counter(
        e["l4.job.id"] for svc in (one, two) for e in svc.named("job.diagnosed")
    )
    assert diagnosed == dict.fromkeys(jobs, 1)
    for job_id in jobs:
        assert job_source(store, job_id)[claims.ATTEMPTS] == 1
    assert one.terminate() == 0 and two.terminate() == 0


def claimer(store: Store, job_id: str, pair: tuple[ServiceProcess, ...]) -> ServiceProcess:
    """The service (of ``pair``) that holds the job's claim: its owner id is host:pid:random."""
    wait_until("the claim", lambda: state_of(store, job_id) == "running")
    pid = int(job_source(store, job_id)[claims.OWNER].split(":")[-2])
    return next(svc for svc in pair if svc.proc.pid == pid)


def test_kill_9_mid_analysis_then_a_restarted_service_finishes(
    store: Store, osmem_url: str, job_dir: Path, services: Any
) -> None:
    prefix = store.names.prefix
    ingest_job(store, job_dir, job_id="crash", status="failed")
    first = services(osmem_url, prefix, "--lease", "2")
    victim = claimer(store, "crash", (first,))
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    src = job_source(store, "crash")
    assert src[claims.STATE] == "running", "the analysis finished before kill -9 landed"
    owner = src[claims.OWNER]

    restarted = services(osmem_url, prefix, "--lease", "2")
    taken = restarted.wait_for("job.lease_taken_over")
    assert taken["l4.previous_owner"] == owner and taken["l4.attempt"] == 2
    wait_until("the analysis", lambda: state_of(store, "crash") == "done")
    src = job_source(store, "crash")
    assert src[claims.ATTEMPTS] == 2 and claims.OWNER not in src
    assert len(restarted.named("job.claimed", "crash")) == 1  # the take-over, nothing else
    hits = annotations(store, "crash")
    keys = [(h["_source"]["l4.annotation.kind"], h["_source"]["l4.annotation.key"]) for h in hits]
    assert len(keys) == len(set(keys)) == restarted.wait_for("job.diagnosed")["l4.findings"] + 1
    assert restarted.terminate() == 0


def test_sigterm_mid_analysis_releases_the_claim_to_the_other_service(
    store: Store, osmem_url: str, job_dir: Path, services: Any
) -> None:
    prefix = store.names.prefix
    pair = (
        services(osmem_url, prefix, "--stop-grace", "0"),
        services(osmem_url, prefix, "--stop-grace", "0"),
    )
    ingest_job(store, job_dir, job_id="term", status="failed")
    first = claimer(store, "term", pair)
    assert first.terminate(timeout=20) == 0
    assert first.named("job.released", "term") and first.named("service.stopped")
    assert not first.named("job.diagnosed")
    other = next(svc for svc in pair if svc is not first)
    claimed = other.wait_for("job.claimed")
    # Released, not failed: the attempt the shutdown interrupted is not counted.
    assert claimed["l4.reason"] == "released" and claimed["l4.attempt"] == 1
    wait_until("the analysis", lambda: state_of(store, "term") == "done")
    assert job_source(store, "term")[claims.ATTEMPTS] == 1
    assert other.terminate() == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_service_waits_for_the_cluster_and_survives_an_outage(job_dir: Path, services: Any) -> None:
    addr = f"127.0.0.1:{_free_port()}"
    url = f"http://{addr}"
    prefix = f"outage-{os.getpid()}-l4-"
    # Started before its cluster exists: it retries with backoff instead of exiting.
    svc = services(url, prefix, "--no-rules", "--health-port", "0")
    svc.wait_for("cluster.unreachable")
    port = svc.wait_for("health.listening")["l4.port"]
    assert get_json(port, "/readyz")[0] == 503
    assert get_json(port, "/healthz")[0] == 200
    cluster = EmbeddedCluster(addr=addr).start()
    try:
        svc.wait_for("cluster.reachable")
        cluster.stop()  # the cluster goes away under a running service
        wait_until("readiness to drop", lambda: get_json(port, "/readyz")[0] == 503, timeout=20)
        time.sleep(1.0)
        assert svc.proc.poll() is None
        cluster = EmbeddedCluster(addr=addr).start()  # back, empty (osmem keeps no data)
        store = OpenSearchStore(url, IndexNames(prefix), retry_backoff=0.05)
        store.install_templates()
        ingest_job(store, job_dir, job_id="outage", status="failed")
        wait_until("the analysis after the outage", lambda: state_of(store, "outage") == "done")
        assert svc.wait_for("cluster.reachable", after=1)["message"].startswith("reachable again")
        assert get_json(port, "/readyz")[0] == 200
        store.close()
        assert svc.terminate() == 0
    finally:
        cluster.stop()
