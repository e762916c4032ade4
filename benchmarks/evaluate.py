"""Evaluation of issue #4: L4 and the paper's baselines on simulated failed jobs, against truth.

Every case is one ``l4_simulate.simulate`` run (a failed job, two successful baselines of the
same configuration and ``truth.json``), ingested into its own index prefix of ONE embedded cluster
(baselines first, as ``l4 diagnose`` does) and diagnosed by six methods side by side:

* ``L4`` — ``diagnose_job`` with the default ``AnalysisOptions`` (fault rules off: ``rules=[]``, so
  the analyses are measured, not the library written for these very faults);
* ``L4 no cross-job`` — ``AnalysisOptions(crossjob=False)`` (the paper's open question);
* ``L4 paper-plain`` — ``AnalysisOptions(spatial_method="iforest")`` (the paper's plain forest);
* ``Error_time``, ``Error_count``, ``IForest-all`` — ``l4_plugin.analysis.baselines`` on the
  ``EventStat`` s of the same aggregated tables.

Ground truth for events: the job's files are parsed and rolled up again with the ingest's own
pieces (``LineParser`` seeded with the templates that were in the cluster just before the job was
ingested, ``scanner.chunks``, ``NodeRollup``), so every raw line gets exactly the template id the
cluster has and joined records (tracebacks, error continuations) belong to the event they were
joined to; the script checks the two template id sets agree. A reported template is a true
positive when any of its raw lines matches a ``truth.indicators`` regex (``re.search``).

Usage: python benchmarks/evaluate.py [--quick] [--cases N] [--kinds a,b] [--json OUT] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The simulator is its own distribution in simulate/ (see README, "Layout").
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "simulate"))

from l4_plugin.analysis.baselines import error_count, error_time, iforest_all
from l4_plugin.analysis.evidence import event_stats
from l4_plugin.analysis.results import FusionResult
from l4_plugin.analysis.tables import JobData
from l4_plugin.config import load_settings
from l4_plugin.diagnosis import AnalysisOptions, diagnose_job
from l4_plugin.diagnosis.queries import read_job, read_job_tables
from l4_plugin.ingest.jobdir import discover
from l4_plugin.ingest.parser import LineKind, LineParser
from l4_plugin.ingest.pipeline import ingest_job, load_known_templates
from l4_plugin.ingest.rollup import Chunk, NodeRollup
from l4_plugin.ingest.scanner import chunks as _chunks
from l4_plugin.ingest.sources import file_streams
from l4_plugin.ingest.stages import StageRules
from l4_plugin.records import Template
from l4_plugin.store import EmbeddedCluster
from l4_plugin.store.connect import connect
from l4_simulate import FAULT_KINDS, Truth, simulate

NODE_SIZES = (8, 16, 32)
SEEDS_PER_KIND = 3
TOP_K = (1, 3, 5, 8)
L4_METHODS = {
    "L4": AnalysisOptions(),
    "L4 no cross-job": AnalysisOptions(crossjob=False),
    "L4 paper-plain": AnalysisOptions(spatial_method="iforest"),
}
BASELINE_METHODS: dict[str, Callable[[JobData], FusionResult]] = {
    "Error_time": lambda data: error_time(event_stats(data), data.nodes),
    "Error_count": lambda data: error_count(event_stats(data), data.nodes),
    "IForest-all": lambda data: iforest_all(event_stats(data), data.nodes),
}
METHODS = (*L4_METHODS, *BASELINE_METHODS)
PAPER = {"P": 0.786, "R": 0.982, "F1": 0.873, "top1": 0.658, "top5": 0.80, "top8": 0.912}


@dataclass(frozen=True)
class Case:
    """One simulated job: fault kind, seed, size."""

    index: int
    kind: str
    seed: int
    nodes: int
    iterations: int

    @property
    def name(self) -> str:
        return f"{self.kind}/s{self.seed}/{self.nodes}n{self.iterations}i"


def make_cases(kinds: Sequence[str], quick: bool) -> list[Case]:
    """Fixed cases: 3 seeds per kind (1 with ``quick``), sizes varied deterministically."""
    cases: list[Case] = []
    all_kinds = sorted(k for k in FAULT_KINDS if k != "none")
    for k, kind in enumerate(all_kinds):
        if kind not in kinds:
            continue
        for r in range(1 if quick else SEEDS_PER_KIND):
            seed = 1000 + 10 * k + r
            if quick:
                nodes, iterations = 8, 40
            else:
                nodes = NODE_SIZES[(k + r) % len(NODE_SIZES)]
                iterations = 40 + ((7 * k + 13 * r) % 9) * 10  # 40 … 120
            cases.append(Case(len(cases), kind, seed, nodes, iterations))
    return cases


# --- ground truth per template -------------------------------------------------------------------


@dataclass
class LineTruth:
    """Which indicators each template's raw lines match, from an exact re-parse of the job."""

    by_template: dict[str, set[int]]  # template id → indices of truth.indicators it matches
    present: set[int]  # indicators matched by at least one raw line of the job
    templates: set[str]  # every template id of the job
    lines: int


