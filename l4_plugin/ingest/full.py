"""``--full``: every raw line of a job as an ``l4-lines`` document, in a second pass.

Run by the reducer after the lanes have written the job's rollups: it reads every stream again
with the job's final templates, its clock and its placed timeline (``pipeline``), so that each
raw line carries the stage and iteration its rollup has.
"""

from __future__ import annotations

from typing import Any

from l4_plugin.ingest.attempts import split_unit
from l4_plugin.ingest.documents import DocContext, doc_id
from l4_plugin.ingest.jobdir import JobMeta
from l4_plugin.ingest.parser import LineKind, LineParser
from l4_plugin.ingest.rollup import NodeRollup
from l4_plugin.ingest.scanner import chunks
from l4_plugin.ingest.sources import LogStream
from l4_plugin.ingest.stages import default_stage_rules
from l4_plugin.ingest.timeline import UNPLACED
from l4_plugin.store import Store
from l4_plugin.store import fields as F

FULL_CHUNK = 2_000  # raw-line documents per bulk request


def write_full_lines(
    store: Store,
    meta: JobMeta,
    streams: list[LogStream],
    parser: LineParser,
    ctx: DocContext,
) -> int:
    """Index every raw line as an ``l4-lines`` document (``--full``); returns how many.

    A second pass over the streams with the final templates: the stage machine runs again (a
    throwaway ``NodeRollup`` a node) so each line carries the same stage and iteration as its
    rollup. Memory stays bounded: documents go to the cluster in bulk chunks of ``FULL_CHUNK`` as
    the lines are read. Ids are (job, node, file, line): a re-ingest overwrites, never duplicates.
    """
    rules, clock, generation, written = default_stage_rules(), ctx.clock, ctx.generation, 0
    docs: list[tuple[str, dict[str, Any]]] = []

    def sink(
        pos: int,
        raw: str,
        kind: LineKind,
        stage: str,
        iteration: int | None,
        ts_ref: str | None,
        rank: int | None,
        offset: int | None,
    ) -> None:
        template = kind.template
        if template is None:  # a line that was not there in the first pass (a growing file)
            parser.finish()
            template = kind.template
        assert template is not None
        if stage.startswith(UNPLACED):
            stage, iteration = ctx.timeline_of(node).place(
                stage[1:], clock.seconds(ts_ref, cache=False)
            )
        host, attempt = split_unit(node)
        doc: dict[str, Any] = {
            "message": raw,
            "host.name": host,
            "log.file.path": path,
            F.JOB_ID: meta.id,
            F.TEMPLATE_ID: template.id,
            F.STAGE: stage,
            F.LINE: pos,
            F.GENERATION: generation,
        }
        ms = clock.ms(ts_ref, cache=False)
        if ms is not None:
            doc["@timestamp"] = ms
        if kind.level:
            doc["log.level"] = kind.level
        if rank is not None:
            doc[F.RANK] = rank
        if iteration is not None:
            doc[F.ITERATION] = iteration
        if offset is not None:
            doc["log.offset"] = offset
        if pos in long_lines:
            doc[F.FLAGS] = ["truncated"]
        if attempt is not None:
            doc[F.ATTEMPT] = attempt
        docs.append((doc_id(meta.id, generation, node, path, pos), doc))
        if len(docs) >= FULL_CHUNK:
            nonlocal written
            written += store.bulk_index(store.names.lines, docs)
            docs.clear()

    rollup = None  # one a node (its files are consecutive), as the first pass scans them
    for stream in streams:
        node, path, long_lines = stream.node, stream.path, set[int]()
        if rollup is None or rollup.node != node:
            rollup = NodeRollup(node, rules)
        read = chunks(stream, parser, None, long_lines)
        try:
            rollup.scan(path, stream.rank, read, long_lines, sink)
        except OSError:
            continue  # reported by the first pass
    written += store.bulk_index(store.names.lines, docs)
    return written
