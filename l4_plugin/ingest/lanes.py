"""Where ingest's tasks run: *lanes*, each one process that keeps what its tasks scanned.

An ingest cuts the job into batches of whole nodes (``workers``); the lane that scans a node keeps
its rollup (``owners``) and later builds and writes that node's documents. Every lane is a
``concurrent.futures`` executor whose tasks run one after the other in one process, so that the
second task finds what the first left there:

- **local processes** (the default, ``--workers N``): one process per lane, made by
  ``procs.executor`` (the forkserver's, each ending with its ``l4``); a lane may have
  ``LOCAL_DEPTH`` tasks queued, which it runs in order;
- **in this process** (one worker, or streams that are not files): tasks run as they are
  submitted, in the calling thread;
- **a Dask cluster** (``--scheduler tcp://HOST:8786``, ``pip install l4-plugin[dask]``): one lane
  per thread of every worker of the cluster, through ``distributed.Client.get_executor`` pinned to
  that worker. Dask promises no order among a worker's queued tasks, so such a lane has one task
  at a time. Every worker must read the job's files at the same paths (a shared filesystem) and
  reach the search cluster at the same URL.

``dask`` is imported only when a scheduler is given.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from l4_plugin.errors import IngestError
from l4_plugin.ingest import procs

#: Tasks a local process lane may have queued: the one it runs and the next, so that it never
#: waits for the reducer between two batches.
LOCAL_DEPTH = 2
#: How long to wait for a Dask scheduler to answer (seconds).
CONNECT_TIMEOUT = 30


@dataclass(frozen=True)
class Lane:
    """One process's share of an ingest: ``id`` names its state there (``owners``), ``depth``
    is how many of its tasks may be queued at once."""

    id: int
    executor: Executor
    depth: int = 1
    where: str = ""  # what the lane runs on, for messages


class InlineExecutor(Executor):
    """Runs each task when it is submitted, in the calling thread (a lane in this process)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to whoever reads the future, as a pool would
            future.set_exception(exc)
        return future


def inline_lanes() -> list[Lane]:
    """One lane: this process."""
    return [Lane(0, InlineExecutor(), 1, "this process")]


@contextmanager
def open_lanes(workers: int, scheduler: str | None = None) -> Iterator[list[Lane]]:
    """The lanes of one ingest: ``workers`` local processes (1: this process), or with
    ``scheduler`` the threads of a Dask cluster's workers (at most ``workers`` of them when given
    explicitly; 0: all). They are shut down when the block ends."""
    if scheduler:
        with _dask_lanes(scheduler, workers) as lanes:
            yield lanes
        return
    if workers <= 1:
        yield inline_lanes()
        return
    pools = [procs.executor(1) for _ in range(workers)]
    try:
        yield [Lane(i, pool, LOCAL_DEPTH, f"local process {i + 1}") for i, pool in enumerate(pools)]
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def _dask_lanes(scheduler: str, limit: int) -> Iterator[list[Lane]]:
    try:
        from distributed import Client
    except ImportError:
        raise IngestError(
            f"--scheduler {scheduler}: dask is not installed (pip install 'l4-plugin[dask]')"
        ) from None
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise IngestError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        lanes: list[Lane] = []
        for address, info in sorted(workers.items()):
            for _ in range(int(info.get("nthreads", 1))):
                executor = client.get_executor(
                    workers=[address], allow_other_workers=False, pure=False
                )
                lanes.append(Lane(len(lanes), executor, 1, f"Dask worker {address}"))
        if limit > 0:
            lanes = lanes[:limit]
        if not lanes:
            raise IngestError(f"the Dask scheduler {scheduler} has no workers")
        yield lanes
    finally:
        client.close()


def lane_token() -> str:
    """A name for one ingest's state in its lanes' processes (unique across processes)."""
    return f"{os.getpid()}-{threading.get_ident()}-{os.urandom(6).hex()}"
