"""Hostile input (issue 15): what L4 reads, what it bounds, what it redacts (see SECURITY.md).

Each test reproduces one way a small or malicious input used to hurt L4 and checks the one-line
error or warning that replaces it. Bombs are small inputs that would blow up without the limit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from l4_plugin import cli
from l4_plugin.errors import ConfigError, IngestError
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.limits import MAX_LINE_CHARS
from l4_plugin.rules import render
from l4_plugin.service.registry import register_job
from l4_plugin.store import Store
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import job_doc_id
from tests.security_inputs import BOMB, LOG, job_dir, rule_file

# 10 levels of 10 aliases: a few hundred bytes that expand to 10**10 values.


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def l4(
    store: Store,
    osmem_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> object:
    """`l4 ARGS` in this process against the session server, with the test's index prefix."""
    for key in list(os.environ):
        if key.startswith("L4_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("L4_ES_URL", osmem_url)
    monkeypatch.setenv("L4_INDEX_PREFIX", store.names.prefix)
    monkeypatch.setenv("L4_STATE_DIR", str(tmp_path / "state"))

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


# -- 3. bounded YAML ------------------------------------------------------------------------------
def test_job_yaml_alias_bomb_is_a_located_error_before_anything_is_written(
    store: Store, tmp_path: Path
) -> None:
    job = job_dir(
        tmp_path / "job", "id: bomb\nstatus: failed\nconfig:\n  " + BOMB.replace("\n", "\n  ")
    )
    with pytest.raises(
        IngestError, match=r"job\.yaml:\d+: invalid YAML in job\.yaml: more than 100,000"
    ):
        ingest_job(store, job)
    assert store.get(store.names.jobs, job_doc_id("bomb")) is None
    store.refresh(store.names.events)
    assert store.count(store.names.events) == 0


def test_rule_file_alias_bomb_is_reported_by_rules_check(l4: object, tmp_path: Path) -> None:
    path = rule_file(tmp_path)
    path.write_text(path.read_text() + "bomb:\n  " + BOMB.replace("\n", "\n  "))
    res = l4("rules", "check", str(path))  # type: ignore[operator]
    assert res.returncode == 1
    assert f"{path}:" in res.stdout + res.stderr
    assert "more than 100,000 values once aliases are expanded" in res.stdout + res.stderr
    assert "MemoryError" not in res.stdout + res.stderr


# -- 3. bounded templates -------------------------------------------------------------------------
def test_nested_range_loops_stop_at_the_time_budget(
    l4: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render, "RENDER_SECONDS", 0.05)
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    path = rule_file(tmp_path, diagnosis=f"'{loops}'")
    res = l4("rules", "check", str(path))  # type: ignore[operator]
    assert res.returncode == 1
    assert (
        f"{path}:13: diagnosis: template exceeds its budget: rendering took longer than 0.05 s"
        in (res.stdout + res.stderr)
    )


@pytest.mark.parametrize("bad", ["", " "])
def test_cli_rejects_blank_job_ids(l4: object, tmp_path: Path, bad: str) -> None:
    job = job_dir(tmp_path / "job")
    for args in (
        ("ingest", str(job), "--job-id", bad),
        ("diagnose", str(job), "--job-id", bad),
        ("analyze", bad),
        ("analyze", "ok", "--baseline", bad),
        ("report", bad),
        ("job", "register", bad, "--status", "running"),
        ("job", "status", bad),
        ("rules", "match", bad),
        ("rules", "new", "--from-job", bad),
    ):
        res = l4(*args)  # type: ignore[operator]
        assert res.returncode == 2, args
        assert "Invalid value for" in res.stderr and "is empty" in res.stderr, (args, res.stderr)


def test_registry_validates_job_ids(store: Store) -> None:
    with pytest.raises(ConfigError, match=r"invalid job id — l4 job register — 'a\\nb'"):
        register_job(store, "a\nb", "running")


# -- 2. confinement and size limits ---------------------------------------------------------------
def _hostile_job(root: Path) -> Path:
    """A job whose links point out of it, at /dev/zero, at a FIFO, and once inside it."""
    (root / "outside").mkdir(parents=True)
    (root / "outside" / "shadow").write_text("root:SECRETHASH:19000:0:99999:7:::\n")
    job = job_dir(root / "job")
    node = job / "node-1"
    (node / "rank1.log").symlink_to(root / "outside" / "shadow")
    (node / "rank2.log").symlink_to("/dev/zero")
    os.mkfifo(node / "rank3.log")
    (job / "shared").mkdir()
    (job / "shared" / "rank4.data").write_text("2024-05-01 10:00:01 ERROR INSIDE_LINK reached\n")
    (node / "rank4.log").symlink_to("../shared/rank4.data")
    return job


def _lines_matching(store: Store, text: str) -> int:
    store.refresh(store.names.lines)
    return store.count(store.names.lines, {"match_phrase": {"message": text}})


def test_only_regular_files_inside_the_job_are_read(store: Store, tmp_path: Path) -> None:
    job = _hostile_job(tmp_path)
    summary = ingest_job(store, job, job_id="hostile", full=True)
    assert summary.skipped_files == 3
    skipped = "\n".join(summary.problems)
    assert f"skipped node-1/rank1.log: a link to {tmp_path}/outside/shadow, outside the job" in (
        skipped
    )
    assert "skipped node-1/rank2.log: a link to /dev/zero, outside the job directory" in skipped
    assert "skipped node-1/rank3.log: a FIFO, not a regular file" in skipped
    assert _lines_matching(store, "SECRETHASH") == 0
    assert _lines_matching(store, "INSIDE_LINK") == 1
    doc = store.get(store.names.jobs, job_doc_id("hostile"))
    assert doc is not None and source_field(doc.source, "l4.job.skipped_files") == 3


def test_cli_warns_once_per_skipped_file(l4: object, tmp_path: Path) -> None:
    job = _hostile_job(tmp_path)
    res = l4("ingest", str(job), "--job-id", "hostile")  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if line.startswith("warning: skipped")]
    assert len(warnings) == 3
    assert "warning: skipped node-1/rank3.log: a FIFO, not a regular file" in warnings


