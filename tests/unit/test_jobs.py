"""The typed job document (``store/jobs.py``) and the ingest's document builders, no server."""

from __future__ import annotations

import pickle
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.ingest.context import doc_context, survey
from l4_plugin.ingest.documents import (
    Clock,
    DocContext,
    EventTotals,
    node_documents,
    rare_limit,
    this_year,
)
from l4_plugin.ingest.jobdir import job_meta, scan
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.pipeline import (
    IngestSummary,
    completed,
    job_record,
    template_documents,
)
from l4_plugin.ingest.sources import file_streams
from l4_plugin.ingest.workers import scan_streams
from l4_plugin.limits import ReadLimits
from l4_plugin.records import Template
from l4_plugin.store import fields as F
from l4_plugin.store.jobs import AnalysisClaim, IngestState, JobRecord, JobSummary
from l4_simulate import simulate

FULL = JobRecord(
    id="j1",
    status="failed",
    fingerprint="fp",
    config={"model": "m", "tp": "2"},
    origin="registered",
    registered=5,
    timestamp=7,
    purged=9,
    deleted_docs=3,
    summary=JobSummary(
        nodes=("a", "b"),
        progress_nodes=("a",),
        node_count=2,
        lines=100,
        ranks=8,
        template_stats={"t1": (4, 2), "t2": (1, 1)},
        iterations=30,
        system_logs=True,
        system_templates=("t2",),
        skipped_files=1,
        start_ts=7,
        end_ts=70,
    ),
    ingest=IngestState(
        state="done",
        updated=80,
        files=4,
        source="abc",
        events_docs=10,
        lines_docs=20,
        progress={"files": 4, "files_done": 4},
        problems="one\ntwo",
        generation="00000002.aaaaaa",
        sequence=2,
        started=60,
        writing={"generation": "00000003.bbbbbb", "started": 90, "files": 4, "owner": "h:1"},
    ),
    analysis=AnalysisClaim(
        state="running",
        version="0.3.0",
        claimed_by="svc",
        lease_until=100,
        attempts=2,
        error="boom",
        updated=95,
        watch_checkpoint=12,
    ),
    extra={"x.other": 1},
)


def test_record_round_trips() -> None:
    assert JobRecord.from_source(FULL.to_source()) == FULL
    bare = JobRecord(id="j2")
    assert bare.to_source() == {F.JOB_ID: "j2"}
    assert JobRecord.from_source(bare.to_source()) == bare
    assert bare.status_or_unknown == "unknown"


def test_source_round_trips_and_keeps_unknown_fields() -> None:
    source = FULL.to_source()
    assert source[F.JOB_TEMPLATE_STATS] == {"t1": [4, 2], "t2": [1, 1]}
    assert source[F.JOB_NODES] == ["a", "b"] and source["x.other"] == 1
    assert JobRecord.from_source(source).to_source() == source
    # Nested objects (another writer's spelling) read the same as dotted keys.
    nested: dict[str, Any] = {"l4": {"job": {"id": "n", "status": "failed", "nodes": ["z"]}}}
    record = JobRecord.from_source(nested)
    assert (record.id, record.status, record.summary.nodes) == ("n", "failed", ("z",))
    assert record.extra == {}


def _scanned(tmp_path: Path) -> tuple[Any, ...]:
    simulate(tmp_path, nodes=2, iterations=12, fault="nccl-ib-error", seed=3, baselines=0)
    job_dir = tmp_path / "job"
    meta = job_meta(job_dir, job_id="b1")
    found = scan(job_dir, None, None)
    streams = file_streams(found.files, ReadLimits())
    parser = LineParser(known=[])
    scanned = scan_streams(streams, parser, workers=1)
    parser.finish()
    summary = IngestSummary(meta, files=len(streams))
    summary.lines = sum(r.lines for r in scanned.rollups.values())
    return meta, summary, scanned, parser