def reparse(job_dir: Path, known: list[Template], indicators: Sequence[str]) -> LineTruth:
    """Parse and roll up ``job_dir`` exactly as ingest does, and match every line to the truth.

    The ingest's own pieces run again: ``LineParser`` seeded with the templates that were in the
    cluster before the job, the files in ``discover`` order through ``scanner.chunks``, one
    ``NodeRollup`` per node. A line's indicators count for its own template, and the joined
    records of the rollup (Python tracebacks, error continuations: the group's first message and
    every kept message carry the whole block) count for the template they were joined to.
    """
    patterns = [re.compile(p) for p in indicators]
    parser = LineParser(known=known)
    rules = StageRules.load()
    rollups: dict[str, NodeRollup] = {}
    hits: dict[int, set[int]] = defaultdict(set)  # id(kind) → indicator indices
    kinds: dict[int, LineKind] = {}
    n = 0

    def matches(text: str) -> set[int]:
        return {i for i, pattern in enumerate(patterns) if pattern.search(text)}

    def watched(chunks: Iterable[Chunk]) -> Iterator[Chunk]:
        nonlocal n
        for chunk in chunks:
            lines, line_kinds = chunk[0], chunk[1]
            n += len(lines)
            for raw, kind in zip(lines, line_kinds, strict=True):
                kinds[id(kind)] = kind
                found = matches(raw)
                if found:
                    hits[id(kind)] |= found
            yield chunk

    for stream in file_streams(discover(job_dir)):
        rollup = rollups.get(stream.node)
        if rollup is None:
            rollup = rollups[stream.node] = NodeRollup(stream.node, rules)
        long_lines: set[int] = set()
        rollup.scan(
            stream.path, stream.rank, watched(_chunks(stream, parser, None, long_lines)), long_lines
        )
    parser.finish()
    by_template: dict[str, set[int]] = defaultdict(set)
    for key, found in hits.items():
        template = kinds[key].template
        assert template is not None
        by_template[template.id] |= found
    templates: set[str] = set()
    for rollup in rollups.values():
        for (kind, _stage, _it), group in rollup.groups.items():
            assert kind.template is not None
            tid = kind.template.id
            templates.add(tid)
            for message in {group.message, *(k.message for k in group.kept)}:
                if "\n" in message:
                    by_template[tid] |= matches(message)
    present = set().union(*by_template.values()) if by_template else set()
    return LineTruth(dict(by_template), present, templates, n)


# --- scoring -------------------------------------------------------------------------------------


def score_events(event_ids: Sequence[str], truth: Truth, lt: LineTruth) -> dict[str, Any]:
    """Precision over reported events; recall over indicators present in the job."""
    tp = [t for t in event_ids if lt.by_template.get(t)]
    matched: set[int] = set()
    for t in event_ids:
        matched |= lt.by_template.get(t, set())
    root = {i for i, p in enumerate(truth.indicators) if p in truth.root_indicators}
    present, root_present = lt.present, root & lt.present
    precision = len(tp) / len(event_ids) if event_ids else 0.0
    recall = len(matched & present) / len(present) if present else 0.0
    root_recall = len(matched & root_present) / len(root_present) if root_present else 0.0
    return {
        "reported": len(event_ids),
        "tp": len(tp),
        "indicators": len(present),
        "matched": len(matched & present),
        "root_indicators": len(root_present),
        "root_matched": len(matched & root_present),
        "precision": precision,
        "recall": recall,
        "root_recall": root_recall,
        "f1": _f1(precision, recall),
        "missed": sorted(present - matched),
    }


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def node_rank(ranked: Sequence[str], faulty: Iterable[str]) -> int | None:
    """1-based rank of the best-ranked faulty node (None when none is ranked)."""
    bad = set(faulty)
    return next((k for k, n in enumerate(ranked, 1) if n in bad), None)


