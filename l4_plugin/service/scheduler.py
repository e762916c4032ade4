"""``l4 serve``: the tasks of :mod:`l4_plugin.service.tasks` on an APScheduler 3 scheduler.

Three units run on their own cadence, in a thread pool, never overlapping themselves:

- ``diagnosis`` every ``interval`` s — discover, then diagnose what was found;
- ``watch`` every ``watch_interval`` s (when rules are on);
- ``retention`` every ``retention_interval`` s (with ``retention_days``).

Each run schedules its successor (a date trigger, unique job id) ``interval`` s after it ends —
fixed delay rather than fixed rate, so a long analysis never piles up skipped runs — or, after a
cluster error, after an exponential backoff capped at ``max_backoff``. The cluster is then
pinged before the next run; when it answers again the index templates are re-installed (an
embedded cluster that restarted has none) and work resumes where the cluster's state says.

Shutdown (SIGTERM, SIGINT): no new runs start; the analysis in progress gets ``stop_grace`` s to
finish. If it does not, its claim is released (``pending``, attempt not counted) and the process
exits at once with status 0 — the analysis thread cannot be interrupted safely, and another
service (or the next start) redoes the job from scratch.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import FrameType

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from l4_plugin.config import Settings
from l4_plugin.diagnosis import ANALYZER_VERSION
from l4_plugin.errors import ConfigError, StoreError
from l4_plugin.rules import Rule, load_rules
from l4_plugin.service import tasks
from l4_plugin.service.claims import ClaimPolicy
from l4_plugin.service.health import HealthServer, Metrics
from l4_plugin.service.logs import log
from l4_plugin.service.tasks import TaskContext
from l4_plugin.store import Store, connect, open_cluster

Step = Callable[[TaskContext], int]


def owner_id() -> str:
    """This process's name in claims: ``host:pid:random`` (unique across restarts)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