def _survey(scanned: Any, parser: LineParser) -> Any:
    return survey(scanned.digests, parser.kind_of)


def test_builders_make_the_documents_without_a_server(tmp_path: Path) -> None:
    meta, summary, scanned, parser = _scanned(tmp_path)
    rollups = scanned.rollups
    found = _survey(scanned, parser)
    assert 0 < sum(found.totals.values()) <= summary.lines  # continuation lines join events
    ctx = doc_context(meta.id, "00000001.abcdef", found, scanned.timeline, None)
    totals = EventTotals()
    all_events = []
    for node, rollup in rollups.items():
        events, own, shared = node_documents(ctx, node, rollup)
        lines = own + shared
        totals.add(events)
        all_events.extend(events)
        assert all(d[F.JOB_ID] == "b1" and d["host.name"] == node for _, d in events + lines)
        assert all(d[F.GENERATION] == "00000001.abcdef" for _, d in events + lines)
        assert lines, "the fault's warning lines are kept"
    # Every event is in exactly one rollup; ids are unique; ranks are sorted lists.
    assert sum(d[F.COUNT] for _, d in all_events) == sum(found.totals.values())
    assert len({i for i, _ in all_events}) == len(all_events)
    assert all(d[F.RANKS] == sorted(d[F.RANKS]) for _, d in all_events)
    summary.events_docs = len(all_events)
    job = job_record(summary, found, totals, "src1", 1000)
    assert job.id == "b1" and job.status == meta.status and job.fingerprint == meta.fingerprint
    assert job.summary.nodes == tuple(sorted(rollups)) and job.summary.node_count == 2
    assert job.summary.lines == summary.lines and job.ingest.state == "done"
    first = min(d[F.FIRST_TS] for _, d in all_events if d.get(F.FIRST_TS) is not None)
    assert job.summary.start_ts == first == totals.first == job.timestamp
    assert job.summary.template_stats is not None
    assert set(job.summary.template_stats) == set(found.totals)
    new = parser.new_templates()
    templates = template_documents(new, {}, found.totals, "b1", 1000)
    assert [i for i, _ in templates] == [t.id for t in new]


def test_completed_keeps_the_claim_unless_the_logs_grew() -> None:
    job = replace(FULL, status="unknown", analysis=AnalysisClaim(), ingest=IngestState(source="s1"))
    old = replace(FULL, status="failed", ingest=IngestState(source="s1"))
    old_source = {**old.to_source(), F.ANALYSIS + ".extra": 1}
    same = JobRecord.from_source(completed(job, old_source))
    assert same.analysis == FULL.analysis and same.status == "failed"
    assert same.extra == {F.ANALYSIS + ".extra": 1}  # only the old analysis's unknown fields
    grown = JobRecord.from_source(
        completed(replace(job, status="failed", ingest=IngestState(source="s2")), old_source)
    )
    assert grown.analysis.state is None and grown.analysis.version is None
    assert grown.analysis.attempts == FULL.analysis.attempts


def test_template_documents() -> None:
    docs = template_documents([Template("t1", "a <*>")], {"t1": "ERROR"}, {"t1": 3}, "j", 5)
    assert docs == [
        (
            "t1",
            {
                "@timestamp": 5,
                F.TEMPLATE_ID: "t1",
                F.TEMPLATE_TEXT: "a <*>",
                F.TEMPLATE_FIRST_JOB: "j",
                F.TEMPLATE_LEVEL: "ERROR",
                F.TEMPLATE_OCCURRENCES: 3,
            },
        )
    ]


@pytest.mark.parametrize("stats", [{"t": [1]}, {"t": "x"}])
def test_malformed_template_stats_are_dropped(stats: dict[str, Any]) -> None:
    record = JobRecord.from_source({F.JOB_ID: "j", F.JOB_TEMPLATE_STATS: stats})
    assert record.summary.template_stats == {}


