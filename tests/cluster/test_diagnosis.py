"""``l4 diagnose`` / ``l4 analyze`` / ``l4 report`` and ``diagnose_job`` against a real osmem."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from l4_plugin.cli import main
from l4_plugin.diagnosis import AnalysisOptions, diagnose_job, load_summary
from l4_plugin.diagnosis.queries import (
    find_jobs,
    find_sample_lines,
    read_baseline_pool,
    read_job,
    read_job_tables,
)
from l4_plugin.diagnosis.steps import says_cause
from l4_plugin.errors import AnalysisError
from l4_plugin.ingest.pipeline import ingest_job
from l4_plugin.store import IndexNames, OpenSearchStore, Store
from l4_plugin.store.fields import source_field
from l4_plugin.store.jobs import job_doc_id
from l4_simulate import simulate

_SECTION6_KEYS = {
    "job_id",
    "status",
    "stage",
    "baseline_jobs",
    "rule_matches",
    "events",
    "nodes",
    "iterations",
    "silent_nodes",
    "verdict",
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("sim")
    truth = simulate(out, nodes=6, iterations=40, fault="nccl-ib-error", seed=1)
    return {"dir": out, "truth": truth}


@pytest.fixture(scope="module")
def mstore(osmem_url: str) -> Iterator[Store]:
    s = OpenSearchStore(osmem_url, IndexNames("tdiag-l4-"), retry_backoff=0.05)
    s.drop_indices()
    s.install_templates()
    yield s
    s.drop_indices()
    s.close()


@pytest.fixture(scope="module")
def ingested(sim: dict[str, Any], mstore: Store) -> str:
    for b in sorted((sim["dir"] / "baselines").iterdir()):
        ingest_job(mstore, b, status="succeeded")
    return ingest_job(mstore, sim["dir"] / "job").job.id


def _annotations(store: Store, job_id: str) -> list[dict[str, Any]]:
    store.refresh(store.names.annotations)
    body = {"size": 1000, "query": {"term": {"l4.job.id": job_id}}}
    return [h["_source"] for h in store.search(store.names.annotations, body)["hits"]["hits"]]


def test_diagnose_finds_the_faulty_node_and_its_events(
    sim: dict[str, Any], mstore: Store, ingested: str
) -> None:
    truth = sim["truth"]
    d = diagnose_job(mstore, ingested, rules=[])
    report = d.report.to_json()
    assert set(report) >= _SECTION6_KEYS
    assert report["job_id"] == ingested and report["status"] == "failed"
    assert report["stage"] == "training"
    assert sorted(report["baseline_jobs"]) == sorted(truth.baseline_jobs)
    assert report["nodes"][0]["node"] in truth.faulty_nodes
    assert len(report["nodes"]) == 6
    samples = [e["sample"] for e in report["events"]]
    assert any(re.search(rx, s) for rx in truth.root_indicators for s in samples)
    for e in report["events"]:
        assert {
            "template_id",
            "template",
            "sample",
            "score",
            "nodes",
            "count",
            "first_seen",
        } <= set(e)
        assert e["reasons"] and 0 < e["score"] <= 1
    assert report["filtering"]["dropped"] > 0
    verdict = report["verdict"]
    assert set(verdict) == {"category", "blame", "evict", "restart", "confidence", "why"}
    assert verdict["evict"] and set(verdict["evict"]) <= set(truth.faulty_nodes)
    assert verdict["blame"] == "infrastructure" and verdict["restart"] == "after-eviction"
    json.dumps(report)  # the contract is JSON


def test_annotations_are_replaced_not_duplicated(mstore: Store, ingested: str) -> None:
    diagnose_job(mstore, ingested, rules=[])
    first = _annotations(mstore, ingested)
    kinds = {a["l4.annotation.kind"] for a in first}
    assert {"event", "node", "stage", "summary", "verdict"} <= kinds
    verdict = next(a for a in first if a["l4.annotation.kind"] == "verdict")
    assert "evict" in verdict["message"] and "category:" in " ".join(
        verdict["l4.annotation.reasons"]
    )
    assert all(a["l4.analyzer.version"].startswith("l4-") for a in first)
    diagnose_job(mstore, ingested, rules=[])
    again = _annotations(mstore, ingested)
    assert len(again) == len(first)
    # A narrower run leaves no stale event annotation behind.
    diagnose_job(mstore, ingested, rules=[], options=AnalysisOptions(max_events=2))
    events = [a for a in _annotations(mstore, ingested) if a["l4.annotation.kind"] == "event"]
    assert len(events) == 2
    job = mstore.get(mstore.names.jobs, job_doc_id(ingested))
    assert job is not None and job.source["l4.analysis.state"] == "done"
    report, extras = load_summary(mstore, ingested)
    assert report.job_id == ingested and len(report.events) == 2
    assert extras.stage_per_node


def test_dry_run_writes_nothing(mstore: Store, ingested: str) -> None:
    before = len(_annotations(mstore, ingested))
    diagnose_job(mstore, ingested, rules=[], write=False, options=AnalysisOptions(max_events=5))
    assert len(_annotations(mstore, ingested)) == before


def test_unknown_job_is_a_clear_error(mstore: Store) -> None:
    with pytest.raises(AnalysisError, match="job 'no-such-job' is not in the cluster"):
        diagnose_job(mstore, "no-such-job", rules=[])


def test_without_filtering_the_report_says_so(mstore: Store, ingested: str) -> None:
    d = diagnose_job(
        mstore, ingested, rules=[], write=False, options=AnalysisOptions(crossjob=False)
    )
    assert d.report.filtering.no_baseline is True
    assert any("disabled" in n for n in d.report.notes)


def _write_job(root: Path, nodes: dict[str, list[str]], config: str = "m1") -> Path:
    root.mkdir(parents=True)
    (root / "job.yaml").write_text(
        f"id: {root.name}\nstatus: failed\nconfig:\n  model: {config}\n", "utf-8"
    )
    for node, lines in nodes.items():
        (root / node).mkdir()
        (root / node / "rank0.log").write_text("\n".join(lines) + "\n", "utf-8")
    return root


def _lines(n: int, t0: int = 0, extra: tuple[str, ...] = ()) -> list[str]:
    out = [
        f"[2024-05-01 10:00:{(t0 + i) % 60:02d},000] [INFO] [engine.py:10:step] "
        f" iteration {i + 1}/ 100 | consumed samples: {i * 8} | lm loss: 2.{i:03d}E+00 |"
        for i in range(n)
    ]
    return out + list(extra)


def test_one_node_job_reports_events_without_spatial(tmp_path: Path, store: Store) -> None:
    crash = "[2024-05-01 10:01:00,000] [ERROR] [engine.py:99:step] RuntimeError: boom on device 3"
    job = _write_job(tmp_path / "one", {"n1": _lines(20, extra=(crash,))})
    job_id = ingest_job(store, job).job.id
    d = diagnose_job(store, job_id, rules=[])
    assert d.report.spatial.defined is False
    assert any("at least two nodes" in n for n in d.report.notes)
    assert any("boom" in e.sample for e in d.report.events)
    assert any("no baseline" in n for n in d.report.notes)


def test_identical_nodes_and_no_iterations(tmp_path: Path, store: Store) -> None:
    same = [f"[2024-05-01 10:00:{i:02d},000] [INFO] loading shard {i}" for i in range(10)]
    job = _write_job(tmp_path / "same", {f"n{k}": same for k in range(4)})
    job_id = ingest_job(store, job).job.id
    d = diagnose_job(store, job_id, rules=[])
    assert all(n.score == 0 for n in d.report.nodes)
    assert d.report.iterations == ()
    assert any("no iterations found" in n for n in d.report.notes)


def test_baseline_with_other_fingerprint_needs_force(tmp_path: Path, store: Store) -> None:
    job = _write_job(tmp_path / "j1", {"n1": _lines(10), "n2": _lines(10)})
    other = _write_job(tmp_path / "b1", {"n1": _lines(10)}, config="other-model")
    job_id = ingest_job(store, job).job.id
    base_id = ingest_job(store, other, status="succeeded").job.id
    warnings: list[str] = []
    d = diagnose_job(store, job_id, rules=[], baselines=[base_id], warn=warnings.append)
    assert d.report.baseline_jobs == ()
    assert any("fingerprint" in w and "--force-baseline" in w for w in warnings)
    forced = diagnose_job(store, job_id, rules=[], baselines=[base_id], force_baselines=True)
    assert forced.report.baseline_jobs == (base_id,)


def test_purged_jobs_are_not_baselines(tmp_path: Path, store: Store) -> None:
    job = _write_job(tmp_path / "p1", {"n1": _lines(10), "n2": _lines(10)})
    good = _write_job(tmp_path / "p2", {"n1": _lines(10)})
    job_id = ingest_job(store, job).job.id
    good_id = ingest_job(store, good, status="succeeded").job.id
    assert diagnose_job(store, job_id, rules=[]).report.baseline_jobs == (good_id,)
    doc = store.get(store.names.jobs, job_doc_id(good_id))
    assert doc is not None
    store.put(store.names.jobs, doc.id, {**doc.source, "l4.retention.purged": 1}, refresh=True)
    assert diagnose_job(store, job_id, rules=[]).report.baseline_jobs == ()


def test_cli_diagnose_analyze_report(
    sim: dict[str, Any], settings: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--es-url", settings.es_url, "--index-prefix", settings.index_prefix]
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    code = main(
        [
            *base,
            "diagnose",
            str(sim["dir"] / "job"),
            "--baseline",
            str(sim["dir"] / "baselines"),
            "--json",
            str(out_json),
            "--html",
            str(out_html),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(out_json.read_text("utf-8"))
    assert set(report) >= _SECTION6_KEYS
    assert report["nodes"][0]["node"] in sim["truth"].faulty_nodes
    assert "Failure-indicating events" in captured.out
    assert "Suspect nodes" in captured.out
    # The verdict is what an SRE reads first.
    assert captured.out.index("Verdict:") < captured.out.index("Failure-indicating events")
    assert 'id="verdict"' in out_html.read_text("utf-8")
    assert "<svg" in out_html.read_text("utf-8")
    assert "ingested" in captured.err
    # Every annotation carries a Discover link to the job's lines (relative: no dashboards URL).
    check = OpenSearchStore(settings.es_url, IndexNames(settings.index_prefix))
    try:
        docs = _annotations(check, report["job_id"])
    finally:
        check.close()
    links = [d.get("l4.annotation.discover_url", "") for d in docs]
    assert docs and all(link.startswith("/app/discover#/") for link in links)
    assert all(report["job_id"] in unquote(link) for link in links)
    # Second run: nothing to ingest again.
    assert (
        main(
            [
                *base,
                "diagnose",
                str(sim["dir"] / "job"),
                "--baseline",
                str(sim["dir"] / "baselines"),
                "--no-rules",
            ]
        )
        == 0
    )
    assert "already in the cluster" in capsys.readouterr().err
    assert main([*base, "analyze", report["job_id"], "--json", "-", "--no-rules"]) == 0
    assert json.loads(capsys.readouterr().out)["job_id"] == report["job_id"]
    html2 = tmp_path / "again.html"
    assert main([*base, "report", report["job_id"], "--html", str(html2)]) == 0
    assert "<svg" in html2.read_text("utf-8")
    assert main([*base, "analyze", "missing-job"]) == 1
    assert "error: job 'missing-job' is not in the cluster" in capsys.readouterr().err
    assert main([*base, "report", "missing-job"]) == 1
    assert "no stored diagnosis" in capsys.readouterr().err


def test_baseline_pool_from_job_documents_equals_the_aggregation(
    sim: dict[str, Any], mstore: Store, ingested: str
) -> None:
    job = read_job(mstore, ingested)
    base = find_jobs(mstore, fingerprint=job.fingerprint, status="succeeded")
    assert base and all(b.template_stats for b in base)
    recorded = read_baseline_pool(mstore, base).stats
    aggregated = read_baseline_pool(
        mstore, [replace(b, template_stats=None, iterations=None) for b in base]
    ).stats
    assert recorded.keys() == aggregated.keys()
    for tid, row in recorded.items():
        assert row[:2] == pytest.approx(aggregated[tid][:2]), tid
        # per-node rates agree; per-iteration rates agree up to the bucket rounding of the
        # aggregation path (it sees bucket starts, ingest saw every iteration)
        assert row[2] == pytest.approx(aggregated[tid][2]), tid


@pytest.mark.parametrize("seed", [1, 2, 5])  # Megatron, DeepSpeed, HF Trainer (tqdm, no times)
def test_a_throttled_node_shows_as_a_job_slowdown_and_its_lines_lead(
    tmp_path: Path, store: Store, seed: int
) -> None:
    # One node's GPUs throttle: every rank waits for it, so the whole job slows down and per-node
    # iteration times stay equal. The thermal lines recur from then on, like background noise;
    # what marks them is that they start when the job's seconds per iteration depart.
    truth = simulate(tmp_path, nodes=6, iterations=40, fault="straggler", seed=seed)
    for b in sorted((tmp_path / "baselines").iterdir()):
        ingest_job(store, b, status="succeeded")
    job_id = ingest_job(store, tmp_path / "job").job.id
    report = diagnose_job(store, job_id, rules=[], write=False).report.to_json()
    slow = report["slowdown"]
    assert slow is not None and truth.iteration is not None
    assert abs(slow["from_iteration"] - truth.iteration) <= 1
    assert slow["ratio"] > 1.3 and slow["nodes"] == list(truth.faulty_nodes)
    first = report["iterations"][0]
    assert first["why"] == "slowdown" and first["iteration"] == slow["from_iteration"]
    samples = [e["sample"] for e in report["events"]]
    raw = "\n".join(
        gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
        for p in (tmp_path / "job").rglob("*.log*")
    )
    # The GPU's own warnings always; the kernel's thermal lines when there is a kern.log with
    # wall-clock times (a dmesg with seconds since boot cannot be placed at the onset).
    roots = [r for r in truth.root_indicators if re.search(r, raw)]
    wall_clock = seed != 5
    for root in roots if wall_clock else roots[:1]:
        assert any(re.search(root, s) for s in samples), root
    thermal = [e for e in report["events"] if "starts-with-slowdown" in " ".join(e["reasons"])]
    assert thermal and all("chronic-before-failure" not in e["reasons"] for e in thermal)
    assert report["nodes"][0]["node"] == truth.faulty_nodes[0]


def test_the_sample_is_the_most_suspect_nodes_own_line(store: Store, tmp_path: Path) -> None:
    # Three nodes print one template with different values; the sample follows the node order
    # given (most suspect first), not whichever line came first in the job.
    warn = "n{n}:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with status={s}\n"
    for n, (second, status) in enumerate([(1, 5), (2, 5), (3, 12)], start=1):
        (tmp_path / f"n{n}").mkdir()
        (tmp_path / f"n{n}" / "rank0.log").write_text(
            f"[2024-05-03 10:00:0{second},000] INFO step 1\n" + warn.format(n=n, s=status)
        )
    ingest_job(store, tmp_path, job_id="samples")
    data = read_job_tables(store, read_job(store, "samples"))
    tid = next(t for t, info in data.templates.items() if "Got completion" in info.text)
    job = data.job
    assert "status=5" in find_sample_lines(store, job, [tid])[tid]["message"]
    picked = find_sample_lines(store, job, [tid], ["n3", "n1", "n2"])[tid]
    assert source_field(picked, "host.name") == "n3" and "status=12" in picked["message"]
    picked = find_sample_lines(store, job, [tid], ["n2", "n3"])[tid]
    assert source_field(picked, "host.name") == "n2"


def test_of_one_nodes_lines_the_sample_is_one_that_says_the_cause(
    store: Store, tmp_path: Path
) -> None:
    # The culprit's first line of the template is a work request flushed because its queue pair
    # was already in error (ibv_wc_status 5); its retry-exceeded completion (12) says why.
    warn = (
        "n1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> "
        "with status={s} opcode=0\n"
    )
    (tmp_path / "n1").mkdir()
    (tmp_path / "n1" / "rank0.log").write_text(
        "[2024-05-03 10:00:01,000] INFO step 1\n" + warn.format(s=5) + warn.format(s=12)
    )
    ingest_job(store, tmp_path, job_id="telling")
    data = read_job_tables(store, read_job(store, "telling"))
    tid = next(t for t, info in data.templates.items() if "Got completion" in info.text)
    first = find_sample_lines(store, data.job, [tid], ["n1"])[tid]
    assert "status=5" in first["message"]
    told = find_sample_lines(store, data.job, [tid], ["n1"], telling=says_cause)[tid]
    assert "status=12" in told["message"]
    assert not says_cause(first["message"]) and says_cause(told["message"])


def _steps(node: str, last: int) -> list[str]:
    """A rank's progress, one iteration a minute from 10:00, up to iteration ``last``."""
    return [
        f"[2024-05-01 {10 + i // 60:02d}:{i % 60:02d}:00,000] [INFO] [engine.py:10:step]  "
        f"iteration {i}/ 100 | lm loss: 2.{i:03d}E+00 |"
        for i in range(1, last + 1)
    ]


