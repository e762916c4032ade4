"""Job directory discovery, job.yaml and the configuration fingerprint."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from l4_plugin.errors import IngestError
from l4_plugin.ingest.hostlist import HostlistError
from l4_plugin.ingest.hostlist import expand as expand_hostlist
from l4_plugin.ingest.jobdir import discover, fingerprint, job_meta, parse_config_overrides
from l4_simulate import simulate


def _touch(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_nested_layout(tmp_path: Path) -> None:
    _touch(tmp_path / "node-a" / "rank0.log")
    _touch(tmp_path / "node-a" / "rank1.log")
    _touch(tmp_path / "node-a" / "dmesg.log")
    _touch(tmp_path / "node-b" / "worker_rank_12.log")
    _touch(tmp_path / "node-b" / "notes.md")
    files = discover(tmp_path)
    got = [(f.node, f.rank, f.kind) for f in files]
    assert got == [
        ("node-a", 0, "rank"),
        ("node-a", 1, "rank"),
        ("node-a", None, "system"),
        ("node-b", 12, "rank"),
    ]


def test_flat_layout_and_gz(tmp_path: Path) -> None:
    _touch(tmp_path / "gpu-01-rank3.log")
    (tmp_path / "gpu-01_rank4.log.gz").write_bytes(gzip.compress(b"y\n"))
    _touch(tmp_path / "gpu-02.rank5.log")
    _touch(tmp_path / "gpu-02-kern.log")
    got = [(f.node, f.rank, f.kind) for f in discover(tmp_path)]
    assert got == [
        ("gpu-01", 3, "rank"),
        ("gpu-01", 4, "rank"),
        ("gpu-02", 5, "rank"),
        ("gpu-02", None, "system"),
    ]


def test_node_pattern(tmp_path: Path) -> None:
    _touch(tmp_path / "logs" / "host=h7" / "r2.log")
    files = discover(tmp_path, r"host=(?P<node>[^/]+)/r(?P<rank>\d+)")
    assert [(f.node, f.rank) for f in files] == [("h7", 2)]
    with pytest.raises(IngestError, match=r"needs a named group"):
        discover(tmp_path, r"host=([^/]+)")
    with pytest.raises(IngestError, match=r"invalid --node-pattern"):
        discover(tmp_path, r"(?P<node>[")


def test_empty_job_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"no log files in .* expected JOB/<node>"):
        discover(tmp_path)
    with pytest.raises(IngestError, match=r"job directory not found"):
        discover(tmp_path / "missing")


def test_simulated_layouts_are_found(tmp_path: Path) -> None:
    for seed in (1, 2):
        truth = simulate(
            tmp_path / str(seed), nodes=3, iterations=10, fault="oom", seed=seed, baselines=0
        )
        files = discover(tmp_path / str(seed) / "job")
        nodes = {f.node for f in files}
        assert set(truth.faulty_nodes) <= nodes and len(nodes) == 3
        assert all(f.rank is not None for f in files if f.kind == "rank")


def test_job_yaml_and_overrides(tmp_path: Path) -> None:
    _touch(
        tmp_path / "job.yaml",
        "id: job-42\nstatus: failed\nconfig:\n  model: llama\n  parallel: {tp: 4, pp: 2}\n"
        "  nodes: 256\n",
    )
    meta = job_meta(tmp_path, config={"image": "pytorch:24.03"})
    assert (meta.id, meta.status) == ("job-42", "failed")
    assert meta.config == {
        "model": "llama",
        "parallel.tp": "4",
        "parallel.pp": "2",
        "nodes": "256",
        "image": "pytorch:24.03",
    }
    assert job_meta(tmp_path, job_id="other", status="succeeded").status == "succeeded"


def test_a_schedulers_keys_in_job_yaml_are_used_or_warned_about(tmp_path: Path) -> None:
    # What a Slurm or Kubernetes wrapper writes beside id/status/config: never fatal.
    _touch(
        tmp_path / "job.yaml",
        "id: 3176517\nstatus: failed\nstarted: 2025-02-06T17:33:28+09:00\n"
        "nodelist: gpu-r[01-03,07],login-1\npartition: batch\nuser: alice\nconfig:\n  model: x\n",
    )
    meta = job_meta(tmp_path)
    assert (meta.id, meta.status, meta.config) == ("3176517", "failed", {"model": "x"})
    assert meta.hosts == ("gpu-r01", "gpu-r02", "gpu-r03", "gpu-r07", "login-1")
    assert meta.started == 1738830808.0  # 08:33:28 UTC
    assert [w.split(": ", 1)[1] for w in meta.warnings] == [
        "key 'partition' in job.yaml ignored — L4 reads config, id, status, nodelist and started",
        "key 'user' in job.yaml ignored — L4 reads config, id, status, nodelist and started",
    ]
    assert meta.warnings[0].startswith(f"{tmp_path / 'job.yaml'}:5:")
    _touch(tmp_path / "job.yaml", "id: a\nnodelist: [n1, 'n[2-3]']\nstarted: 1700000000\n")
    meta = job_meta(tmp_path)
    assert (meta.hosts, meta.started, meta.warnings) == (("n1", "n2", "n3"), 1.7e9, ())
    _touch(tmp_path / "job.yaml", "id: a\nnodelist: 'n[1-999999999]'\nstarted: soon\n")
    meta = job_meta(tmp_path)
    assert meta.hosts == () and meta.started is None
    assert "nodelist: not a host list, ignored — range '1-999999999' names more" in meta.warnings[0]
    assert "started: not a time, ignored — 'soon'" in meta.warnings[1]


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("node[1-2]-ib[0-1]", ["node1-ib0", "node1-ib1", "node2-ib0", "node2-ib1"]),
        ("a, b[08-10]", ["a", "b08", "b09", "b10"]),
        ("x[3,1-2],x1", ["x3", "x1", "x2"]),
    ],
)
def test_hostlist_expansion(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[[1]]"])
def test_a_bad_hostlist_says_why(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(bad)


def test_bad_job_yaml_names_file_and_line(tmp_path: Path) -> None:
    _touch(tmp_path / "job.yaml", "id: x\nconfig:\n  model: [unclosed\n")
    with pytest.raises(IngestError, match=r"job\.yaml:4: invalid YAML"):
        job_meta(tmp_path)


def test_job_id_with_index_illegal_characters_is_accepted(tmp_path: Path) -> None:
    # Job ids are field values and hashed into document ids, never part of an index name.
    assert job_meta(tmp_path, job_id='Job/42 "A*B"?').id == 'Job/42 "A*B"?'
    with pytest.raises(IngestError, match=r"invalid job id"):
        job_meta(tmp_path, job_id="bad\nid")
    with pytest.raises(IngestError, match=r"invalid job status"):
        job_meta(tmp_path, status="exploded")


def test_fingerprint_ignores_node_count_and_run_values() -> None:
    base = {"model": "llama2-13b", "framework": "megatron", "tensor_parallel": "4"}
    assert fingerprint({**base, "nodes": "4", "seed": "1"}) == fingerprint({**base, "nodes": "256"})
    assert fingerprint(base) != fingerprint({**base, "tensor_parallel": "8"})


def test_fingerprint_ignores_a_schedulers_policy_and_the_runs_length() -> None:
    # A baseline run with another time limit, restart policy, partition or number of steps
    # printed what the failed job's ranks print.
    base = {"model": "llama2-13b", "backend": "nccl", "hidden": "64"}
    other = {"max_restarts": "1", "time_limit_s": "300", "partition": "gpu", "steps": "400"}
    assert fingerprint(base) == fingerprint({**base, **other})
    assert fingerprint(base) != fingerprint({**base, "hidden": "96"})


def test_simulated_baselines_share_the_fingerprint(tmp_path: Path) -> None:
    truth = simulate(tmp_path, nodes=3, iterations=10, fault="oom", seed=4, baselines=1)
    job = job_meta(tmp_path / "job")
    base = job_meta(tmp_path / "baselines" / truth.baseline_jobs[0])
    assert job.fingerprint == base.fingerprint and job.id != base.id


def test_config_overrides() -> None:
    assert parse_config_overrides(["a=1", "b = x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(IngestError, match=r"expected key=value"):
        parse_config_overrides(["nokey"])


def test_files_are_probed_alike_in_worker_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A large job's files are checked and host-planned in worker processes: the same files,
    # streams, hosts and skips as probing them here, in the same order.
    from l4_plugin.ingest import jobdir

    job = tmp_path / "job"
    simulate(tmp_path, nodes=3, iterations=10, fault="nccl-ib-error", seed=2, baselines=0)
    (job / "launcher").mkdir()
    (job / "launcher" / "stdout.log").write_text(
        "".join(f"worker-{i % 2}: step {i} loss 1.{i}\n" for i in range(40))
    )
    (job / "node-x").mkdir()
    (job / "node-x" / "rank0.log").write_bytes(b"\x00\x01\x02\x03binary" * 50)
    with gzip.open(job / "node-x" / "rank1.log.gz", "wt") as fh:
        fh.write("2026-01-01 00:00:00 INFO hello\n")
    (job / "node-x" / "dmesg.log").write_text("[ 1.0] kernel line\n")
    serial = jobdir.scan(job)
    assert any(f.host == "worker-1" for f in serial.files) and serial.skipped
    monkeypatch.setattr(jobdir, "PROBE_BYTES_PER_WORKER", 1)
    monkeypatch.setattr(jobdir, "_PROBE_CHUNK", 3)
    from l4_plugin.ingest import procs

    calls: list[int] = []
    real = procs.map_in_workers

    def counted(func: Any, chunks: list[Any], n: int) -> Any:
        calls.append(n)
        return real(func, chunks, n)

    monkeypatch.setattr(procs, "map_in_workers", counted)
    monkeypatch.setattr(procs, "default_workers", lambda: 2)
    pooled = jobdir.scan(job)
    assert calls == [2]
    assert pooled == serial
    # --workers bounds the probing too: one worker probes here, two (of more cores) use two.
    monkeypatch.setattr(procs, "default_workers", lambda: 8)
    calls.clear()
    assert jobdir.scan(job, workers=1) == serial
    assert calls == []
    assert jobdir.scan(job, workers=2) == serial
    assert calls == [2]


def test_discovery_estimates_each_files_lines_from_its_first_bytes(tmp_path: Path) -> None:
    # The scan's scheduling weighs files by lines: exact for a file within the sample, else at
    # the sample's bytes per line; a .gz at its trailer's decompressed size; a host's stream of
    # an interleaved file its share.
    from l4_plugin.ingest.jobdir import SAMPLE_BYTES, estimate_lines

    short = "".join(f"step {i:05d}\n" for i in range(100_000))  # 11 bytes a line
    long = "".join(f"2026-01-01 00:00:00 INFO {'x' * 75} {i:06d}\n" for i in range(20_000))
    _touch(tmp_path / "a" / "rank0.log", short)
    _touch(tmp_path / "a" / "rank1.log", long)
    _touch(tmp_path / "a" / "rank2.log", "one\ntwo\nthree")  # no final newline
    (tmp_path / "b" / "rank0.log.gz").parent.mkdir()
    (tmp_path / "b" / "rank0.log.gz").write_bytes(gzip.compress(long.encode()))
    _touch(tmp_path / "c" / "stdout.log", "".join(f"worker-{i % 2}: step {i}\n" for i in range(40)))
    got = {(f.relative, f.host): f.lines for f in discover(tmp_path)}
    assert got[("a/rank2.log", None)] == 3
    assert abs(got[("a/rank0.log", None)] - 100_000) < 1_000
    assert got[("a/rank1.log", None)] == got[("b/rank0.log.gz", None)]
    assert abs(got[("a/rank1.log", None)] - 20_000) < 200
    assert got[("c/stdout.log", "worker-0")] == got[("c/stdout.log", "worker-1")] == 20
    # a .gz smaller than its text, and one cut short: its last bytes are no trailer, the
    # estimate stays within what deflate can hold in its size
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "rank0.log.gz").write_bytes(gzip.compress(b"y\n"))
    cut = gzip.compress(long.encode() * 4)
    (tmp_path / "d" / "rank1.log.gz").write_bytes(cut[: len(cut) // 2])
    got = {f.relative: f.lines for f in discover(tmp_path)}
    assert got["d/rank0.log.gz"] == 1
    assert 0 < (got["d/rank1.log.gz"] or 0) <= 1032 * len(cut) // 2 // 100
    assert estimate_lines(b"", 0) == 0
    assert estimate_lines(b"a\n" * (SAMPLE_BYTES // 2), 10 * SAMPLE_BYTES) == 5 * SAMPLE_BYTES
