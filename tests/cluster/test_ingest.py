"""`ingest_job` against a real osmem-server: documents, idempotence, bad input."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from l4_plugin.errors import IngestError
from l4_plugin.ingest.documents import doc_id as _doc_id
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import Store
from l4_simulate import simulate


def _counts(store: Store, job_id: str) -> dict[str, int]:
    q = {"term": {"l4.job.id": job_id}}
    return {k: store.count(store.names.of(k), q) for k in ("events", "lines")}


def test_simulated_job_and_baseline(store: Store, tmp_path: Path) -> None:
    truth = simulate(tmp_path, nodes=4, iterations=30, fault="nccl-ib-error", seed=1, baselines=1)
    base = ingest_job(store, tmp_path / "baselines" / truth.baseline_jobs[0])
    job = ingest_job(store, tmp_path / "job")
    assert base.job.fingerprint == job.job.fingerprint and job.job.status == "failed"
    assert job.nodes == 4 and job.lines > 1000 and not job.problems
    # Rollups are far fewer documents than lines.
    assert 0 < job.events_docs < job.lines / 3
    counts = _counts(store, job.job.id)
    assert counts["events"] == job.events_docs and counts["lines"] == job.lines_docs
    # The root-cause line of the faulty node is kept, with its node and a timestamp.
    hits = store.search(
        store.names.lines,
        {
            "size": 50,
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"l4.job.id": job.job.id}},
                        {"term": {"host.name": truth.faulty_nodes[0]}},
                        {"term": {"log.level": "WARNING"}},
                    ]
                }
            },
        },
    )["hits"]["hits"]
    assert any("port error" in h["_source"]["message"] for h in hits)
    stages = store.search(
        store.names.events,
        {
            "size": 0,
            "query": {"term": {"l4.job.id": job.job.id}},
            "aggs": {"s": {"terms": {"field": "l4.stage"}}},
        },
    )
    assert {b["key"] for b in stages["aggregations"]["s"]["buckets"]} >= {"init", "training"}
    doc = store.get(store.names.jobs, _doc_id(job.job.id))
    assert doc is not None and doc.source["l4.job.node_count"] == 4
    assert doc.source["l4.job.fingerprint"] == job.job.fingerprint


def test_reingest_changes_nothing_and_templates_are_stable(store: Store, tmp_path: Path) -> None:
    simulate(tmp_path, nodes=3, iterations=20, fault="oom", seed=2, baselines=0)
    first = ingest_job(store, tmp_path / "job")
    before = _counts(store, first.job.id)
    templates = store.count(store.names.templates)
    again = ingest_job(store, tmp_path / "job")
    assert again.new_templates == 0
    assert _counts(store, first.job.id) == before
    assert store.count(store.names.templates) == templates


def test_grown_job_leaves_no_stale_documents(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "job"
    log = job / "n1" / "rank0.log"
    log.parent.mkdir(parents=True)
    log.write_text("2024-05-03 10:00:00,000 INFO start\n2024-05-03 10:00:01,000 ERROR boom 1\n")
    first = ingest_job(store, job, job_id="grow", status="running")
    log.write_text("2024-05-03 10:00:00,000 INFO start\n")
    os.utime(log, (1, 1))
    ingest_job(store, job, job_id="grow", status="running")
    assert _counts(store, "grow")["events"] < first.events_docs


def test_bad_bytes_crlf_nul_and_long_line(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / "n1").mkdir(parents=True)
    (job / "n1" / "rank0.log").write_bytes(
        b"2024-05-03 10:00:00,000 INFO ok\r\n"
        b"2024-05-03 10:00:01,000 ERROR bad \xff\xfe bytes\x00 here\r\n"
        + b"2024-05-03 10:00:02,000 WARNING "
        + b"x" * (5 * 1024 * 1024)
        + b"\n"
    )
    summary = ingest_job(store, job, job_id="bytes")
    assert summary.lines == 3
    assert any("rank0.log:3: line of" in p and "truncated" in p for p in summary.problems)
    msgs = [
        h["_source"]
        for h in store.search(
            store.names.lines, {"size": 10, "query": {"term": {"l4.job.id": "bytes"}}}
        )["hits"]["hits"]
    ]
    bad = next(m for m in msgs if "bad" in m["message"])
    assert (
        "\ufffd" in bad["message"] and "\x00" not in bad["message"] and "\r" not in bad["message"]
    )
    long = next(m for m in msgs if m.get("l4.flags"))
    assert long["l4.flags"] == ["truncated"] and len(long["message"]) <= 16384


def test_truncated_gz_indexes_what_was_readable(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / "n1").mkdir(parents=True)
    data = gzip.compress(
        b"".join(b"2024-05-03 10:00:%02d,000 INFO step %d\n" % (i % 60, i) for i in range(20000))
    )
    (job / "n1" / "rank0.log.gz").write_bytes(data[: len(data) // 2])
    (job / "n1" / "rank1.log").write_text("2024-05-03 10:00:00,000 ERROR other rank\n")
    summary = ingest_job(store, job, job_id="trunc")
    assert any("rank0.log.gz" in p and "truncated" in p for p in summary.problems)
    assert summary.lines > 1


def test_empty_job_and_unreadable_files(store: Store, tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"no log files in"):
        ingest_job(store, tmp_path)
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text("")
    with pytest.raises(IngestError, match=r"no readable log lines"):
        ingest_job(store, tmp_path, job_id="empty")
    assert store.count(store.names.events) == 0


def test_unreadable_file_is_reported_and_the_rest_indexed(store: Store, tmp_path: Path) -> None:
    # A dangling symlink cannot be opened even by root (CI runs as root, so chmod 0 would not do).
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").symlink_to(tmp_path / "gone.log")
    (tmp_path / "n1" / "rank1.log").write_text("2024-05-03 10:00:00,000 INFO y\n")
    summary = ingest_job(store, tmp_path, job_id="perm")
    assert any("cannot open log file" in p and "rank0.log" in p for p in summary.problems)
    assert summary.lines == 1


def test_invalid_job_yaml_fails_before_writing(store: Store, tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text("hello\n")
    (tmp_path / "job.yaml").write_text("id: a\nstatus: [failed\n")
    with pytest.raises(IngestError, match=r"job\.yaml:3: invalid YAML"):
        ingest_job(store, tmp_path)
    assert store.count(store.names.events) == 0


def test_job_id_with_index_illegal_characters(store: Store, tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text("2024-05-03 10:00:00,000 INFO hello\n")
    summary = ingest_job(store, tmp_path, job_id='Job/42 "A*B"?')
    assert _counts(store, 'Job/42 "A*B"?')["events"] == summary.events_docs == 1


def test_traceback_is_joined_to_one_record(store: Store, tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text(
        "[rank0]:2024-05-03 10:00:00,000 INFO step\n"
        "[rank0]:Traceback (most recent call last):\n"
        '[rank0]:  File "/x/train.py", line 10, in <module>\n'
        "[rank0]:    main()\n"
        "[rank0]:RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    ingest_job(store, tmp_path, job_id="tb")
    hits = store.search(store.names.lines, {"size": 10, "query": {"term": {"l4.job.id": "tb"}}})
    messages = [h["_source"]["message"] for h in hits["hits"]["hits"]]
    joined = [m for m in messages if m.startswith("[rank0]:Traceback")]
    assert len(joined) == 1 and joined[0].endswith("illegal memory access was encountered")
    assert not any(m.startswith("[rank0]:  File") for m in messages)


def test_a_traceback_pasted_without_its_header_is_one_record(store: Store, tmp_path: Path) -> None:
    # An excerpt that starts mid-traceback, with PyTorch's "[rank0]: " prefix: the space after
    # the prefix separates, the frames' indent is theirs; the exception closes the record.
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text(
        '[rank0]:   File "/x/train.py", line 196, in training_step\n'
        "[rank0]:     self.manual_backward(loss)\n"
        '[rank0]:   File "/x/ddp.py", line 55, in prepare_for_backward\n'
        "[rank0]:     reducer._rebuild_buckets()  # avoids an assert\n"
        "[rank0]: RuntimeError: It looks like your module has parameters that were not used\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/train.py", line 9, in <module>\n'
        "[rank0]: ValueError: bad config\n"
    )
    ingest_job(store, tmp_path, job_id="headless")
    messages = [str(d["message"]) for d in _line_docs(store, "headless")]
    assert len(messages) == 2, messages
    assert messages[0].startswith('[rank0]:   File "/x/train.py"')
    assert messages[0].endswith("parameters that were not used")
    assert messages[1].startswith("[rank0]: Traceback") and messages[1].endswith("bad config")


def test_a_chained_traceback_behind_a_spaced_rank_prefix_is_one_record(
    store: Store, tmp_path: Path
) -> None:
    # PyTorch's "[rank0]: " prefix: "During handling of the above exception" follows it after
    # the separating space, as the traceback's own lines do.
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/train.py", line 3, in <module>\n'
        "[rank0]: KeyError: 'step'\n"
        "[rank0]: \n"
        "[rank0]: During handling of the above exception, another exception occurred:\n"
        "[rank0]: \n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/train.py", line 5, in <module>\n'
        "[rank0]: RuntimeError: checkpoint has no step\n"
    )
    ingest_job(store, tmp_path, job_id="chained")
    messages = [str(d["message"]) for d in _line_docs(store, "chained")]
    records = [m for m in messages if "Error" in m]
    assert len(records) == 1, messages
    assert "KeyError" in records[0] and records[0].endswith("checkpoint has no step")


def test_a_timeless_warning_printed_before_a_stamped_error_stays_before_it(
    store: Store, tmp_path: Path
) -> None:
    # NCCL's WARN carries no time; the error that follows it is stamped. The warning takes the
    # nearer stamp (the error's), and keeps the order they were written in.
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text(
        "[2024-05-03 10:00:00,000] INFO step 1\n"
        "[2024-05-03 10:00:10,000] INFO step 2\n"
        "\n"
        * 40
        + "n1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12\n"
        "[2024-05-03 10:05:00,000] ERROR NCCL watchdog thread terminated with exception\n"
    )
    ingest_job(store, tmp_path, job_id="order")
    res = store.search(
        store.names.events,
        {"size": 100, "query": {"term": {"l4.job.id": "order"}}},
    )
    first = {
        str(h["_source"]["message"]).split("] ")[-1][:20]: h["_source"]["l4"]["first_ts"]
        if "l4" in h["_source"]
        else h["_source"]["l4.first_ts"]
        for h in res["hits"]["hits"]
    }
    warn = next(v for k, v in first.items() if k.startswith("NCCL WARN"))
    error = next(v for k, v in first.items() if k.startswith("ERROR NCCL"))
    assert warn < error


def _line_docs(store: Store, job_id: str) -> list[dict[str, object]]:
    res = store.search(
        store.names.lines,
        {"size": 10000, "query": {"term": {"l4.job.id": job_id}}, "sort": [{"l4.line": "asc"}]},
    )
    return [h["_source"] for h in res["hits"]["hits"]]


@pytest.mark.parametrize("compress", [False, True])
def test_kept_lines_carry_their_byte_offset(store: Store, tmp_path: Path, compress: bool) -> None:
    # Multi-byte characters, CRLF and NUL: the offset counts raw bytes (of the decompressed
    # stream for .gz), not decoded characters.
    raw = (
        "2024-05-03 10:00:00,000 INFO start ✓ héllo\r\n"
        "2024-05-03 10:00:01,000 ERROR first failure\x00\n"
        "2024-05-03 10:00:02,000 INFO step 1\n"
        "2024-05-03 10:00:03,000 ERROR second failure ✗\n"
    ).encode()
    (tmp_path / "n1").mkdir()
    name = "rank0.log.gz" if compress else "rank0.log"
    (tmp_path / "n1" / name).write_bytes(gzip.compress(raw) if compress else raw)
    ingest_job(store, tmp_path, job_id="off")
    starts = [0, *[i + 1 for i, b in enumerate(raw) if b == ord("\n")][:-1]]
    docs = _line_docs(store, "off")
    assert {d["l4.line"]: d["log.offset"] for d in docs} == {
        d["l4.line"]: starts[int(d["l4.line"]) - 1]
        for d in docs  # type: ignore[call-overload]
    }
    assert any(d["l4.line"] == 4 for d in docs)
    failure = next(d for d in docs if d["l4.line"] == 4)
    assert raw[int(failure["log.offset"]) :].startswith(b"2024-05-03 10:00:03,000 ERROR")  # type: ignore[call-overload]


def test_offsets_across_read_blocks(tmp_path: Path) -> None:
    from l4_plugin.ingest.reader import read_blocks

    path = tmp_path / "big.log"
    lines = [f"line {i} " + "é" * (i % 7) for i in range(5000)]
    data = "\n".join(lines).encode() + b"\n"
    path.write_bytes(data)
    seen = []
    for block in read_blocks(path, chunk_bytes=4096):
        seen += [(line, block.offset(i)) for i, line in enumerate(block.lines)]
    expected = [0]
    for line in lines[:-1]:
        expected.append(expected[-1] + len(line.encode()) + 1)
    assert [s[0] for s in seen] == lines and [s[1] for s in seen] == expected


def test_full_indexes_every_line_once(store: Store, tmp_path: Path) -> None:
    truth = simulate(tmp_path, nodes=2, iterations=12, fault="oom", seed=3, baselines=0)
    job = tmp_path / "job"
    compact = ingest_job(store, job)
    full = ingest_job(store, job, full=True)
    jid = truth.job_id
    assert full.lines_docs == full.lines > compact.lines_docs
    assert store.count(store.names.lines, {"term": {"l4.job.id": jid}}) == full.lines
    # Re-ingest: same ids, nothing duplicated; rollups identical to the compact ingest's.
    again = ingest_job(store, job, full=True)
    assert again.lines_docs == full.lines
    assert store.count(store.names.lines, {"term": {"l4.job.id": jid}}) == full.lines
    assert again.events_docs == compact.events_docs
    docs = _line_docs(store, jid)
    f = next(d for d in docs if d.get("l4.iteration") is not None)
    assert f["l4.stage"] == "training" and "log.offset" in f and "l4.template.id" in f
    # Every raw line of one file is there, in order, at its byte offset.
    path = sorted((job / truth.faulty_nodes[0]).glob("rank*.log*"))[0]
    rel = path.relative_to(job).as_posix()
    mine = sorted(
        (d for d in docs if d["log.file.path"] == rel),
        key=lambda d: int(d["l4.line"]),  # type: ignore[call-overload]
    )
    raw = path.read_bytes()
    raw = gzip.decompress(raw) if path.suffix == ".gz" else raw  # offsets: decompressed stream
    # (a Traceback line's document holds the whole joined traceback: it starts with the line)
    assert [str(d["message"]).split("\n")[0] for d in mine] == raw.decode().split("\n")[:-1]
    assert any("\n" in str(d["message"]) for d in mine)
    for d in mine[:50]:
        assert raw[int(d["log.offset"]) :].startswith(str(d["message"]).encode())  # type: ignore[call-overload]


def test_full_memory_is_bounded(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from l4_plugin.ingest import full

    sizes: list[int] = []
    real = store.bulk_index

    def spy(index: str, docs, **kw):  # type: ignore[no-untyped-def]
        docs = list(docs)
        if index == store.names.lines:
            sizes.append(len(docs))
        return real(index, docs, **kw)

    monkeypatch.setattr(store, "bulk_index", spy)
    monkeypatch.setattr(full, "FULL_CHUNK", 100)
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text(
        "".join(f"2024-05-03 10:00:{i % 60:02d},000 INFO step {i}\n" for i in range(1000))
    )
    summary = ingest_job(store, tmp_path, job_id="chunks", full=True)
    assert summary.lines_docs == 1000 and max(sizes) <= 100 and len(sizes) >= 10


def test_error_continuations_join_their_record(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "cont"
    (job / "n1").mkdir(parents=True)
    lines = [
        "[rank0]:[2024-05-01 10:00:00,000] [INFO] [engine.py:1:x] starting",
        "[rank0]:Traceback (most recent call last):",
        '[rank0]:  File "train.py", line 3, in <module>',
        "[rank0]:RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank0]:CUDA kernel errors might be asynchronously reported at some other API call.",
        "[rank0]:For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
        "[rank0]:Exception raised from c10_cuda_check at ../c10/cuda/CUDAException.cpp:43 "
        "(most recent call first):",
        "[rank0]:frame #0: c10::Error::Error(c10::SourceLocation) + 0x57 (0x7f in /lib/libc10.so)",
        "[rank0]:[2024-05-01 10:00:01,000] [INFO] [engine.py:2:x] after",
        "[rank0]:terminate called after throwing an instance of 'c10::DistBackendError'",
        "[rank0]:  what():  [PG 0 Rank 0] Process group watchdog thread terminated with exception",
        "[rank0]:Exception raised from checkTimeout at ../ProcessGroupNCCL.cpp:565 (most recent "
        "call first):",
        "[rank0]:frame #0: c10::Error::Error(c10::SourceLocation) + 0x57 (0x7f in /lib/libc10.so)",
        "[rank0]:[2024-05-01 10:00:02,000] [INFO] [engine.py:2:x] after",
        # Not after an error record: a "frame #" line stays an event of its own.
        "[rank0]:frame #1: <unknown function> + 0x99 (0x7f in /lib/libtorch.so)",
    ]
    (job / "n1" / "rank0.log").write_text("\n".join(lines) + "\n", "utf-8")
    job_id = ingest_job(store, job).job.id
    body = {"size": 100, "query": {"term": {"l4.job.id": job_id}}}
    events = [h["_source"] for h in store.search(store.names.events, body)["hits"]["hits"]]
    texts = [e["l4.template.text"] for e in events]
    assert not any("CUDA kernel errors" in t or "Exception raised" in t for t in texts)
    assert sum(t.startswith("frame #") for t in texts) == 1
    # "terminate called…" and its what() line stay events; the C++ stack after them is joined.
    assert any(t.startswith("terminate called after throwing") for t in texts)
    what = next(e for e in events if "what():" in e["message"])
    assert "Exception raised from checkTimeout" in what["message"]
    err = next(e for e in events if "illegal memory access" in e["l4.template.text"])
    assert err["l4.count"] == 1
    assert "CUDA_LAUNCH_BLOCKING" in err["message"] and "frame #0" in err["message"]
    kept = [h["_source"] for h in store.search(store.names.lines, body)["hits"]["hits"]]
    record = next(k for k in kept if "illegal memory access" in k["message"])
    assert record["message"].startswith("[rank0]:Traceback")
    assert record["message"].endswith("(0x7f in /lib/libc10.so)")


def test_a_record_under_a_collectors_stamps_survives_an_empty_line(
    store: Store, tmp_path: Path
) -> None:
    # kubectl logs --timestamps: two ranks' C++ traces interleave in one pod log, an empty
    # (stamped) line between them; "srun -l" labels a blank line "3: " the same way.
    job = tmp_path / "pod"
    job.mkdir()
    t = "2025-04-08T04:25:43.8353{:02d}Z "
    lines = [
        t.format(0) + "terminate called after throwing an instance of 'c10::DistBackendError'",
        t.format(1) + "  what():  [PG ID 0 Rank 209] Process group watchdog thread terminated",
        t.format(2) + "Exception raised from checkTimeout at ../ProcessGroupNCCL.cpp:618 (most "
        "recent call first):",
        t.format(3) + "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96",
        t.format(4),
        t.format(5) + "frame #1: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233",
        "3: terminate called after throwing an instance of 'c10::DistBackendError'",
        "3: Exception raised from checkTimeout at ../ProcessGroupNCCL.cpp:618 (most recent call "
        "first):",
        "3: ",
        "3: frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96",
    ]
    (job / "worker-1.log").write_text("\n".join(lines) + "\n", "utf-8")
    job_id = ingest_job(store, job).job.id
    body = {"size": 100, "query": {"term": {"l4.job.id": job_id}}}
    events = [h["_source"] for h in store.search(store.names.events, body)["hits"]["hits"]]
    texts = [e["l4.template.text"] for e in events]
    assert not any(t.startswith(("frame #", "Exception raised")) for t in texts), texts
    what = next(e for e in events if "what():" in e["message"])
    assert "frame #1: c10d::ProcessGroupNCCL::watchdogHandler" in what["message"]
    # A C++ scope's "Error::Error(" names no error of its own.
    assert all(
        e.get("log.level") != "ERROR" for e in events if "c10::Error::Error" in e["message"][:40]
    )


def test_reingest_without_status_keeps_the_registered_one(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "reg"
    (job / "n1").mkdir(parents=True)
    (job / "n1" / "rank0.log").write_text("[2024-05-01 10:00:00,000] [INFO] hello\n", "utf-8")
    ingest_job(store, job, status="failed")
    ingest_job(store, job)  # no job.yaml, no --status: "unknown" must not win
    doc = store.get(store.names.jobs, _doc_id("reg"))
    assert doc is not None and doc.source["l4.job.status"] == "failed"


def test_nccl_return_trace_joins_its_warning(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "nccl"
    (job / "n1").mkdir(parents=True)
    prefix = "n1:1215957:1216288 [1]"
    lines = [
        "[2024-05-01 10:00:00,000] [INFO] [engine.py:1:x] step",
        f"{prefix} transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        "10.96.2.17<49563> with status=12 opcode=0",
        f"{prefix} NCCL INFO transport/net.cc:1298 -> 6",
        f"{prefix} NCCL INFO proxy.cc:874 -> 6 [Progress Thread]",
        f"{prefix} NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC",
    ]
    (job / "n1" / "rank0.log").write_text("\n".join(lines) + "\n", "utf-8")
    job_id = ingest_job(store, job).job.id
    body = {"size": 100, "query": {"term": {"l4.job.id": job_id}}}
    events = [h["_source"] for h in store.search(store.names.events, body)["hits"]["hits"]]
    texts = [e["l4.template.text"] for e in events]
    assert not any(" -> <NUM>" in t and "Channel" not in t for t in texts), texts
    warn = next(e for e in events if "Got completion" in e["l4.template.text"])
    assert warn["message"].endswith("proxy.cc:874 -> 6 [Progress Thread]")
    assert any("Channel" in t for t in texts)  # an ordinary INFO line after the trace


def test_new_logs_make_a_finished_analysis_due_again(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "grow"
    (job / "n1").mkdir(parents=True)
    log = job / "n1" / "rank0.log"
    log.write_text("[2024-05-01 10:00:00,000] [INFO] hello\n", "utf-8")
    ingest_job(store, job, status="failed")
    doc = store.get(store.names.jobs, _doc_id("grow"))
    assert doc is not None
    done = {**doc.source, "l4.analysis.state": "done", "l4.analysis.version": "l4-0.1.0"}
    store.put(store.names.jobs, doc.id, done, refresh=True)
    ingest_job(store, job, status="failed")  # unchanged files: the analysis stands
    again = store.get(store.names.jobs, _doc_id("grow"))
    assert again is not None and again.source["l4.analysis.state"] == "done"
    log.write_text("[2024-05-01 10:00:00,000] [INFO] hello\n[2024-05-01 10:00:01,000] [ERROR] x\n")
    os.utime(log, (1, 1))
    ingest_job(store, job, status="failed")
    grown = store.get(store.names.jobs, _doc_id("grow"))
    assert grown is not None and "l4.analysis.state" not in grown.source


def test_job_records_its_system_log_templates(store: Store, tmp_path: Path) -> None:
    job = tmp_path / "sys"
    (job / "n1").mkdir(parents=True)
    (job / "n1" / "rank0.log").write_text("[2024-05-01 10:00:00,000] [INFO] hello\n", "utf-8")
    (job / "n1" / "kern.log").write_text(
        "May  1 10:00:05 n1 kernel: [100.000001] NVRM: Xid (PCI:0000:3b:00): 79, GPU has "
        "fallen off the bus.\n",
        "utf-8",
    )
    ingest_job(store, job, status="failed")
    doc = store.get(store.names.jobs, _doc_id("sys"))
    assert doc is not None and doc.source["l4.job.system_logs"] is True
    body = {"size": 10, "query": {"term": {"l4.job.id": "sys"}}}
    events = [h["_source"] for h in store.search(store.names.events, body)["hits"]["hits"]]
    xid = next(e["l4.template.id"] for e in events if "Xid" in e["l4.template.text"])
    hello = next(e["l4.template.id"] for e in events if "hello" in e["l4.template.text"])
    assert doc.source["l4.job.system_templates"] == [xid] and hello != xid


def test_iteration_markers_read_by_digit_shape_give_what_the_regexes_give() -> None:
    import re

    from l4_plugin.ingest.header import digit_shape
    from l4_plugin.ingest.stages import IterationRule, StageRules, digit_blind

    assert digit_blind(re.compile(r"(?i)\bstep\s*(\d+)[\w.]*\s+[^0-9]"))
    assert not digit_blind(re.compile(r"step 1(\d+)"))  # a digit literal
    assert not digit_blind(re.compile(r"step ([0-5]+)"))  # a range holding some digits
    assert not digit_blind(re.compile(r"(\d)\1"))  # a back-reference
    rules = StageRules.load()
    assert all(r._blind() for r in rules.iterations)  # the shipped rules get the cache
    lines = [
        "step 7 | loss 3.1 | step_time 5.463s",
        "step 8 | loss 3.1 | step_time 0.s",  # same shape as the next: the values differ
        "step 9 | loss 3.1 | step_time ..s",
        "step 19 | loss 2.0 | step_time 412ms",
        "step 12 | loss 2.0 | step_time 999ms",
        " 50%|#####     | 500/1000 [00:10<00:10, 0.0it/s]",
        " 60%|######    | 600/1000 [00:10<00:10, 2.5it/s]",
    ]
    for rule in rules.iterations:
        for raw in lines:
            assert rule.read(raw, digit_shape(raw)) == (rule.number_of(raw), rule.seconds_of(raw))
    picky = IterationRule("picky", re.compile("x"), re.compile(r"step 1(\d)"))
    assert picky.read("step 12", digit_shape("step 12")) == (2, None)
    assert picky.read("step 22", digit_shape("step 22")) == (None, None)


def test_rank_prefixes_read_by_digit_shape_give_what_rank_prefix_gives() -> None:
    from l4_plugin.ingest import header, hosts
    from l4_plugin.ingest.stages import digit_blind

    patterns = (
        header._RANK_PREFIX,
        header._SRUN_PREFIX,
        header._CRI,
        header._KUBECTL,
        header._RAY,
        header._PREFIX_PART,
        hosts._HOST_LABEL,  # hosts.plan: whether a line names a host, by digit shape
    )
    assert all(digit_blind(p) for p in patterns)
    lines = [
        "[rank3]: x",
        "[rank4]: y",
        "[rank12] [2025-01-01 00:00:00] z",
        "[rank34] [2025-01-01 00:00:00] z",
        "[default3]:[rank27]: w",
        "[default4]:[rank21]: w",
        "[1,7]<stdout>:hello",
        "[1,8]<stdout>:hello",
        "12: srun line",
        "34: srun line",
        "2024-05-03T10:11:12.123456789Z stdout F [rank5]: cri",
        "2024-05-03T10:11:12.923456789Z stdout F [rank6]: cri",
        "plain line 1",
        "[default3]: x",
        "[default4]: x",
        "[default12]: y",
        "[default1]:[rank9]: z",
    ]
    for raw in lines:
        assert header.rank_prefix_cached(raw) == header.rank_prefix(raw)
        for shape in (header.digit_shape(raw), raw.translate(str.maketrans("123456789", "0" * 9))):
            # by the line's shape or the parser's key: the spans found once, then reused
            assert header.rank_prefix_cached(raw, shape) == header.rank_prefix(raw)
            assert header.rank_prefix_cached(raw, shape) == header.rank_prefix(raw)
        if raw.startswith("["):  # hosts.plan's shortcut: such a line names no host
            assert hosts.line_label(raw)[0] is None
    assert hosts.line_label("[pod/trainer-3/pytorch] x")[0] == "trainer-3"


def test_a_platforms_job_yaml_and_json_lines_logs_are_read(store: Store, tmp_path: Path) -> None:
    # A scheduler's own keys beside id/status/config, and one JSON-lines file per host with the
    # kernel's lines among the ranks' (a collector's output): warnings, never a refusal.
    import json

    job = tmp_path / "job"
    job.mkdir()
    (job / "job.yaml").write_text(
        "id: js-1\nstatus: failed\nstarted: 2025-09-12T07:15:00Z\nnodelist: a3-[1-2]\n"
        "partition: batch\nconfig:\n  model: x\n"
    )
    t0 = 1757661300.0  # 2025-09-12T07:15:00Z
    for host in ("a3-1", "a3-2"):
        rows = [
            {"ts": t0 + i, "host": host, "rank": r, "stream": "stdout", "msg": f"step {i} loss 2.5"}
            for i in range(1, 20)
            for r in (0, 1)
        ]
        if host == "a3-2":
            rows.append({"ts": t0 + 20, "host": host, "stream": "kernel", "msg": "NVRM: Xid 79"})
            rows.append({"ts": t0 + 21, "host": host, "rank": 3, "msg": "RuntimeError: CUDA error"})
        (job / f"{host}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = ingest_job(store, job)
    assert (summary.job.id, summary.job.hosts, summary.nodes) == ("js-1", ("a3-1", "a3-2"), 2)
    assert any("key 'partition' in job.yaml ignored" in p for p in summary.problems)
    store.refresh(store.names.lines)
    hits = store.search(
        store.names.lines,
        {
            "query": {
                "bool": {
                    "filter": [{"term": {"l4.job.id": "js-1"}}, {"term": {"host.name": "a3-2"}}]
                }
            },
            "size": 50,
        },
    )["hits"]["hits"]
    by_text = {h["_source"]["message"]: h["_source"] for h in hits}
    xid = next(s for m, s in by_text.items() if "Xid 79" in m)
    assert xid["@timestamp"] == int((t0 + 20) * 1000)  # the collector's time, not borrowed
    err = next(s for m, s in by_text.items() if "CUDA error" in m)
    assert err["log.level"] == "ERROR" and err["l4.rank"] == 3