def iteration_distance(
    suspects: Sequence[int], spans: dict[int, int], target: int | None
) -> int | None:
    """Distance from ``target`` to the nearest suspect bucket [start, start+span-1]."""
    if target is None or not suspects:
        return None
    best = math.inf
    for start in suspects:
        end = start + max(spans.get(start, 1), 1) - 1
        best = min(
            best, 0 if start <= target <= end else min(abs(target - start), abs(target - end))
        )
    return int(best)


# --- one case ------------------------------------------------------------------------------------


def run_case(url: str, case: Case, root: Path) -> dict[str, Any]:
    """Simulate, ingest, diagnose with every method, score. The case's indices are dropped after."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    out = root / f"case{case.index:02d}"
    truth = simulate(
        out,
        nodes=case.nodes,
        iterations=case.iterations,
        fault=case.kind,
        seed=case.seed,
        baselines=2,
    )
    timings["simulate"] = time.monotonic() - started
    settings = load_settings(None, index_prefix=f"l4-ev{case.index:02d}-")
    store = connect(settings, url, flavour="opensearch")
    try:
        store.install_templates()
        t0 = time.monotonic()
        for base in sorted((out / "baselines").iterdir()):
            ingest_job(store, base, status="succeeded")
        known = load_known_templates(store)
        summary = ingest_job(store, out / "job")
        timings["ingest"] = time.monotonic() - t0
        job_id = summary.job.id
        t0 = time.monotonic()
        lt = reparse(out / "job", known, truth.indicators)
        timings["reparse"] = time.monotonic() - t0
        data = read_job_tables(store, read_job(store, job_id))
        result: dict[str, Any] = {
            "case": case.name,
            "kind": case.kind,
            "seed": case.seed,
            "nodes": case.nodes,
            "iterations": case.iterations,
            "lines": summary.lines,
            "job_id": job_id,
            "truth": {
                "faulty_nodes": list(truth.faulty_nodes),
                "stage": truth.stage,
                "iteration": truth.iteration,
                "indicators": list(truth.indicators),
                "root_indicators": list(truth.root_indicators),
                "absent_indicators": sorted(set(range(len(truth.indicators))) - lt.present),
            },
            "job_wide": set(truth.faulty_nodes) >= set(data.nodes),
            "template_id_mismatch": sorted(set(data.templates) ^ lt.templates),
            "methods": {},
            "errors": {},
        }
        texts = {tid: info.text for tid, info in data.templates.items()}
        for name, options in L4_METHODS.items():
            t0 = time.monotonic()
            try:
                d = diagnose_job(store, job_id, options=options, rules=[], write=False)
            except Exception as exc:  # a crash is a finding: record it, go on
                result["errors"][name] = _traceback_summary(exc)
                continue
            timings[f"diagnose {name}"] = time.monotonic() - t0
            report = d.report.to_json()
            dropped = {x.template_id for x in d.extras.dropped_templates}
            result["methods"][name] = _score(
                [e["template_id"] for e in report["events"]],
                [n["node"] for n in report["nodes"]],
                [int(i["iteration"]) for i in report["iterations"]],
                report["stage"],
                truth,
                lt,
                data,
                texts,
                detail={
                    "top_nodes": [(n["node"], n["score"]) for n in report["nodes"][:3]],
                    "top_events": [
                        (e["template"][:110], e["score"], e["reasons"][:4])
                        for e in report["events"][:3]
                    ],
                    "silent_nodes": report["silent_nodes"],
                    "iterations": [i["iteration"] for i in report["iterations"][:3]],
                    "dropped": dropped,
                },
            )
        for name, method in BASELINE_METHODS.items():
            try:
                fr = method(data)
            except Exception as exc:
                result["errors"][name] = _traceback_summary(exc)
                continue
            result["methods"][name] = _score(
                [e.template_id for e in fr.events],
                [n.node for n in fr.nodes],
                [],
                None,
                truth,
                lt,
                data,
                texts,
                detail={
                    "top_nodes": [(n.node, n.score) for n in fr.nodes[:3]],
                    "top_events": [
                        (texts.get(e.template_id, "")[:110], e.score, list(e.reasons))
                        for e in fr.events[:3]
                    ],
                },
            )
    finally:
        try:
            store.drop_indices()
        finally:
            store.close()
            shutil.rmtree(out, ignore_errors=True)
    timings["total"] = time.monotonic() - started
    result["timings"] = {k: round(v, 2) for k, v in timings.items()}
    return result


def _score(
    events: list[str],
    nodes: list[str],
    iterations: list[int],
    stage: str | None,
    truth: Truth,
    lt: LineTruth,
    data: JobData,
    texts: dict[str, str],
    detail: dict[str, Any],
) -> dict[str, Any]:
    ev = score_events(events, truth, lt)
    dropped: set[str] = detail.pop("dropped", set())
    missed = []
    for i in ev["missed"]:
        tids = sorted(t for t, hit in lt.by_template.items() if i in hit)
        why = "dropped by cross-job filter" if tids and set(tids) <= dropped else "not ranked"
        missed.append(
            {
                "indicator": truth.indicators[i],
                "root": truth.indicators[i] in truth.root_indicators,
                "why": why,
                "templates": [texts.get(t, t)[:110] for t in tids[:2]],
            }
        )
    ev["missed"] = missed
    ev["false_positives"] = [texts.get(t, t)[:110] for t in events if not lt.by_template.get(t)]
    return {
        **ev,
        "node_rank": node_rank(nodes, truth.faulty_nodes),
        "iteration_distance": iteration_distance(iterations, data.iteration_spans, truth.iteration),
        "stage": stage,
        **detail,
    }


def _traceback_summary(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-4:][::-1])
    return f"{type(exc).__name__}: {exc} at {where}"


# --- aggregation and printing --------------------------------------------------------------------


def aggregate(results: Sequence[dict[str, Any]], method: str) -> dict[str, Any]:
    """Macro (mean over cases) and micro (pooled) event scores, node top-k, iteration, stage."""
    rows = [r["methods"][method] for r in results if method in r["methods"]]
    node_rows = [
        r["methods"][method]
        for r in results
        if method in r["methods"] and not r["job_wide"] and r["truth"]["faulty_nodes"]
    ]
    it_rows = [
        r["methods"][method]
        for r in results
        if method in r["methods"] and r["truth"]["iteration"] is not None
    ]
    if not rows:
        return {"cases": 0}
    p = statistics.fmean(x["precision"] for x in rows)
    rc = statistics.fmean(x["recall"] for x in rows)
    tp, rep = sum(x["tp"] for x in rows), sum(x["reported"] for x in rows)
    mat, ind = sum(x["matched"] for x in rows), sum(x["indicators"] for x in rows)
    micro_p, micro_r = (tp / rep if rep else 0.0), (mat / ind if ind else 0.0)
    out: dict[str, Any] = {
        "cases": len(rows),
        "P": p,
        "R": rc,
        "F1": _f1(p, rc),
        "mean_case_F1": statistics.fmean(x["f1"] for x in rows),
        "micro_P": micro_p,
        "micro_R": micro_r,
        "micro_F1": _f1(micro_p, micro_r),
        "root_R": statistics.fmean(x["root_recall"] for x in rows),
        "events_per_case": rep / len(rows),
        "node_cases": len(node_rows),
    }
    for k in TOP_K:
        out[f"top{k}"] = (
            sum(1 for x in node_rows if x["node_rank"] is not None and x["node_rank"] <= k)
            / len(node_rows)
            if node_rows
            else None
        )
    located = [x for x in it_rows if x["iteration_distance"] is not None]
    out["iteration_cases"] = len(it_rows)
    out["iteration_pm1"] = (
        sum(1 for x in located if x["iteration_distance"] <= 1) / len(it_rows)
        if it_rows and method in L4_METHODS
        else None
    )
    out["stage"] = None
    if method in L4_METHODS:
        stage_ok = [
            r["methods"][method]["stage"] == r["truth"]["stage"]
            for r in results
            if method in r["methods"]
        ]
        out["stage"] = sum(stage_ok) / len(stage_ok)
    return out


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def method_table(results: Sequence[dict[str, Any]]) -> str:
    head = (
        "| method | P | R | F1 | micro P | micro R | micro F1 | root R | events/case "
        "| top-1 | top-3 | top-5 | top-8 | iter ±1 | stage |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for m in METHODS:
        a = aggregate(results, m)
        if not a["cases"]:
            lines.append(f"| {m} | (no case ran) |")
            continue
        lines.append(
            f"| {m} | {_num(a['P'])} | {_num(a['R'])} | {_num(a['F1'])} | {_num(a['micro_P'])} "
            f"| {_num(a['micro_R'])} | {_num(a['micro_F1'])} | {_num(a['root_R'])} "
            f"| {a['events_per_case']:.1f} | {_pct(a['top1'])} | {_pct(a['top3'])} "
            f"| {_pct(a['top5'])} | {_pct(a['top8'])} | {_pct(a['iteration_pm1'])} "
            f"| {_pct(a['stage'])} |"
        )
    lines.append(
        f"| paper (L4, real jobs) | {PAPER['P']} | {PAPER['R']} | {PAPER['F1']} | | | | | "
        f"| {_pct(PAPER['top1'])} | – | {_pct(PAPER['top5'])} | {_pct(PAPER['top8'])} | | |"
    )
    return "\n".join(lines)


def kind_table(results: Sequence[dict[str, Any]], method: str = "L4") -> str:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_kind[r["kind"]].append(r)
    head = "| kind | cases | P | R | root R | node ranks | iter dist | stage (truth) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for kind in sorted(by_kind):
        rs = [r for r in by_kind[kind] if method in r["methods"]]
        if not rs:
            lines.append(f"| {kind} | {len(by_kind[kind])} | crashed | | | | | |")
            continue
        ms = [r["methods"][method] for r in rs]
        ranks = ", ".join(
            "all" if r["job_wide"] else str(m["node_rank"] or "–")
            for r, m in zip(rs, ms, strict=True)
        )
        dists = ", ".join(
            "n/a"
            if r["truth"]["iteration"] is None
            else str(m["iteration_distance"] or 0)
            if m["iteration_distance"] is not None
            else "miss"
            for r, m in zip(rs, ms, strict=True)
        )
        stages = ", ".join(
            f"{m['stage']}"
            + ("" if m["stage"] == r["truth"]["stage"] else f"≠{r['truth']['stage']}")
            for r, m in zip(rs, ms, strict=True)
        )
        lines.append(
            f"| {kind} | {len(rs)} | {statistics.fmean(m['precision'] for m in ms):.2f} "
            f"| {statistics.fmean(m['recall'] for m in ms):.2f} "
            f"| {statistics.fmean(m['root_recall'] for m in ms):.2f} | {ranks} | {dists} "
            f"| {stages} |"
        )
    return "\n".join(lines)


def failures(results: Sequence[dict[str, Any]], method: str, verbose: bool) -> list[str]:
    """One line per shortfall of ``method`` (node not in top 5, root indicator missed, low P)."""
    out: list[str] = []
    for r in results:
        if r["errors"].get(method):
            out.append(f"- {r['case']}: CRASH {r['errors'][method]}")
            continue
        m = r["methods"].get(method)
        if m is None:
            continue
        problems = []
        if not r["job_wide"] and (m["node_rank"] is None or m["node_rank"] > 5):
            problems.append(f"faulty node at rank {m['node_rank']} of {r['nodes']}")
        root_missed = [x for x in m["missed"] if x["root"]]
        if root_missed:
            problems.append(
                "root missed: "
                + "; ".join(f"/{x['indicator'][:60]}/ ({x['why']})" for x in root_missed)
            )
        cascade_missed = [x for x in m["missed"] if not x["root"]]
        if cascade_missed:
            problems.append(f"{len(cascade_missed)} cascade indicator(s) missed")
        if m["precision"] < 0.5:
            problems.append(f"precision {m['precision']:.2f} ({m['tp']}/{m['reported']})")
        if r["truth"]["iteration"] is not None and (
            m["iteration_distance"] is None or m["iteration_distance"] > 1
        ):
            problems.append(f"iteration off ({m['iteration_distance']})")
        if m["stage"] != r["truth"]["stage"]:
            problems.append(f"stage {m['stage']} ≠ {r['truth']['stage']}")
        if not problems:
            continue
        out.append(f"- {r['case']}: " + "; ".join(problems))
        if verbose:
            out.append(f"    truth nodes: {r['truth']['faulty_nodes'][:4]}")
            out.append(f"    top nodes: {m['top_nodes']}  silent: {m.get('silent_nodes')}")
            for text, score, reasons in m["top_events"]:
                out.append(f"    event {score:.3f} {reasons}: {text}")
            for x in m["missed"][:4]:
                out.append(f"    missed /{x['indicator'][:70]}/ {x['why']}: {x['templates'][:1]}")
            for fp in m["false_positives"][:3]:
                out.append(f"    false positive: {fp}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small case per kind")
    ap.add_argument("--cases", type=int, default=None, help="run only the first N cases")
    ap.add_argument("--kinds", default=None, help="comma-separated fault kinds (default: all)")
    ap.add_argument("--json", type=Path, default=None, help="write per-case results here")
    ap.add_argument("--verbose", action="store_true", help="details of every failed case")
    args = ap.parse_args(argv)
    all_kinds = sorted(k for k in FAULT_KINDS if k != "none")
    kinds = all_kinds if args.kinds is None else [k.strip() for k in args.kinds.split(",")]
    unknown = sorted(set(kinds) - set(all_kinds))
    if unknown:
        print(
            f"evaluate: --kinds: unknown fault kind(s) {', '.join(unknown)} — one of: "
            f"{', '.join(all_kinds)}",
            file=sys.stderr,
        )
        return 2
    cases = make_cases(kinds, args.quick)[: args.cases]
    results: list[dict[str, Any]] = []
    crashed: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="l4-eval-") as tmp, EmbeddedCluster() as cluster:
        for case in cases:
            try:
                r = run_case(cluster.url, case, Path(tmp))
            except Exception as exc:  # report the case, keep evaluating
                crashed.append(f"{case.name}: {_traceback_summary(exc)}")
                print(f"[{case.index + 1}/{len(cases)}] {case.name}: CRASH", file=sys.stderr)
                continue
            results.append(r)
            m = r["methods"].get("L4")
            status = (
                f"P {m['precision']:.2f} R {m['recall']:.2f} node rank {m['node_rank']}"
                if m
                else "L4 crashed"
            )
            print(
                f"[{case.index + 1}/{len(cases)}] {case.name}: {r['lines']:,} lines, "
                f"{r['timings']['total']:.1f} s; L4 {status}",
                file=sys.stderr,
                flush=True,
            )
    elapsed = time.monotonic() - started
    print(f"\n## {len(results)} cases ({len(crashed)} crashed), {elapsed:.0f} s\n")
    print(method_table(results))
    print("\nPer kind (L4):\n")
    print(kind_table(results))
    mismatched = [r["case"] for r in results if r["template_id_mismatch"]]
    absent = [r["case"] for r in results if r["truth"]["absent_indicators"]]
    print(f"\ntemplate-id sets differing from the cluster's: {mismatched or 'none'}")
    print(f"cases with truth indicators matching no raw line: {absent or 'none'}")
    for m in ("L4",):
        lines = failures(results, m, args.verbose)
        print(f"\nShortfalls of {m} ({len(lines)} lines):")
        print("\n".join(lines) if lines else "none")
    errors = [f"{r['case']} {k}: {v}" for r in results for k, v in r["errors"].items()]
    if crashed or errors:
        print("\nCrashes:")
        print("\n".join(crashed + errors))
    stage_times = defaultdict(list)
    for r in results:
        for k, v in r["timings"].items():
            stage_times[k].append(v)
    print(
        "\nmean seconds per case: "
        + ", ".join(f"{k} {statistics.fmean(v):.2f}" for k, v in stage_times.items())
    )
    if args.json:
        payload = {
            "cases": results,
            "crashed": crashed,
            "summary": {m: aggregate(results, m) for m in METHODS},
            "paper": PAPER,
            "seconds": elapsed,
        }
        args.json.write_text(json.dumps(payload, indent=1, default=_json_default) + "\n", "utf-8")
    return 0


def _json_default(value: object) -> object:
    if isinstance(value, set | frozenset | tuple):
        return sorted(value) if isinstance(value, set | frozenset) else list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


if __name__ == "__main__":
    sys.exit(main())