def _scanned_dir(job_dir: Path) -> tuple[Any, DocContext]:
    """A job directory scanned in this process, and its documents' context."""
    found = scan(job_dir, None, None)
    parser = LineParser(known=[])
    scanned = scan_streams(file_streams(found.files, ReadLimits()), parser, workers=1)
    parser.finish()
    return scanned, doc_context("k", "g", _survey(scanned, parser), scanned.timeline, None)


def test_kept_lines_below_error_are_trimmed_but_errors_and_addresses_are_not(
    tmp_path: Path,
) -> None:
    job_dir = tmp_path / "job"
    for n in range(4):
        lines = []
        for i in range(40):
            ts = f"2024-05-01 10:{i // 60:02d}:{i % 60:02d},000"
            lines.append(f"{ts} WARNING dataloader slow at step {i}")  # every node: majority
            lines.append(f"{ts} ERROR allreduce failed at step {i}")  # every node, an error
            lines.append(f"{ts} WARNING peer 10.0.0.{n + 1} did not answer at step {i}")
            lines.append(f"{ts} WARNING link to gpu2 flapped at step {i}")  # names a node
            if n == 0:  # one node repeats a warning: its first and last lines are kept
                lines += [
                    f"{ts} WARNING GPU 3 power cap reached, draw {300 + j} W" for j in range(2)
                ]
        path = job_dir / f"gpu{n}" / "rank0.log"
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(lines) + "\n")
    scanned, ctx = _scanned_dir(job_dir)
    kept: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for node, rollup in scanned.rollups.items():
        events, own, shared = node_documents(ctx, node, rollup)
        for _, d in own + shared:
            kept.setdefault((node, d["message"].split(" ")[3]), []).append(d)
        assert sum(d[F.COUNT] for _, d in events) == rollup.lines  # events count every line
    assert {len(kept[(f"gpu{n}", "dataloader")]) for n in range(4)} == {3}
    assert {len(kept[(f"gpu{n}", "allreduce")]) for n in range(4)} == {40}
    assert {len(kept[(f"gpu{n}", "peer")]) for n in range(4)} == {40}
    assert {len(kept[(f"gpu{n}", "link")]) for n in range(4)} == {40}  # names gpu2: all kept
    power = kept[("gpu0", "GPU")]
    assert len(power) == 32
    assert "step" not in power[0]["message"] and power[0]["message"].endswith("300 W")
    assert power[0][F.LINE] < power[15][F.LINE] < power[16][F.LINE] < power[-1][F.LINE]
    assert power[-1]["@timestamp"] == max(d["@timestamp"] for d in power)


def test_the_clock_reads_year_less_lines_in_the_year_the_job_gives(tmp_path: Path) -> None:
    meta, _, scanned, parser = _scanned(tmp_path)
    found = _survey(scanned, parser)
    assert found.year is not None  # the simulated job's lines carry theirs
    ctx = doc_context(meta.id, "g", found, scanned.timeline, None)
    assert ctx.clock.year == found.year
    kern = "Nov 25 14:00:01 node-1 kernel: a line without a year"
    assert time.gmtime(ctx.clock.seconds(kern) or 0).tm_year == found.year
    # The context travels to the lanes: the clock's year goes with it, its cache does not.
    ctx.clock.ms(kern)
    again = pickle.loads(pickle.dumps(ctx))
    assert again.clock.year == found.year and again.clock.cache == {}
    assert again.bucket_of(3) == ctx.bucket_of(3) and again.timeline.at(1e12) == ctx.timeline.at(
        1e12
    )
    # Digests without a year (every reference year-less): this year.
    nodes = [replace(d, year=None) for d in scanned.digests]
    assert survey(nodes, parser.kind_of).year is None
    assert doc_context(
        "k", "g", survey(nodes, parser.kind_of), scanned.timeline, None
    ).clock.year == (this_year())
    assert Clock(2020).ms("no time") is None


