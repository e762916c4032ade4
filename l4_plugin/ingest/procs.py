"""The processes ingest works in: how many, the forkserver they start from, and the pools.

Two kinds of pools, one owner:

- ``map_in_workers`` and the scan's pool (``workers._partials``) run in processes started from a
  *forkserver* (``context``): started once per ``l4`` (``start_server``, while the job's files are
  discovered), it has imported the L4 modules the parent had (``_preload``), so each process it
  forks starts in ~0.02 s with them;
- ``fork_pool`` forks children of the calling process itself, which see a large object of the
  parent (the document builders' rollups) without pickling it: ``forked_state``.

How many: ``default_workers`` (the cores this process may use) and ``auto_workers`` (fewer for a
small job, ``AUTO_BYTES_PER_WORKER``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import multiprocessing.pool
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from l4_plugin.errors import IngestError

_In = TypeVar("_In")
_Out = TypeVar("_Out")
#: A job smaller than this per worker is scanned with fewer workers (a worker process costs
#: ~0.3 s to start; a small job is done before it would have helped).
AUTO_BYTES_PER_WORKER = 32 << 20


def default_workers() -> int:
    """The machine's cores available to this process."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def auto_workers(total_bytes: int) -> int:
    """The processes worth starting for ``total_bytes`` of logs: the cores, fewer for a small
    job (one per ``AUTO_BYTES_PER_WORKER``)."""
    return min(default_workers(), 1 + total_bytes // AUTO_BYTES_PER_WORKER)


def context() -> multiprocessing.context.ForkServerContext:
    """The forkserver context every pool of ingest's worker processes is made from."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_preload())
    return ctx


def _preload() -> list[str]:
    """What the forkserver imports once, so that the processes it forks need not.

    Each process a forkserver starts runs the parent's main script again (as ``__mp_main__``;
    multiprocessing's own ``"__main__"`` preload does not reach the server on CPython 3.11,
    which asks for a ``main_path`` the preparation data does not carry). What that script imports
    is then imported anew in every worker: ``l4_plugin.cli`` for the ``l4`` command (~0.9 s),
    the analysis with numpy and scikit-learn for a script that diagnoses (~3.6 s). Preloading
    the L4 modules the parent has imported makes those imports of the workers' copies of the
    script cache hits: forked from the server, they have them already. The scanners' module
    comes first (every worker runs it); ``warm``, last, builds what a worker's scanner compiles
    and loads first (the masking and stage rules).
    """
    first, last = "l4_plugin.ingest.workers", "l4_plugin.ingest.warm"
    ours = (m for m in sys.modules if m.partition(".")[0] in ("l4_plugin", "l4_simulate"))
    return [first, *sorted(m for m in ours if m not in (first, last)), last]


def start_server() -> None:
    """Start the forkserver now: its imports (``_preload``, ~0.2 s) then run in its own process
    while this one goes on (discovering the job's files), and the first pool's processes fork
    from a server that is ready. Without it the first pool waits for them."""
    context()
    multiprocessing.forkserver.ensure_running()


def map_in_workers(
    func: Callable[[list[_In]], list[_Out]], chunks: list[list[_In]], workers: int
) -> list[list[_Out]]:
    """``[func(chunk) for chunk in chunks]`` in ``workers`` processes (the scan's forkserver:
    started once, it forks the next pool's processes cheaply), results in order."""
    with ProcessPoolExecutor(workers, mp_context=context()) as pool:
        try:
            return list(pool.map(func, chunks))
        except BrokenProcessPool as exc:
            raise IngestError(f"an ingest worker process died — {exc}") from exc


# What the children of ``fork_pool`` read (set by the parent just before it forks, cleared after).
_FORKED: Any = None


def can_fork() -> bool:
    """Whether the platform forks (Linux). A forked child must run nothing but pure work and
    the pickling of its result: no I/O, logging or import that another thread of the parent
    (the embedded cluster's reader, the service's scheduler) could hold a lock of."""
    return "fork" in multiprocessing.get_all_start_methods()


def fork_pool(shared: object, processes: int) -> multiprocessing.pool.Pool:
    """A pool of ``processes`` children forked from this process, in which ``forked_state()``
    is ``shared`` as it was at the fork (shared with the parent's memory, never pickled)."""
    global _FORKED
    _FORKED = shared
    try:
        return multiprocessing.get_context("fork").Pool(processes, _forked_child)
    finally:
        _FORKED = None


def forked_state() -> Any:
    """In a child of ``fork_pool``: the object its parent shared."""
    assert _FORKED is not None  # the parent's, as it was when this process was forked
    return _FORKED


def _forked_child() -> None:
    """A forked child ends on SIGTERM (the parent's handler, a service's graceful stop, would
    keep it waiting) and leaves Ctrl-C to the parent."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