class Service:
    """One ``l4 serve`` process; ``run()`` blocks until stopped and returns the exit status."""

    def __init__(self, settings: Settings, logger: logging.Logger, *, once: bool = False) -> None:
        self.settings = settings
        # How it runs: the settings' ``service:`` section; ``once`` (a flag of one run only)
        # runs each task once and exits (cron, CI).
        self.options = settings.service
        self.once = once
        self.logger = logger
        self.owner = owner_id()
        self.stop = threading.Event()
        self.metrics = Metrics(self.owner, settings.redacted_url())
        self.policy = ClaimPolicy(
            owner=self.owner,
            lease_seconds=self.options.lease,
            max_attempts=self.options.max_attempts,
            analyzer_version=ANALYZER_VERSION,
        )
        self._lock = threading.Lock()
        self._active = 0
        self._failures: dict[str, int] = {}
        self._ids = itertools.count()
        self._scheduler: BackgroundScheduler | None = None
        self._ctx: TaskContext | None = None
        self._had_error = False
        self._cluster_lock = threading.Lock()
        self._connected_once = False

    # -- lifecycle -----------------------------------------------------------------------------
    def run(self) -> int:
        """Load the rules, connect (retrying), run the tasks until stopped; the exit status."""
        rules: list[Rule] = load_rules() if self.options.rules else []
        health = self._start_health()
        previous = self._install_signals()
        self.metrics.running = True  # alive from here on, even while the cluster is not
        try:
            with contextlib.ExitStack() as stack:
                store = self._connect(stack)
                if store is None:
                    return 0
                ctx = TaskContext(
                    store,
                    self.settings,
                    self.policy,
                    rules,
                    self.metrics,
                    self.logger,
                    self.stop,
                )
                self._ctx = ctx
                log(
                    self.logger,
                    logging.INFO,
                    "service.started",
                    f"serving {store.names.prefix}* on {store.display_url} as {self.owner} "
                    f"({len(rules)} rules, analyzer {ANALYZER_VERSION})",
                    owner=self.owner,
                    once=self.once,
                )
                if self.once:
                    worker = threading.Thread(target=self._run_once, name="l4-once", daemon=True)
                    worker.start()
                    while worker.is_alive() and not self.stop.wait(0.2):
                        pass
                else:
                    self._start_scheduler()
                    while not self.stop.wait(0.5):
                        pass
                return self._shutdown(ctx, health)
        finally:
            self.metrics.running = False
            if health is not None:
                health.stop()
            self._restore_signals(previous)

    def _install_signals(self) -> dict[int, object]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if not self.stop.is_set():
                log(
                    self.logger,
                    logging.INFO,
                    "service.stopping",
                    f"{signal.Signals(signum).name}: stopping",
                    owner=self.owner,
                )
            self.stop.set()

        previous: dict[int, object] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
        return previous

    def _restore_signals(self, previous: dict[int, object]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _start_health(self) -> HealthServer | None:
        if self.options.health_port is None:
            return None
        try:
            server = HealthServer(
                self.metrics,
                self.options.health_port,
                alive=lambda: self.metrics.running and not self.stop.is_set(),
            ).start()
        except OSError as exc:
            raise ConfigError(
                f"cannot serve the health endpoint on 127.0.0.1:{self.options.health_port}: "
                f"{exc.strerror} — hint: choose another --health-port"
            ) from None
        log(
            self.logger,
            logging.INFO,
            "health.listening",
            f"health endpoint on http://127.0.0.1:{server.port} (/healthz /readyz /metrics)",
            port=server.port,
        )
        return server

    def _connect(self, stack: contextlib.ExitStack) -> Store | None:
        settings = self.settings
        if not settings.es_url:
            store = stack.enter_context(open_cluster(settings))
            log(
                self.logger,
                logging.WARNING,
                "cluster.embedded",
                f"no cluster URL configured: using the embedded cluster at {store.display_url} "
                "(in memory; set L4_ES_URL for a real one)",
            )
            return store
        delay = 1.0
        while True:
            try:
                store = connect(settings)
            except StoreError as exc:
                if self.once:
                    raise
                self.metrics.cluster(False, str(exc))
                log(
                    self.logger,
                    logging.WARNING,
                    "cluster.unreachable",
                    f"{exc}; retrying in {delay:g} s",
                    retry_in=delay,
                )
                if self.stop.wait(delay):
                    return None
                delay = min(delay * 2, self.options.max_backoff)
                continue
            stack.callback(store.close)
            return store

    def _shutdown(self, ctx: TaskContext, health: HealthServer | None) -> int:
        self.stop.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
        deadline = time.monotonic() + self.options.stop_grace
        while self._busy() and time.monotonic() < deadline:
            time.sleep(0.05)
        code = 1 if self.once and self._had_error else 0
        if self._busy():
            released = None
            with contextlib.suppress(StoreError):
                released = tasks.release_current(ctx)
            log(
                self.logger,
                logging.INFO,
                "service.stopped",
                f"stopped after {self.options.stop_grace:g} s grace"
                + (f"; analysis of {released} released" if released else ""),
                owner=self.owner,
                released=released,
            )
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            if health is not None:
                health.stop()
            # The analysis thread cannot be interrupted and would keep the interpreter alive.
            os._exit(code)
        log(self.logger, logging.INFO, "service.stopped", "stopped", owner=self.owner)
        return code

    def _busy(self) -> bool:
        with self._lock:
            return self._active > 0

    # -- units ---------------------------------------------------------------------------------
    def _units(self) -> dict[str, tuple[float, list[tuple[str, Step]]]]:
        opts = self.options
        units: dict[str, tuple[float, list[tuple[str, Step]]]] = {
            "diagnosis": (
                opts.interval,
                [("discover", tasks.discover), ("diagnose", tasks.diagnose)],
            )
        }
        if opts.watch and opts.rules:
            units["watch"] = (opts.watch_interval, [("watch", tasks.watch)])
        if opts.retention_days is not None:
            units["retention"] = (opts.retention_interval, [("retention", tasks.retention)])
        return units

    def _start_scheduler(self) -> None:
        self._scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={"default": ThreadPoolExecutor(max_workers=3)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        self._scheduler.start()
        for unit in self._units():
            self._schedule(unit, 0.0)

    def _schedule(self, unit: str, delay: float) -> None:
        scheduler = self._scheduler
        if scheduler is None or self.stop.is_set():
            return
        with contextlib.suppress(Exception):  # the scheduler shut down meanwhile
            scheduler.add_job(
                self._run_unit,
                "date",
                run_date=datetime.now(UTC) + timedelta(seconds=delay),
                args=[unit],
                id=f"{unit}-{next(self._ids)}",
                name=unit,
            )

    def _run_once(self) -> None:
        for unit in self._units():
            if self.stop.is_set():
                return
            self._run_unit(unit, reschedule=False)

    def _run_unit(self, unit: str, reschedule: bool = True) -> None:
        interval, steps = self._units()[unit]
        with self._lock:
            self._active += 1
        ok = True
        try:
            for name, step in steps:
                if self.stop.is_set() or not self._step(name, step):
                    ok = False
                    break
        finally:
            with self._lock:
                self._active -= 1
        failures = 0 if ok else self._failures.get(unit, 0) + 1
        if self.stop.is_set():
            return
        self._failures[unit] = failures
        if reschedule:
            delay = interval
            if failures:
                delay = min(self.options.max_backoff, max(interval, 1.0) * 2 ** (failures - 1))
            self._schedule(unit, delay)

    def _step(self, name: str, step: Step) -> bool:
        ctx = self._ctx
        assert ctx is not None
        self.metrics.task_started(name)
        error: str | None = None
        try:
            self._ensure_cluster(ctx.store)
            step(ctx)
        except StoreError as exc:
            error = str(exc)
            if self.metrics.cluster(False, error) or self.once:
                log(
                    self.logger,
                    logging.ERROR,
                    "cluster.unreachable",
                    f"{name}: {error}; backing off",
                    task=name,
                )
            else:
                log(self.logger, logging.WARNING, "task.error", f"{name}: {error}", task=name)
        except Exception as exc:
            # A bug in a task must not stop the service: log it with its traceback, go on.
            error = f"{type(exc).__name__}: {exc}"
            log(
                self.logger,
                logging.ERROR,
                "task.error",
                f"{name} failed: {error}",
                task=name,
                exc_info=True,
            )
        finally:
            self.metrics.task_finished(name, error)
        if error is not None:
            self._had_error = True
        return error is None

    def _ensure_cluster(self, store: Store) -> None:
        """Before a run after a cluster error (or the first run): ping, re-install templates."""
        if self.metrics.cluster_ok:
            return
        with self._cluster_lock:
            if self.metrics.cluster_ok:
                return
            info = store.info()
            try:
                store.install_templates()
            except StoreError as exc:
                if store.names.jobs in {name for name, _ in store.indices()}:
                    # A least-privilege service account may not manage templates: fine as long
                    # as someone ran `l4 setup` (the jobs index exists).
                    log(
                        self.logger,
                        logging.WARNING,
                        "cluster.templates",
                        f"cannot install the index templates ({exc}); using the existing ones",
                    )
                else:
                    raise
            first = not self._connected_once
            self._connected_once = True
            self.metrics.cluster(True)
            log(
                self.logger,
                logging.INFO,
                "cluster.reachable",
                f"{'connected to' if first else 'reachable again:'} {info.flavour} "
                f"{info.version} at {info.url}",
                flavour=info.flavour,
                version=info.version,
            )
