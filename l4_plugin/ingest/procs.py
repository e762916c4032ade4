"""The processes ingest works in: how many, the forkserver they start from, and the pools.

Every pool of local processes is made here (``executor``): discovery's probes
(``map_in_workers``) and the ingest's lanes (``lanes``, one process each) run in processes started
from a *forkserver* (``context``): started once per ``l4`` (``start_server``, while the job's
files are discovered), it has imported the L4 modules the parent had (``_preload``), so each
process it forks starts in ~0.02 s with them.

How many: ``default_workers`` (the cores this process may use) and ``auto_workers`` (fewer for a
small job, ``AUTO_BYTES_PER_WORKER``).

No process outlives the ``l4`` that started it, however it ends (``kill -9`` included). Every
child of a pool (``executor``) watches a *lifeline*: the read end of a pipe whose
only writer is this process (``lifeline``); when the pipe reports end-of-file, its writer is
gone and the child exits. On Linux a child also asks for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``). Multiprocessing's own helpers then end by themselves: the forkserver
exits when every holder of its "alive" pipe (this process and the children it forked) has
closed it, and the resource tracker when every holder of its pipe has. Any executor that runs
work in local processes must make them here (``executor``) to keep that promise.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
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
    first, last = "l4_plugin.ingest.owners", "l4_plugin.ingest.warm"
    ours = (m for m in sys.modules if m.partition(".")[0] in ("l4_plugin", "l4_simulate"))
    return [first, *sorted(m for m in ours if m not in (first, last)), last]


def start_server() -> None:
    """Start the forkserver now: its imports (``_preload``, ~0.2 s) then run in its own process
    while this one goes on (discovering the job's files), and the first pool's processes fork
    from a server that is ready. Without it the first pool waits for them."""
    context()
    multiprocessing.forkserver.ensure_running()


def executor(
    workers: int,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[Any, ...] = (),
) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes forked by the forkserver (``context``), each of which
    ends when this process does (``die_with_parent``) and then runs ``initializer(*initargs)``."""
    return ProcessPoolExecutor(
        workers,
        mp_context=context(),
        initializer=_start_child,
        initargs=(lifeline(), initializer, initargs),
    )


def _start_child(
    line: Connection, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    die_with_parent(line)
    if initializer is not None:
        initializer(*initargs)


def map_in_workers(
    func: Callable[[list[_In]], list[_Out]], chunks: list[list[_In]], workers: int
) -> list[list[_Out]]:
    """``[func(chunk) for chunk in chunks]`` in ``workers`` processes (the scan's forkserver:
    started once, it forks the next pool's processes cheaply), results in order."""
    with executor(workers) as pool:
        try:
            return list(pool.map(func, chunks))
        except BrokenProcessPool as exc:
            raise IngestError(f"an ingest worker process died — {exc}") from exc


#: This process's lifeline: (its pid, the read end, the write end). A forked child inherits
#: its parent's, which the pid tells apart.
_LIFELINE: tuple[int, Connection, Connection] | None = None
#: What a child whose parent died exits with.
ORPHANED = 70
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def lifeline() -> Connection:
    """The read end of this process's lifeline, to give a child: a pipe whose only writer is
    this process, so that the child reads end-of-file when this process is gone, however it
    ended. Made once per process (its writing end stays open until the process exits)."""
    global _LIFELINE
    if _LIFELINE is None or _LIFELINE[0] != os.getpid():
        read, write = multiprocessing.Pipe(duplex=False)
        _LIFELINE = (os.getpid(), read, write)
    return _LIFELINE[1]


def die_with_parent(line: Connection | None) -> None:
    """In a child process: exit (``ORPHANED``) as soon as the process that made ``line``
    (``lifeline``) ends, from a thread that waits for the pipe's end; on Linux, also ask the
    kernel for SIGKILL when the parent process dies (``PR_SET_PDEATHSIG``)."""
    _parent_death_signal()
    if line is None:
        return

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            line.recv_bytes()  # nothing is ever sent: this returns at the pipe's end
        os._exit(ORPHANED)

    threading.Thread(target=watch, name="l4-lifeline", daemon=True).start()


def _parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - no libc to ask
        return
    parent = os.getppid()
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took: nobody will send it
        os._exit(ORPHANED)
