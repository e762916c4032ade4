"""HTML report: rendering (pure) and a real headless Chromium opening the written file.

The Chromium tests need the Debian packages ``chromium`` (``.ci/run`` installs them); without a
``chromium`` binary they are skipped with a message saying so. They load the report from a
``file://`` URL with background networking disabled, check every section and plot is in the DOM
Chromium built, that the console stayed clean, and that a screenshot of it can be taken.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from l4_plugin.report import (
    DroppedTemplate,
    IterationPoint,
    NodeEventMatrix,
    ReportExtras,
    render_html,
    write_html,
)
from l4_plugin.report.model import Report
from l4_plugin.report.plots import downsample

SCRIPT_LINE = "<script>alert(1)</script> rank 17 watchdog fired"
SECTIONS = (
    "verdict",
    "summary",
    "rules",
    "nodes",
    "heatmap",
    "timeline",
    "stages",
    "events",
    "filtered",
)
PLOTS = ("plot-node-scores", "plot-node-histogram", "plot-heatmap", "plot-timeline", "plot-stages")


def big_report(
    n_nodes: int = 1200, n_events: int = 40, n_iterations: int = 300
) -> tuple[Report, ReportExtras]:
    """A realistic failed 1,200-node job: a few bad nodes, an NCCL timeout, a hostile log line."""
    rng = random.Random(7)
    nodes = [f"gpu-node-{i:04d}.cluster.example" for i in range(n_nodes)]
    bad = nodes[17:21]
    templates = [f"t{i:015x}" for i in range(n_events)]
    texts = [
        "[rank<*>] NCCL WARN Timeout waiting for connection from peer <*>",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=<*>, OpType=ALLREDUCE)",
        SCRIPT_LINE,
    ] + [f"iteration <*> | loss <*> | component {i} warning <*>" for i in range(n_events - 4)]
    events = []
    for i, (tid, text) in enumerate(zip(templates, texts, strict=True)):
        ev_nodes = bad if i < 4 else rng.sample(nodes, min(len(nodes), rng.randint(1, 40)))
        sample = SCRIPT_LINE if i == 3 else text.replace("<*>", str(rng.randint(1, 9999)))
        events.append(
            {
                "template_id": tid,
                "template": text,
                "sample": sample,
                "score": round(0.97 - i * 0.02, 3),
                "nodes": ev_nodes,
                "count": rng.randint(1, 5000),
                "first_seen": f"2024-05-01T10:{i % 60:02d}:00Z",
                "level": "ERROR" if i < 6 else "WARNING",
                "reasons": ["spatial", "absent-in-baseline"] + (["temporal"] if i < 2 else []),
            }
        )
    scores = {n: rng.betavariate(2, 9) for n in nodes}
    for n in bad:
        scores[n] = rng.uniform(0.8, 0.95)
    ranked = sorted(nodes, key=lambda n: -scores[n])
    report = {
        "job_id": "llama-70b-pretrain-<b>4711</b>",
        "status": "failed",
        "stage": "training",
        "baseline_jobs": ["llama-70b-pretrain-4690", "llama-70b-pretrain-4702"],
        "rule_matches": [
            {
                "rule": "nccl-timeout",
                "title": "NCCL collective timeout",
                "nodes": bad,
                "diagnosis": "Ranks on 4 nodes stopped answering ALLREDUCE <script>x</script>.",
                "remediation": "Drain the nodes, run the NCCL all-reduce test, check the IB links.",
            }
        ],
        "events": events,
        "nodes": [
            {"node": n, "score": round(scores[n], 4), "events": templates[:4] if n in bad else []}
            for n in ranked
        ],
        "iterations": [
            {"iteration": 1120 + k, "score": 0.9, "events": templates[:2]} for k in (211, 212, 260)
        ],
        "silent_nodes": bad[2:3],
        "verdict": {
            "category": "hardware/network",
            "blame": "infrastructure",
            "evict": bad[:1],
            "restart": "after-eviction",
            "confidence": 0.9,
            "why": ["rule nccl-ib-completion-error (hardware/network) <script>x</script>"],
        },
    }
    counts = tuple(
        tuple(
            (
                rng.randint(50, 900)
                if (n in bad and j < 4)
                else (rng.randint(1, 6) if rng.random() < 0.03 else 0)
            )
            for j in range(n_events)
        )
        for n in nodes
    )
    iterations = tuple(
        IterationPoint(
            1120 + k,
            rng.uniform(0.5, 1.5) + (6.0 if k in (211, 212, 260) else 0.0),
            2.4 + 0.1 * (k % 7) / 7,
            k in (211, 212, 260),
        )
        for k in range(n_iterations)
    )
    extras = ReportExtras(
        matrix=NodeEventMatrix(tuple(nodes), tuple(templates), counts),
        iterations=iterations,
        stage_per_node={n: ("training" if n not in bad else "checkpoint-save") for n in nodes},
        stage_order=("init", "data-loading", "training", "checkpoint-save"),
        dropped_templates=(
            *(
                DroppedTemplate(
                    f"d{i:015x}",
                    "frequent-in-baseline",
                    1.0,
                    1.0,
                    text=f"[rank<*>] step <*> throughput <*> tokens/s {i}",
                )
                for i in range(12)
            ),
            DroppedTemplate("dscript", "frequent-in-baseline", 0.5, 1.0, text=SCRIPT_LINE),
        ),
        timings={"ingest": 41.2, "analysis": 3.8, "rules": 0.4},
        generated_at="2024-05-01T11:02:00Z",
    )
    # Written as the JSON a stored diagnosis holds, with only the keys the HTML uses.
    return Report.from_json(report), extras


# -- pure rendering ------------------------------------------------------------------------------


def test_report_has_every_section_and_plot() -> None:
    report, extras = big_report()
    html = render_html(report, extras)
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    for plot in PLOTS:
        assert f'<svg id="{plot}"' in html
    assert "NCCL collective timeout" in html and "Remediation:" in html
    # The verdict comes first, and its evidence is escaped like every log-derived string.
    assert html.index('id="verdict"') < html.index('id="summary"')
    assert "after-eviction" in html and "<script>x</script>" not in html


def test_log_derived_strings_are_escaped() -> None:
    report, extras = big_report()
    html = render_html(report, extras)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>4711</b>" not in html and "&lt;b&gt;4711&lt;/b&gt;" in html


def test_large_jobs_are_aggregated() -> None:
    report, extras = big_report(n_nodes=1200)
    html = render_html(report, extras)
    bars = re.search(r'<svg id="plot-node-scores".*?</svg>', html, re.S)
    assert bars is not None and bars.group(0).count('class="bar"') == 25
    heat = re.search(r'<svg id="plot-heatmap".*?</svg>', html, re.S)
    assert heat is not None and heat.group(0).count('class="cell"') <= 30 * 20
    assert "1,200 nodes" in html
    assert len(html) < 2_000_000


def test_renders_with_only_the_section_6_dict() -> None:
    report, _ = big_report(n_nodes=50, n_events=8, n_iterations=10)
    html = render_html(report)
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    assert '<svg id="plot-heatmap"' in html and '<svg id="plot-timeline"' in html
    minimal = render_html(Report.from_json({"job_id": "j", "status": "failed"}))
    assert 'id="no-baseline"' in minimal and "No failure-indicating events." in minimal


def test_no_baseline_is_stated() -> None:
    report, _ = big_report(n_nodes=20, n_events=5)
    html = render_html(replace(report, baseline_jobs=()), ReportExtras(no_baseline=True))
    assert 'id="no-baseline"' in html and "there was no baseline" in html


def test_timeline_downsamples_but_keeps_suspects() -> None:
    points = [IterationPoint(i, float(i % 10), 12.0, i in (5, 77_777)) for i in range(100_000)]
    kept = downsample(points, 1000)
    assert len(kept) <= 2000
    assert {5, 77_777} <= {p.iteration for p in kept if p.suspect}


def test_matrix_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="node × event matrix shape"):
        NodeEventMatrix(("a", "b"), ("t",), ((1,),))


def test_write_html(tmp_path: Path) -> None:
    report, extras = big_report(n_nodes=10, n_events=5, n_iterations=5)
    out = write_html(tmp_path / "sub" / "r.html", report, extras)
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


# -- headless Chromium ---------------------------------------------------------------------------


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "chromium is not installed (apt-get install chromium chromium-driver); "
        "CI installs it in .ci/run"
    )


def _run_chromium(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    cmd = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]


@pytest.fixture(scope="module")
def big_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    report, extras = big_report()
    return write_html(tmp_path_factory.mktemp("report") / "report.html", report, extras)


def test_chromium_detects_console_errors(tmp_path: Path) -> None:
    """The console check itself works: a page that throws is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><body><script>console.error('boom');"
        "throw new Error('kaput')</script></body></html>",
        encoding="utf-8",
    )
    res = _run_chromium(page, tmp_path, "--dump-dom")
    errors = _console_errors(res.stderr)
    assert any("kaput" in e for e in errors), res.stderr[-2000:]


def test_report_renders_in_chromium(big_page: Path, tmp_path: Path) -> None:
    res = _run_chromium(big_page, tmp_path, "--dump-dom")
    assert res.returncode == 0, res.stderr[-2000:]
    dom = res.stdout
    for section in SECTIONS:
        assert f'id="{section}"' in dom, section
    for plot in PLOTS:
        assert re.search(rf'<svg id="{plot}"[^>]*>.*?<(rect|polyline|circle)', dom, re.S), plot
    assert "<script" not in dom.lower(), "a log line became markup"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert _console_errors(res.stderr) == []


def test_report_screenshot(big_page: Path, tmp_path: Path) -> None:
    """A 1440×900 screenshot of the report renders (into tmp: tests never write the repo)."""
    shot = tmp_path / "report-screenshot.png"
    res = _run_chromium(
        big_page, tmp_path, f"--screenshot={shot}", "--window-size=1440,900", "--hide-scrollbars"
    )
    assert res.returncode == 0, res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1440, 900)
    assert _console_errors(res.stderr) == []