def test_a_majority_templates_lines_of_several_ranks_fold_into_one(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    for n in range(4):
        for r in range(4):
            rank = 4 * n + r
            lines = [
                f"2024-05-01 10:00:0{r},000 ERROR [Rank {rank}] Watchdog caught collective "
                f"operation timeout: SeqNum={100 + rank} ran for 60000{r} ms",
                f"2024-05-01 10:00:0{r},000 ERROR [Rank {rank}] Watchdog caught collective "
                f"operation timeout: SeqNum={200 + rank} ran for 60000{r} ms",
            ]
            if n == 0 and r == 1:  # another word, not another number: not folded
                lines.append(f"2024-05-01 10:00:09,000 ERROR [Rank {rank}] Watchdog caught "
                             "broadcast timeout: SeqNum=7 ran for 5 ms")  # fmt: skip
            path = job_dir / f"gpu{n}" / f"rank{r}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
        (job_dir / f"gpu{n}" / "agent.log").write_text(
            "".join(f"2024-05-01 10:00:1{r},000 ERROR worker {r} failed\n" for r in range(3))
        )
    scanned, ctx = _scanned_dir(job_dir)
    for node, rollup in scanned.rollups.items():
        _, own, shared = node_documents(ctx, node, rollup)
        cascade = [d for _, d in own + shared if "collective" in d["message"]]
        # Two rounds (each rank's first and second line), one line each for the four ranks.
        assert len(cascade) == 2 and {d.get(F.FOLDED) for d in cascade} == {3}
        assert {d[F.RANK] for d in cascade} == {0}  # the earliest rank's line stands for all
        assert {d[F.UNTIL] - d["@timestamp"] for d in cascade} == {3000}  # the last rank's
        assert len([d for _, d in own + shared if "worker" in d["message"]]) == 3  # no rank: as is
        other = [d for _, d in own + shared if "broadcast" in d["message"]]
        assert len(other) == (1 if node == "gpu0" else 0)
        assert not any(F.FOLDED in d for d in other)
    # With --full every raw line is indexed: nothing folds.
    unfolded = replace(ctx, fold=False)
    _, lines, shared = node_documents(unfolded, "gpu1", scanned.rollups["gpu1"])
    assert len(lines) == 8 + 3 and not any(F.FOLDED in d for _, d in lines)
    assert shared == []  # nor packs across nodes


def test_scanners_keep_no_samples_no_rare_template_can_have(tmp_path: Path) -> None:
    # Without baselines only a rare template's lines below the keep level are written. A scanner
    # that has counted more lines of such a kind than the job's rare limit keeps no samples of
    # it: the documents are the same, the partials smaller.
    job_dir = tmp_path / "job"
    for n in range(3):
        lines = []
        for i in range(30):
            ts = f"2024-05-01 10:00:{i:02d},000"
            lines.append(f"{ts} INFO step {i} consumed 512 samples")  # 90 lines: not rare
            lines.append(f"{ts} WARNING slow dataloader at step {i}")  # warnings: always kept
        lines.append("2024-05-01 10:01:00,000 INFO checkpoint 7 written")  # 3 lines: rare
        path = job_dir / f"gpu{n}" / "rank0.log"
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(lines) + "\n")
    found = scan(job_dir, None, None)
    limit = rare_limit(3)
    assert limit == 20

    def documents(rare_limit: int | None) -> tuple[list[Any], int]:
        parser = LineParser(known=[])
        streams = file_streams(found.files, ReadLimits())
        scanned = scan_streams(streams, parser, workers=1, rare_limit=rare_limit)
        parser.finish()
        ctx = doc_context("k", "g", _survey(scanned, parser), scanned.timeline, None)
        kept = sum(len(g.kept) for r in scanned.rollups.values() for g in r.groups.values())
        return [node_documents(ctx, n, r) for n, r in scanned.rollups.items()], kept

    all_samples, kept_all = documents(None)
    dropped, kept_fewer = documents(limit)
    assert dropped == all_samples
    assert kept_fewer < kept_all
    lines = [d for _, own, shared in dropped for _, d in own + shared]
    assert sum("checkpoint" in d["message"] for d in lines) == 3  # the rare one: every line
    assert not any("consumed" in d["message"] for d in lines)