def test_silence_is_judged_on_the_ranks_own_output(tmp_path: Path, store: Store) -> None:
    # n3's ranks hang at iteration 20; its torchrun agent tears down with everyone's at the
    # end, and n1's kernel log simply ends early: n3 is silent, n1 is not.
    root = tmp_path / "hang"
    watchdog = (
        "[2024-05-01 10:50:00,000] [ERROR] [pg.py:1:w] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=21, OpType=ALLREDUCE) ran for 1800000 milliseconds"
    )
    nodes = {"n1": [*_steps("n1", 20), watchdog], "n2": [*_steps("n2", 20), watchdog]}
    nodes |= {"n3": _steps("n3", 20)[:-1], "n4": [*_steps("n4", 20), watchdog]}
    job = _write_job(root, nodes)
    for node in nodes:
        (job / node / "torchrun.log").write_text(
            "I0501 10:00:00.000000 1 torch/distributed/elastic/agent/server/api.py:1] starting\n"
            "W0501 10:50:05.000000 1 torch/distributed/elastic/multiprocessing/api.py:1] "
            "Sending process 7 closing signal SIGTERM\n"
            "E0501 10:50:09.000000 1 torch/distributed/elastic/multiprocessing/api.py:2] "
            "failed (exitcode: -6) local_rank: 0 (pid: 7) of binary: python\n"
        )
    (job / "n1" / "kern.log").write_text("May  1 10:01:00 n1 kernel: mlx5_core: link up\n")
    (job / "n2" / "kern.log").write_text(
        "May  1 10:01:00 n2 kernel: mlx5_core: link up\nMay  1 10:55:00 n2 kernel: audit\n"
    )
    job_id = ingest_job(store, job).job.id
    d = diagnose_job(store, job_id, rules=[])
    assert d.report.silent_nodes == ("n3",)
