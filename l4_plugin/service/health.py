"""The service's counters and its health endpoint (``l4 serve --health-port N``).

Served on 127.0.0.1 only (put a reverse proxy in front to expose it):

- ``GET /healthz`` — liveness: 200 ``{"status": "ok"}`` while the scheduler runs, 503 once it has
  stopped (a supervisor should restart the process);
- ``GET /readyz`` — readiness: 200 when the last cluster call succeeded, 503 with the last error
  while the cluster is unreachable (the service keeps running and retries);
- ``GET /metrics`` — JSON counters: jobs claimed / diagnosed / failed, watch matches, retention
  deletions, task errors, and per task its last start, end, outcome and duration.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COUNTERS = (
    "jobs_claimed",
    "jobs_diagnosed",
    "jobs_failed",
    "jobs_given_up",
    "jobs_released",
    "claims_lost",
    "leases_taken_over",
    "watch_matches",
    "retention_jobs",
    "retention_deleted_docs",
    "task_errors",
)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


class Metrics:
    """Thread-safe counters and task state, shared by the tasks and the HTTP handler."""

    def __init__(self, owner: str, cluster_url: str) -> None:
        self._lock = threading.Lock()
        self.owner = owner
        self.cluster_url = cluster_url
        self.started = time.time()
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.tasks: dict[str, dict[str, Any]] = {}
        self.cluster_ok = False
        self.cluster_error: str | None = "not connected yet"
        self.running = False

    def add(self, counter: str, n: int = 1) -> None:
        with self._lock:
            self.counters[counter] += n

    def task_started(self, task: str) -> None:
        with self._lock:
            entry = self.tasks.setdefault(task, {"runs": 0, "errors": 0})
            entry["last_start"] = time.time()

    def task_finished(self, task: str, error: str | None) -> None:
        with self._lock:
            entry = self.tasks.setdefault(task, {"runs": 0, "errors": 0})
            entry["runs"] += 1
            entry["last_end"] = time.time()
            entry["last_ok"] = error is None
            entry["last_error"] = error
            if error is not None:
                entry["errors"] += 1
                self.counters["task_errors"] += 1

    def cluster(self, ok: bool, error: str | None = None) -> bool:
        """Record the cluster's reachability; True when it changed."""
        with self._lock:
            changed = ok != self.cluster_ok
            self.cluster_ok = ok
            self.cluster_error = None if ok else error
            return changed

    def snapshot(self) -> dict[str, Any]:
        """Everything ``/metrics`` returns."""
        with self._lock:
            tasks = {
                name: {
                    "runs": e["runs"],
                    "errors": e["errors"],
                    "last_start": _iso(e.get("last_start")),
                    "last_end": _iso(e.get("last_end")),
                    "last_ok": e.get("last_ok"),
                    "last_error": e.get("last_error"),
                    "last_seconds": (
                        round(e["last_end"] - e["last_start"], 3)
                        if e.get("last_end") and e.get("last_start", 0) <= e["last_end"]
                        else None
                    ),
                }
                for name, e in sorted(self.tasks.items())
            }
            return {
                "owner": self.owner,
                "cluster": {
                    "url": self.cluster_url,
                    "reachable": self.cluster_ok,
                    "error": self.cluster_error,
                },
                "started": _iso(self.started),
                "uptime_seconds": round(time.time() - self.started, 1),
                "counters": dict(self.counters),
                "tasks": tasks,
            }


class HealthServer:
    """``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread; ``port`` 0 picks a free one."""

    def __init__(self, metrics: Metrics, port: int, alive: Callable[[], bool]) -> None:
        handler = _handler(metrics, alive)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="l4-health", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(metrics: Metrics, alive: Callable[[], bool]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/healthz":
                ok = alive()
                self._send(200 if ok else 503, {"status": "ok" if ok else "stopped"})
            elif path == "/readyz":
                snap = metrics.snapshot()["cluster"]
                ready = bool(snap["reachable"])
                body = {"status": "ready" if ready else "unavailable", "cluster": snap["url"]}
                if not ready:
                    body["error"] = snap["error"]
                self._send(200 if ready else 503, body)
            elif path == "/metrics":
                self._send(200, metrics.snapshot())
            else:
                self._send(404, {"error": f"no such endpoint {path or '/'}"})

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, indent=1).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # probes every few seconds would drown the service's own log

    return Handler