def _slurm_zone_job(job_dir: Path, banner_zone: str, nemo_hour: int) -> None:
    """Two Slurm task files (one per node) that open with a banner stating ``banner_zone`` at
    16:49:58 and go on in NeMo lines stamped without a zone from ``nemo_hour``:50, and a kernel
    log whose syslog stamps state none either."""
    for n, last in ((1, 40), (2, 20)):
        lines = [f"[2025-10-24T16:49:58{banner_zone}] task {n} on gpu{n} (SLURM_LOCALID=0) job 7"]
        for i in range(last):
            lines.append(f"[NeMo I 2025-10-24 {nemo_hour}:{50 + i // 60:02d}:{i % 60:02d} x:1] "
                         f"training step {i} done")  # fmt: skip
        (job_dir / f"train-7-{n}.out").write_text("\n".join(lines) + "\n")
        kern = job_dir / "syslog" / f"gpu{n}.kern.log"
        kern.parent.mkdir(parents=True, exist_ok=True)
        kern.write_text(f"Oct 24 {nemo_hour}:50:10 gpu{n} kernel: [12.5] eth0: link up\n")


def test_stamps_without_a_zone_are_read_in_the_zone_a_banner_beside_them_shows(
    tmp_path: Path,
) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    _slurm_zone_job(job_dir, "-07:00", 16)
    scanned, ctx = _scanned_dir(job_dir)
    assert {d.zone for d in scanned.digests} == {-7 * 3600}
    assert ctx.clock.zone == -7 * 3600
    banner = "[2025-10-24T16:49:58-07:00] task 1 on gpu1 (SLURM_LOCALID=0) job 7"
    nemo = "[NeMo I 2025-10-24 16:50:09 x:1] training step 9 done"
    kern = "Oct 24 16:50:10 gpu1 kernel: [12.5] eth0: link up"
    # The banner's UTC time stays; the unzoned lines are read as its wall clock, not as UTC.
    assert ctx.clock.seconds(nemo) == (ctx.clock.seconds(banner) or 0) + 11
    assert ctx.clock.seconds(kern) == (ctx.clock.seconds(banner) or 0) + 12
    again = pickle.loads(pickle.dumps(ctx))  # the lanes read them so too
    assert again.clock.zone == ctx.clock.zone and again.clock.seconds(nemo) == ctx.clock.seconds(
        nemo
    )
    # Every document of a node is timed on that clock: the banner 2 s before the first step,
    # the kernel's line among the steps, the node that stopped early last printing before the other.
    last = {}
    for node, rollup in scanned.rollups.items():
        events = {
            next(w for w in ("task", "NeMo", "kernel") if w in d["message"]): d
            for _, d in node_documents(ctx, node, rollup)[0]
        }
        steps = events["NeMo"]
        assert steps[F.FIRST_TS] - events["task"][F.FIRST_TS] == 2000
        assert steps[F.FIRST_TS] < events["kernel"][F.FIRST_TS] < steps[F.LAST_TS]
        last[node] = steps[F.LAST_TS]
    assert last["gpu2"] < last["gpu1"]


def test_unzoned_stamps_stay_utc_when_no_file_shows_another_zone(tmp_path: Path) -> None:
    for zone, hour in (("+00:00", 16), ("-07:00", 23), ("Z", 16)):
        job_dir = tmp_path / f"job{zone}{hour}"
        job_dir.mkdir()
        # UTC stated, or a stated zone whose unzoned neighbours read as UTC (23:50 = 16:49-07:00)
        _slurm_zone_job(job_dir, zone, hour)
        scanned, ctx = _scanned_dir(job_dir)
        assert {d.zone for d in scanned.digests} == {None}, zone
        assert ctx.clock.zone == 0
