"""Bulk writes on a thread of their own, while the ingest builds the next documents.

The ingest turns rollups into documents node by node; waiting for each bulk response before
building more leaves both the cluster and L4 idle half the time. ``BulkWriter.add`` queues
documents; a thread sends them with ``Store.bulk_index`` (requests sized by bytes, throttled
documents retried with back-off), at most ``queued`` batches ahead, which bounds the memory.
An error on the thread is raised by the next ``add`` or by ``close``.

Batches adapt to the cluster: while it is busy with a request, documents gather into batches of
up to ``batch_docs``; when it is idle, a batch of ``min_docs`` is sent at once, so a small job's
documents do not all wait for the end. Few large requests matter: the embedded cluster spends
~50 ms per request on top of its per-document cost for kept lines (16,542 of them: 13.7 s in
requests of 500, 7.9 s in requests of 2,000; ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import queue
import threading
from collections import defaultdict
from typing import Any

from l4_plugin.store import Store

BATCH_DOCS = 2_000
MIN_DOCS = 200


class BulkWriter:
    """Queues ``(index, id, source)`` documents and writes them from a background thread."""

    def __init__(
        self,
        store: Store,
        *,
        batch_docs: int = BATCH_DOCS,
        min_docs: int = MIN_DOCS,
        queued: int = 4,
    ) -> None:
        self.store = store
        self.batch_docs = batch_docs
        self.min_docs = min(min_docs, batch_docs)
        self.written: dict[str, int] = defaultdict(int)
        self._batches: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
        self._queue: queue.Queue[tuple[str, list[tuple[str, dict[str, Any]]]] | None] = queue.Queue(
            maxsize=queued
        )
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="l4-bulk-writer", daemon=True)
        self._thread.start()

    def add(self, index: str, doc_id: str, source: dict[str, Any]) -> None:
        """Queue one document (same id overwrites, as ``bulk_index``)."""
        batch = self._batches[index]
        batch.append((doc_id, source))
        n = len(batch)
        if n >= self.batch_docs or (n >= self.min_docs and not self._queue.unfinished_tasks):
            self._send(index)

    def close(self) -> dict[str, int]:
        """Send what is left, wait for every request; documents written per index."""
        try:
            for index in list(self._batches):
                if self._batches[index]:
                    self._send(index)
        finally:
            self.stop()
        if self._error is not None:
            raise self._error
        return dict(self.written)

    def stop(self) -> None:
        """Stop the thread after the queued requests (what ``close`` does, without raising)."""
        if self._thread.is_alive():
            self._queue.put(None)  # the thread drains the queue, so this never blocks for long
            self._thread.join()

    def __enter__(self) -> BulkWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _send(self, index: str) -> None:
        if self._error is not None:
            self.stop()
            raise self._error
        batch, self._batches[index] = self._batches[index], []
        self._queue.put((index, batch))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                if self._error is not None:
                    continue  # drain: the caller raises at its next add() or close()
                index, docs = item
                try:
                    self.written[index] += self.store.bulk_index(index, docs)
                except BaseException as exc:
                    self._error = exc
            finally:
                self._queue.task_done()  # unfinished_tasks: 0 when the cluster is idle