def test_size_limits_and_the_flags_that_raise_them(l4: object, tmp_path: Path) -> None:
    job = job_dir(tmp_path / "job")
    (job / "node-1" / "rank1.log").write_text(LOG * 100)  # 5 KB
    res = l4("ingest", str(job), "--job-id", "sized", "--max-file-size", "1K")  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert (
        "warning: skipped node-1/rank1.log: 5.0 KiB, over the per-file limit of 1.0 KiB — hint: "
        "raise --max-file-size"
    ) in res.stderr
    res = l4("ingest", str(job), "--job-id", "sized", "--max-job-size", "2K")  # type: ignore[operator]
    assert res.returncode == 1
    assert "\nerror: job too large — " in "\n" + res.stderr
    assert "over the per-job limit of 2.0 KiB — hint: raise --max-job-size" in res.stderr
    res = l4("ingest", str(job), "--job-id", "sized", "--max-job-size", "1M")  # type: ignore[operator]
    assert res.returncode == 0 and "skipped" not in res.stderr
    res = l4("ingest", str(job), "--max-file-size", "lots")  # type: ignore[operator]
    assert res.returncode == 1
    assert "error: invalid setting max_file_size (command line): 'lots'" in res.stderr


def test_size_limit_from_the_environment(
    l4: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_dir(tmp_path / "job")
    monkeypatch.setenv("L4_MAX_JOB_SIZE", "10")
    res = l4("ingest", str(job), "--job-id", "env")  # type: ignore[operator]
    assert res.returncode == 1 and "over the per-job limit of 10 B" in res.stderr


def test_gzip_is_bounded_by_its_decompressed_size(store: Store, tmp_path: Path) -> None:
    import gzip

    from l4_plugin.limits import ReadLimits

    job = job_dir(tmp_path / "job")
    with gzip.open(job / "node-1" / "rank1.log.gz", "wt") as fh:
        fh.write(LOG * 20_000)  # 1 MB of text, a few KB on disk
    summary = ingest_job(store, job, job_id="gz", limits=ReadLimits(max_file_size=64 * 1024))
    cut = "node-1/rank1.log.gz: more than 64.0 KiB decompressed, over the per-file limit"
    assert any(f"log file cut — {cut}" in p for p in summary.problems)
    assert [c.partition(";")[0] for c in summary.cut_files] == [cut]
    assert 0 < summary.lines < 20_000


def test_baseline_directories_are_confined_too(l4: object, tmp_path: Path) -> None:
    job = job_dir(tmp_path / "job", "id: failed-1\nstatus: failed\n")
    base = job_dir(tmp_path / "base", "id: base-1\nstatus: succeeded\n")
    (tmp_path / "secret").write_text("SECRETHASH\n")
    (base / "node-1" / "rank9.log").symlink_to(tmp_path / "secret")
    res = l4("diagnose", str(job), "--baseline", str(base))  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert f"warning: skipped node-1/rank9.log: a link to {tmp_path}/secret, outside" in res.stderr


# -- 6. binary files and terminal output ----------------------------------------------------------
def test_binary_files_are_skipped_and_counted(store: Store, tmp_path: Path) -> None:
    import random

    job = job_dir(tmp_path / "job")
    (job / "node-1" / "rank1.log").write_bytes(random.Random(0).randbytes(50_000))
    # Not binary: Latin-1 text, and a crash's hole of NULs in a text log.
    (job / "node-1" / "rank2.log").write_bytes(b"2024-05-01 10:00:02 INFO caf\xe9 ok\n" * 50)
    (job / "node-1" / "rank3.log").write_bytes(
        LOG.encode() + b"\x00" * 4096 + b"2024-05-01 10:00:03 INFO after hole\n"
    )
    summary = ingest_job(store, job, job_id="binary")
    assert summary.skipped_files == 1
    assert any(p.startswith("skipped node-1/rank1.log: binary content (") for p in summary.problems)
    assert summary.new_templates < 10  # the random bytes made ~766 templates before
    doc = store.get(store.names.jobs, job_doc_id("binary"))
    assert doc is not None and source_field(doc.source, "l4.job.skipped_files") == 1


def test_log_escapes_never_reach_the_terminal(l4: object, store: Store, tmp_path: Path) -> None:
    job = job_dir(tmp_path / "job", "id: esc-1\nstatus: failed\n")
    evil = "2024-05-01 10:00:05 ERROR boom \x1b]0;pwned\x07\x1b[2J\x1b[31mCUDA error\x9b0m\n"
    (job / "node-1" / "rank0.log").write_text(LOG * 3 + evil)
    res = l4("diagnose", str(job), "--json", str(tmp_path / "r.json"))  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert "boom" in res.stdout
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in res.stdout and ch not in res.stderr
    # The stored line is what a terminal showed: its ANSI sequences (colours, a title, a clear)
    # were drawing, not text (``reader._ANSI``); the rest is kept as logged.
    store.refresh(store.names.lines)
    hits = store.search(store.names.lines, {"query": {"match_phrase": {"message": "boom"}}})
    assert hits["hits"]["hits"][0]["_source"]["message"] == (
        "2024-05-01 10:00:05 ERROR boom CUDA error\x9b0m"
    )


def test_errors_are_cleaned_too(l4: object, tmp_path: Path) -> None:
    res = l4("ingest", str(tmp_path / "no\x1b[2Jsuch"), "--job-id", "ok")  # type: ignore[operator]
    assert res.returncode == 1
    assert f"error: job directory not found — {tmp_path}/nosuch\n" in res.stderr
    assert "\x1b" not in res.stderr


def test_cli_bad_url_is_one_line_without_the_password(l4: object) -> None:
    for url, problem in (
        ("http://elastic:hunter2@[::1", "does not parse"),
        ("http://elastic:hunter2@host:port", "the port is not a number"),
    ):
        res = l4("--es-url", url, "status")  # type: ignore[operator]
        assert res.returncode == 1
        assert res.stderr.count("\n") == 1 and res.stderr.startswith(
            "error: invalid setting es_url"
        )
        assert problem in res.stderr and "hunter2" not in res.stderr + res.stdout
        assert "Traceback" not in res.stderr


def test_store_display_url_never_holds_credentials(osmem_url: str) -> None:
    from l4_plugin.store.names import IndexNames
    from l4_plugin.store.opensearch import OpenSearchStore

    url = osmem_url.replace("http://", "http://elastic:hunter2@")
    s = OpenSearchStore(url, IndexNames("tsec-l4-"))
    try:
        assert "hunter2" not in s.display_url and s.display_url.startswith("http://***@")
    finally:
        s.close()


def test_service_skips_jobs_with_invalid_ids(
    store: Store, settings: object, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from l4_plugin.service import tasks
    from tests.cluster.test_service_claims import context, put_job

    put_job(store, "bad\x1b[2Jid")
    put_job(store, "good")
    ctx = context(store, settings)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="test.l4.service"):
        assert tasks.discover(ctx) == 1
    item = ctx.next_job()
    assert item is not None and item[0] == "good" and ctx.next_job() is None
    assert "skipped: the job id contains the control or format character U+001B" in caplog.text


def test_setup_adds_skipped_files_to_a_jobs_index_of_an_older_l4(store: Store) -> None:
    from typing import Any

    index = store.names.jobs
    client: Any = store.client  # type: ignore[attr-defined]
    client.indices.delete(index=index, ignore_unavailable=True)
    client.indices.delete_index_template(name=index)
    narrow = {
        "dynamic": "strict",
        "properties": {"l4": {"properties": {"job": {"properties": {"id": {"type": "keyword"}}}}}},
    }
    client.indices.create(index=index, body={"mappings": narrow})
    store.install_templates()
    store.bulk_index(index, [("j", {"l4.job.id": "j", "l4.job.skipped_files": 2})], refresh=True)
    assert store.count(index, {"term": {"l4.job.skipped_files": 2}}) == 1


def test_diagnose_checks_every_job_yaml_before_ingesting_baselines(
    l4: object, store: Store, tmp_path: Path
) -> None:
    job = job_dir(tmp_path / "job", "id: failed-2\nconfig:\n  " + BOMB.replace("\n", "\n  "))
    base = job_dir(tmp_path / "base", "id: base-2\nstatus: succeeded\n")
    res = l4("diagnose", str(job), "--baseline", str(base))  # type: ignore[operator]
    assert res.returncode == 1 and "more than 100,000 values" in res.stderr
    assert store.get(store.names.jobs, job_doc_id("base-2")) is None


# -- bounded work: compression bombs and lines without end (issue 34) -----------------------------
def _member(data: bytes) -> bytes:
    import zlib

    out = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: one gzip member
    return out.compress(data) + out.flush()


BOMB_LINE = b"2024-05-01 10:00:09 INFO the same line again and again\n"
ENDLESS = b"2024-05-01 10:00:08 WARNING dump " + b"x" * (5 << 20)


def _hostile_files(root: Path) -> Path:
    """A two-node job, then a gzip bomb (a real member, then 320 MiB of one repeated line in
    20 members: ~300 KB on disk) and a file ending in a 5 MiB line without a newline."""
    job = job_dir(root)
    (job / "node-2").mkdir()
    (job / "node-2" / "rank0.log").write_text(LOG.replace("INFO", "WARNING") * 4)
    repeated = _member(BOMB_LINE * ((16 << 20) // len(BOMB_LINE)))
    (job / "node-2" / "rank1.log.gz").write_bytes(_member(LOG.encode() * 2) + repeated * 20)
    (job / "node-1" / "rank1.log").write_bytes(LOG.encode() + ENDLESS)
    return job


def test_a_bomb_and_an_endless_line_cost_reading_and_are_reported(
    store: Store, tmp_path: Path
) -> None:
    """On the local path (one scanner) and in worker processes: the bomb is cut in its first
    MiBs (its real lines before are read), the endless line cut with one warning; the rest of
    the job is ingested; the job document names the cut file and counts it."""
    from l4_plugin.store.jobs import get_job

    job = _hostile_files(tmp_path / "job")
    seen = []
    for workers in (1, 2):
        summary = ingest_job(store, job, job_id=f"hostile-{workers}", workers=workers)
        [cut] = summary.cut_files
        assert cut.startswith("node-2/rank1.log.gz: inflates ") and "compression bomb" in cut
        assert f"log file cut — {cut}" in summary.problems
        long_line = (
            f"node-1/rank1.log:2: line of {len(ENDLESS):,} bytes truncated to {MAX_LINE_CHARS}"
        )
        assert long_line in summary.problems
        # node-1: 3 + 2 lines; node-2: 4 lines and the bomb's real member's 2, none of the bomb's.
        assert summary.lines == 3 + 2 + 4 + 2 and summary.skipped_files == 1
        record = get_job(store, f"hostile-{workers}")
        assert record is not None and record.summary.cut_files == (cut,)
        assert record.summary.skipped_files == 1
        seen.append((summary.cut_files, sorted(summary.problems), summary.lines))
    assert seen[0] == seen[1]


def test_the_terminal_and_the_report_say_which_file_was_cut_and_why(
    l4: object, tmp_path: Path
) -> None:
    import json

    job = _hostile_files(tmp_path / "job")
    out = tmp_path / "report.json"
    res = l4("diagnose", str(job), "--job-id", "bombed", "--json", str(out))  # type: ignore[operator]
    assert res.returncode == 0, res.stderr
    assert "warning: log file cut — node-2/rank1.log.gz: inflates " in res.stderr
    notes = json.loads(out.read_text())["notes"]
    assert any(n.startswith("log file cut: node-2/rank1.log.gz: inflates ") for n in notes)


def test_the_decompression_guard_flags_and_environment(
    l4: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real log lines, 1.5 MB inflated (~15 times): a ratio limit of 2 cuts them, and so does
    an inflated-size limit of 100K from the environment; a ratio of 1 is refused."""
    import gzip

    job = job_dir(tmp_path / "job")
    text = "".join(LOG.replace("1/10", f"{i}/30000") for i in range(30_000)).encode()
    (job / "node-1" / "rank1.log.gz").write_bytes(gzip.compress(text, compresslevel=9))
    args = ("ingest", str(job), "--job-id", "guarded")
    res = l4(*args)  # type: ignore[operator]
    assert res.returncode == 0 and "cut" not in res.stderr, res.stderr
    res = l4(*args, "--max-inflate-ratio", "2")  # type: ignore[operator]
    assert res.returncode == 0
    assert "warning: log file cut — node-1/rank1.log.gz: inflates " in res.stderr
    assert "limit 2): a compression bomb" in res.stderr
    monkeypatch.setenv("L4_MAX_INFLATED_SIZE", "100K")
    res = l4(*args)  # type: ignore[operator]
    assert "node-1/rank1.log.gz: inflates to more than 100.0 KiB" in res.stderr
    res = l4(*args, "--max-inflate-ratio", "1")  # type: ignore[operator]
    assert res.returncode == 2 and "--max-inflate-ratio" in res.stderr
