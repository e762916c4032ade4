"""The evidence heuristics between the aggregated tables and fusion: levels, stages, discounts."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from l4_plugin.analysis.evidence import (
    at_stage_start,
    discounts,
    event_stats,
    inferred_level,
    reactions,
    timed_in_stage,
)
from l4_plugin.analysis.fusion import Fusion
from l4_plugin.analysis.params import AnalysisOptions
from l4_plugin.analysis.recipe import cross_job
from l4_plugin.analysis.results import EventStat, Straggler, StragglerResult
from l4_plugin.analysis.tables import BaselinePool, Cell, JobData, JobDoc, TemplateInfo


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("Kernel panic - not syncing: Fatal machine check", "ERROR"),
        ("NVRM: Xid (PCI:0000:46:00): 79, GPU has fallen off the bus.", "ERROR"),
        ("mlx5_core 0000:3b:00.0 ibp59s0: Link down", "ERROR"),
        ("nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer", "WARN"),
        ("CPU12: Package temperature above threshold, cpu clock throttled", "WARN"),
        ("loading shard 3 of 12", None),
    ],
)
def test_inferred_level(text: str, level: str | None) -> None:
    assert inferred_level(text) == level


def _data(
    cells: dict[tuple[str, str], Cell],
    its: dict[tuple[int, str], tuple[float, int]],
    texts: dict[str, str],
    stages: dict[str, str] | None = None,
) -> JobData:
    templates = {
        t: TemplateInfo(text=x, stages={(stages or {}).get(t, "training"): 1})
        for t, x in texts.items()
    }
    nodes = tuple(sorted({n for n, _ in cells}))
    return JobData(
        job=JobDoc("j", "failed", "fp", nodes, 100, 0.0, 100.0),
        time_unit="ts",
        cells=cells,
        templates=templates,
        stage_spans={(n, "init"): (0.0, 10.0, 1.0, 5.0) for n in nodes}
        | {(n, "training"): (10.0, 100.0, 6.0, 90.0) for n in nodes},
        iteration_cells=its,
        iteration_spans={k: 1 for k in range(10)},
        node_iteration_start={},
        node_last_iteration={n: 9 for n in nodes},
    )


def test_chronic_background_and_empty_lines_are_discounted() -> None:
    texts = {
        "pcie": "nvidia <HEX>: PCIe Bus Error: severity=Corrected, type=Physical Layer",
        "ib": "NCCL WARN NET/IB : Got async event : port error",
        "last": "Last error:",
    }
    cells = {("a", t): Cell(3, 20.0, 90.0, 1.0) for t in texts} | {
        ("b", "pcie"): Cell(1, 30, 30, 1)
    }
    its = {(k, "pcie"): (10.0 * k, 1) for k in range(1, 9)} | {
        (9, "ib"): (95.0, 1),
        (9, "last"): (96.0, 1),
    }
    d = discounts(_data(cells, its, texts), None)
    assert d["pcie"][1] == "chronic-before-failure"
    assert d["last"][1] == "low-information"
    assert "ib" not in d
    # A straggler's own slowdown lines start with the slowdown: not background.
    slow = StragglerResult((Straggler("a", 2, 5.0, 1.5),))
    cells_slow = {("a", "pcie"): Cell(8, 20.0, 90.0, 1.0)}
    assert "pcie" not in discounts(_data(cells_slow, its, {"pcie": texts["pcie"]}), slow)


def test_one_error_copied_into_several_files_is_not_chronic() -> None:
    # A Ray worker's traceback: in the driver's forwarded output and the worker's own file, each
    # copy placed by its own stream's last stamp (buckets 2 and 5), and the driver's re-raise at
    # the failure (9): three buckets, but no node printed it again and again.
    texts = {"fnf": "FileNotFoundError: [Errno <NUM>] No such file or directory: '<PATH>'"}
    cells = {("w", "fnf"): Cell(2, 20.0, 50.0, 1.0), ("(job)", "fnf"): Cell(1, 95.0, 95.0, 1.0)}
    its = {(2, "fnf"): (20.0, 1), (5, "fnf"): (50.0, 1), (9, "fnf"): (95.0, 1)}
    assert "fnf" not in discounts(_data(cells, its, texts), None)
    # printed three times on one node: background
    cells[("w", "fnf")] = Cell(3, 20.0, 50.0, 1.0)
    assert discounts(_data(cells, its, texts), None)["fnf"][1] == "chronic-before-failure"


def test_the_options_tune_the_discounts() -> None:
    # The tuning constants are AnalysisOptions fields: a changed one changes the evidence.
    texts = {"pcie": "nvidia <HEX>: PCIe Bus Error: severity=Corrected, type=Physical Layer"}
    cells = {("a", "pcie"): Cell(3, 20.0, 90.0, 1.0)}
    its = {(k, "pcie"): (10.0 * k, 1) for k in range(1, 9)}
    data = _data(cells, its, texts)
    assert discounts(data, None)["pcie"] == (0.35, "chronic-before-failure")
    tuned = AnalysisOptions(chronic_factor=0.2)
    assert discounts(data, None, options=tuned)["pcie"] == (0.2, "chronic-before-failure")
    # Needing more buckets than the template was printed in: no longer chronic.
    assert "pcie" not in discounts(data, None, options=AnalysisOptions(chronic_buckets=9))


def test_kernel_lines_get_a_level_and_the_stage_of_their_time() -> None:
    texts = {"panic": "Kernel panic - not syncing: Fatal machine check"}
    cells = {("a", "panic"): Cell(1, 99.0, 99.0, 1.0), ("b", "x"): Cell(1, 1.0, 1.0, 1.0)}
    data = _data(cells, {}, texts | {"x": "starting workers for entrypoint"}, {"panic": "init"})
    stats = {e.template_id: e for e in event_stats(data)}
    assert stats["panic"].level == "ERROR"
    assert stats["panic"].stage == "training"
    assert stats["x"].stage == "training"  # its own (training) tag is kept


def test_a_stack_printed_alone_is_a_warning() -> None:
    # deepspeedai/DeepSpeed#797: a hung rank's stack pasted with nothing else; its template is
    # the first frame's and no word of it gives a level.
    stack = (
        '  File "/ds/deepspeed/runtime/engine.py", line 1456 in _checkpoint_tag_validation\n'
        '  File "/ds/deepspeed/runtime/engine.py", line 1489 in save_checkpoint'
    )
    cells = {("a", "stk"): Cell(1, 5.0, 5.0, 1.0), ("a", "one"): Cell(1, 6.0, 6.0, 2.0)}
    data = _data(cells, {}, {"stk": 'File "<PATH>", line <NUM> in <*>', "one": "x"})
    data.templates["stk"].message = stack
    data.templates["one"].message = stack.splitlines()[0]
    stats = {e.template_id: e for e in event_stats(data)}
    assert stats["stk"].level == "WARN"
    assert stats["one"].level is None  # one frame is not yet a stack


def test_an_error_printed_as_its_stage_began_belongs_to_it() -> None:
    # dhcode-cpp/X-R1#45: rank 0's error in its first step reached the log a moment before the
    # bar's first frame that marks training; the launcher's report came after it.
    cells = {
        ("a", "err"): Cell(1, 9.999, 9.999, 1.0),
        ("a", "early"): Cell(1, 2.0, 2.0, 0.5),
        ("a", "warn"): Cell(1, 9.999, 9.999, 1.5),
    }
    texts = {"err": "x", "early": "y", "warn": "z"}
    data = _data(cells, {}, texts, dict.fromkeys(texts, "init"))
    data.templates["err"].levels["ERROR"] = 1
    data.templates["early"].levels["ERROR"] = 1
    data.templates["warn"].levels["WARNING"] = 1
    events = event_stats(data)
    moved = {e.template_id: e.stage for e in at_stage_start(events, data, "training", 5.0)}
    # (training starts at 10.0 on node a: the error 1 ms before it; the other error 8 s before
    # it stays in init, and so does a warning)
    assert moved == {"err": "training", "early": "init", "warn": "init"}
    # the words of a consequence (a watchdog's timeout) stay where they were printed when the
    # stage failed with an error of its own (the save's traceback the watchdog waited in) ...
    own = EventStat("own", "ERROR", {"a": 50.0}, {"a": 1}, "training", {"a": 40.0})
    kept = at_stage_start((*events, own), data, "training", 5.0, frozenset({"err"}))
    assert {e.template_id: e.stage for e in kept}["err"] == "init"
    # ... or a stack that says where it stood, its words a consequence's too (real-dev's
    # moss: the save's frames waiting in its all-reduce, the watchdog's timeout before them) ...
    stack = EventStat("stack", "ERROR", {"a": 50.0}, {"a": 1}, "training", {"a": 40.0})
    data.templates["stack"] = TemplateInfo(text="Traceback (most recent call last):")
    data.templates["stack"].message = (
        'Traceback (most recent call last):\n  File "/w/train.py", line 9, in save_checkpoint\n'
        '  File "/env/torch/distributed/distributed_c10d.py", line 1, in all_reduce'
    )
    said = frozenset({"err", "stack"})
    kept = at_stage_start((*events, stack), data, "training", 5.0, said)
    assert {e.template_id: e.stage for e in kept}["err"] == "init"
    # ... and are the stage's where it printed nothing but a consequence's words
    data.templates["stack"].message = "[Rank 0] Some NCCL operations have failed or timed out."
    alone = at_stage_start((*events, stack), data, "training", 5.0, said)
    assert {e.template_id: e.stage for e in alone}["err"] == "training"
    assert at_stage_start(events, data, None, 5.0) == events


def test_an_untimed_error_just_before_its_stage_belongs_to_it() -> None:
    # hiyouga/LlamaFactory#1845 (ZeRO-3 Mixtral): a pasted log without times, the watchdog's
    # traceback on lines 1-3, the bar's frame that marks training on line 4, then the NCCL
    # boilerplate; an error with another line between it and the bar stays where it was.
    cells = {
        ("a", "err"): Cell(1, math.inf, -math.inf, 1.0),
        ("a", "far"): Cell(1, math.inf, -math.inf, 0.0),
        ("a", "info"): Cell(1, math.inf, -math.inf, 0.5),
        ("a", "bar"): Cell(1, math.inf, -math.inf, 4.0),
    }
    texts = {"err": "x", "far": "y", "info": "z", "bar": "w"}
    data = _data(cells, {}, texts, {"err": "init", "far": "init", "info": "init"})
    data.stage_spans = {("a", "init"): (math.nan, math.nan, 0.0, 3.0)}
    data.stage_spans[("a", "training")] = (math.nan, math.nan, 4.0, 4.0)
    for t in ("err", "far"):
        data.templates[t].levels["ERROR"] = 1
    events = tuple(
        EventStat(t, "ERROR", {"a": c.first_pos}, {"a": 1}, "init", {"a": c.first_pos})
        for (_, t), c in cells.items()
        if t in ("err", "far")
    )
    moved = {e.template_id: e.stage for e in at_stage_start(events, data, "training", 5.0)}
    assert moved == {"err": "training", "far": "init"}


def test_fusion_discount_lowers_score_and_says_why() -> None:
    events = [
        EventStat("a", "ERROR", {"n1": 5.0}, {"n1": 1}, "training"),
        EventStat("b", "ERROR", {"n1": 20.0}, {"n1": 1}, "training"),
    ]
    plain = Fusion().fit(events, ["n1", "n2"]).result_
    cut = Fusion().fit(events, ["n1", "n2"], discounts={"b": (0.3, "low-information")}).result_
    score = {e.template_id: e.score for e in cut.candidates}
    base = {e.template_id: e.score for e in plain.candidates}
    assert score["b"] == pytest.approx(base["b"] * 0.3)
    assert "low-information" in next(e.reasons for e in cut.candidates if e.template_id == "b")
    assert score["a"] == base["a"] and not math.isnan(score["a"])


def test_failing_stage_occurrence_orders_events() -> None:
    texts = {"warn": "torchrun header", "ib": "NET/IB : port error on mlx5_0"}
    cells = {
        ("a", "warn"): Cell(3, 1.0, 95.0, 1.0),
        ("b", "warn"): Cell(1, 1.0, 1.0, 1.0),
        ("a", "ib"): Cell(1, 80.0, 80.0, 1.0),
    }
    data = _data(cells, {}, texts)
    data.stage_first.update(
        {("a", "warn", "init"): 1.0, ("b", "warn", "init"): 1.0, ("a", "warn", "training"): 90.0}
        | {("a", "ib", "training"): 80.0}
    )
    timed = {e.template_id: e for e in timed_in_stage(event_stats(data), data, "training")}
    # The start-up occurrence no longer makes the teardown warning look like the first event.
    assert timed["warn"].first == 90.0 and set(timed["warn"].first_seen) == {"a", "b"}
    assert timed["ib"].first == 80.0


def test_empty_template_never_counts() -> None:
    data = _data({("a", "e"): Cell(2, 1.0, 2.0, 1.0)}, {}, {"e": ""})
    data.templates["e"].message = "W0805 09:34:55.000000 55097 torch/distributed/run.py:779] "
    assert discounts(data, None)["e"] == (0.0, "empty")


def test_boilerplate_prose_beside_a_factual_line_is_discounted() -> None:
    texts = {
        "caught": "[Rank <RANK>] Watchdog caught collective timeout: WorkNCCL(SeqNum=<NUM>)",
        "avoid": "[Rank <RANK>] To avoid data inconsistency, we are taking the process down.",
        "terminate": "terminate called after throwing an instance of 'c00::DistBackendError'",
        "code": "ERR00000 PTA call acl api failed.",
        "root": "NET/IB : port error on the only node that has it",
    }
    both = ("a", "b")
    cells = {(n, t): Cell(4, 100.0, 100.5, 1.0) for n in both for t in texts if t != "root"}
    cells[("a", "root")] = Cell(4, 100.0, 100.5, 1.0)
    d = discounts(_data(cells, {}, texts), None)
    assert d["avoid"] == (0.4, "boilerplate-of-block")
    # An error type, an error code or a lone node's line is never boilerplate.
    assert "terminate" not in d and "code" not in d and "root" not in d and "caught" not in d


def test_kernel_lines_are_not_absent_from_baselines_without_kernel_logs() -> None:
    texts = {
        "panic": "Kernel panic - not syncing: Fatal machine check",
        "oom": "CUDA out of memory",
    }
    data = _data({("a", t): Cell(1, 50.0, 50.0, 1.0) for t in texts}, {}, texts)
    data.job = replace(data.job, system_logs=True, system_templates=frozenset({"panic"}))
    quiet = JobDoc("b1", "succeeded", "fp", ("x",), 10, 0.0, 1.0, system_logs=False)
    events = event_stats(data)
    kept = cross_job(data, events, BaselinePool((quiet,), {}), AnalysisOptions())
    assert kept.reason_of("panic") == "no-baseline"
    assert kept.reason_of("oom") == "absent-in-baseline"
    # A baseline that did ship kernel logs makes the kernel line's absence count.
    loud = replace(quiet, system_logs=True)
    kept = cross_job(data, events, BaselinePool((loud,), {}), AnalysisOptions())
    assert kept.reason_of("panic") == "absent-in-baseline"


def test_a_line_naming_its_host_is_found_in_a_baseline_run_on_other_nodes() -> None:
    # tests/realruns: every rank prints "initialized process group: rank R of W on HOST"; the
    # run's hosts (h100-x1, h100-x2) are spelt "h0-x0" in its template, the baseline's
    # (trn-r2-n01…) "trn-r0-n0": two templates, one line.
    from l4_plugin.diagnosis.queries import host_spellings, with_aliases
    from l4_plugin.records import host_blinder

    said = "initialized process group: rank <RANK> of <NUM> on {}, backend gloo"
    assert host_spellings(["h100-x1", "h100-x2", "node-17"]) == {"h0-x0", "node-<NUM>"}
    assert host_blinder({"h0-x0"})(said.format("h0-x0")) == said.format("<HOST>")
    assert host_blinder({"h0-x0"})(said.format("trn-r0-n0")) == said.format("trn-r0-n0")
    # (a name inside another word is no host's)
    assert host_blinder({"h0-x0"})("path /data/h0-x0s/file") == "path /data/h0-x0s/file"
    texts = {"init": said.format("h0-x0"), "oom": "CUDA out of memory"}
    data = _data(
        {(n, t): Cell(1, 50.0, 50.0, 1.0) for t in texts for n in ("h100-x1", "h100-x2")}, {}, texts
    )
    base = JobDoc("b1", "succeeded", "fp", ("trn-r2-n01", "trn-r2-n02"), 10, 0.0, 1.0)
    blind = host_blinder(host_spellings(base.nodes))(said.format("trn-r0-n0"))
    pool = BaselinePool((base,), {"b-init": (1, 1.0, 1.0, 1.0)}, blind={blind: "b-init"})
    events = event_stats(data)
    kept = cross_job(data, events, with_aliases(pool, data), AnalysisOptions())
    assert "init" not in kept.kept_ids and kept.reason_of("oom") == "absent-in-baseline"
    unaliased = cross_job(data, events, pool, AnalysisOptions())
    assert unaliased.reason_of("init") == "absent-in-baseline"


def test_a_nodes_reaction_to_its_own_failure_is_not_evidence() -> None:
    # torchrun's agent on the failing node sends SIGTERM to the other workers a second after the
    # error; the root cause's warning came before the error; the error block's own lines come in
    # the same second.
    events = (
        EventStat("err", "ERROR", {"n1": 100.0, "n2": 130.0}, {"n1": 1, "n2": 1}, "training"),
        EventStat("sigterm", "WARN", {"n1": 101.3}, {"n1": 7}, "training"),
        EventStat("cause", "WARN", {"n1": 96.0}, {"n1": 1}, "training"),
        EventStat("block", None, {"n1": 100.0}, {"n1": 1}, "training"),
        EventStat("late", "WARN", {"n1": 101.0, "n3": 50.0}, {"n1": 1, "n3": 1}, "training"),
        EventStat("after", "WARN", {"n2": 300.0}, {"n2": 1}, "training"),
    )
    peer = EventStat("peer", "WARN", {"n2": 131.0}, {"n2": 1}, "training")
    everywhere = EventStat("all", "WARN", {"n1": 102.0, "n2": 132.0}, {"n1": 1, "n2": 1}, "x")
    events = (*events, peer, everywhere)
    cells = {(n, "err"): Cell(1, 100.0, 100.0, 1.0) for n in ("n1", "n2", "n3", "n4")}
    texts = {"err": "x", "peer": "NCCL WARN NET/IB : Got completion from peer <IP><<NUM>>"}
    data = _data(cells, {}, texts)
    kept = frozenset(e.template_id for e in events)
    assert reactions(data, events, kept) == {"sigterm"}
    # The errors that define "after" are the ones cross-job filtering kept.
    assert reactions(data, events, kept - {"err"}) == set()
    assert reactions(replace(data, time_unit="position"), events, kept) == set()
    # A line whose words name a device's fault is a second reporter of it, not a reaction
    # (NCCL's port error after the kernel's port event; a timeless line takes the next stamp).
    d = discounts(data, None, events=events, kept=kept)
    assert d["sigterm"] == (0.4, "reaction-to-error")
    d = discounts(data, None, events=events, kept=kept, hardware=frozenset({"sigterm"}))
    assert "sigterm" not in d


def test_a_warning_the_job_trained_past_is_discounted() -> None:
    # gen3's decoy: a link flapped on node b at iteration 2 and came back; the job trained on to
    # iteration 9 and failed on node a. Errors, and warnings near the end, keep their weight.
    from l4_plugin.analysis.evidence import recovered

    texts = {
        "flap": "NCCL WARN NET/IB : mlx5_3:1 Got async event : port error",
        "late": "NCCL WARN NET/IB : Got completion from peer <IP> with status=12",
        "nan": "found NaN in local grad norm",
    }
    cells = {
        ("b", "flap"): Cell(1, 21.0, 21.0, 1.0),
        ("a", "late"): Cell(1, 95.0, 95.0, 1.0),
        ("a", "nan"): Cell(1, 22.0, 22.0, 1.0),
    }
    data = replace(
        _data(cells, {}, texts),
        node_iteration_start={(n, k): 10.0 * k for n in ("a", "b") for k in range(10)},
    )
    levels = {"flap": "WARN", "late": "WARN", "nan": "ERROR"}
    events = tuple(replace(e, level=levels[e.template_id]) for e in event_stats(data))
    assert recovered(data, events, None) == {"flap"}
    # In a job that slowed down an early one-off warning may be the slow-burning cause (dev-26's
    # GPU at its thermal slowdown): nothing is discounted.
    from l4_plugin.analysis.results import Slowdown

    assert recovered(data, events, None, Slowdown(5, 10.0, 2.0)) == set()


def test_a_link_that_said_it_came_back_is_recovered_even_in_a_slowed_job() -> None:
    # NCCL's IB async thread prints the port's error and then its return (IBV_EVENT_PORT_ERR,
    # IBV_EVENT_PORT_ACTIVE); a flap that came back did not end the job, whatever its pace. A
    # port that never came back (node c) keeps its weight.
    from l4_plugin.analysis.evidence import flapped

    texts = {
        "down": "NCCL WARN NET/IB : mlx5_10:1 Got async event : port error",
        "up": "NCCL WARN NET/IB : mlx5_10:1 Got async event : port active",
        "other": "NCCL WARN NET/IB : mlx5_3:1 Got async event : port error",
    }
    cells = {
        ("b", "down"): Cell(1, 21.0, 21.0, 1.0),
        ("b", "up"): Cell(1, 24.0, 24.0, 1.0),
        ("c", "other"): Cell(1, 90.0, 90.0, 1.0),
    }
    data = _data(cells, {}, texts)
    events = tuple(replace(e, level="WARN") for e in event_stats(data))
    assert flapped(data, events) == {"down"}
    # the same error again after the port came back: not recovered
    again = replace(data, cells={**cells, ("b", "down"): Cell(2, 21.0, 30.0, 1.0)})
    assert flapped(again, tuple(replace(e, level="WARN") for e in event_stats(again))) == set()


def test_teardown_is_the_softwares_reaction_not_a_links_consequence() -> None:
    from l4_plugin.analysis.evidence import record_terms, teardown
    from l4_plugin.analysis.lexicon import default_lexicon

    texts = {
        "agent": "no error file defined for parent, to copy child error file (/tmp/e.json)",
        "flush": "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<31291> with status=5 "
        "opcode=0 len=0 vendor err 249",
        "watchdog": "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
    }
    data = _data({("a", t): Cell(1, 1.0, 1.0, 1.0) for t in texts}, {}, texts)
    assert teardown(record_terms(data, default_lexicon())) == {"agent"}


def test_a_flap_and_its_return_in_one_template_is_recovered() -> None:
    # Drain makes one template of "port error" and "port active" ("port <*>"): its lines say
    # whether the link came back.
    from l4_plugin.analysis.evidence import flapped

    texts = {"port": "NCCL WARN NET/IB : mlx0_<NUM>:<NUM> Got async event : port <*>"}
    cells = {("b", "port"): Cell(2, 21.0, 24.0, 1.0), ("c", "port"): Cell(1, 90.0, 90.0, 1.0)}
    down = "b:1:2 [6] NCCL WARN NET/IB : mlx5_10:1 Got async event : port error"
    up = "b:1:2 [6] NCCL WARN NET/IB : mlx5_10:1 Got async event : port active"
    back = replace(_data(cells, {}, texts), state_lines=(("b", "port", down), ("b", "port", up)))
    only_b = replace(back, cells={("b", "port"): cells[("b", "port")]})
    assert flapped(only_b, tuple(replace(e, level="WARN") for e in event_stats(only_b))) == {"port"}
    # node c's port went down and never came back: the template is not recovered
    both = replace(back, state_lines=(*back.state_lines, ("c", "port", down.replace("b:", "c:"))))
    assert flapped(both, tuple(replace(e, level="WARN") for e in event_stats(both))) == set()


def test_a_programs_report_of_a_fault_its_kernel_reported_is_the_symptom() -> None:
    # Xid 48 in node a's dmesg (no wall-clock time) and the CUDA error its rank raised: the
    # rank's error ranks after the driver's report. On node b, with no such report, the same
    # error stands; nor does a kernel line of another kind (storage) make a GPU error a symptom.
    from l4_plugin.analysis.evidence import record_terms, symptoms
    from l4_plugin.analysis.lexicon import default_lexicon

    texts = {
        "xid": "NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, An "
        "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
        "cuda": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "lustre": "LustreError: 167-0: fs-OST0025-osc: This client was evicted by fs-OST0025",
    }
    cells = {
        ("a", "xid"): Cell(1, math.nan, math.nan, 5.0),
        ("a", "cuda"): Cell(1, 50.0, 50.0, 9.0),
        ("b", "cuda"): Cell(1, 51.0, 51.0, 9.0),
        ("b", "lustre"): Cell(1, 40.0, 40.0, 3.0),
    }
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, system_templates=frozenset({"xid", "lustre"})))
    terms = record_terms(data, default_lexicon())
    options = AnalysisOptions()
    assert symptoms(data, terms, options) == {
        "cuda": (options.symptom_factor, "symptom-of-system-log:a")
    }
    # Without the kernel's report, nothing is a symptom.
    alone = replace(data, cells={k: v for k, v in cells.items() if k[1] != "xid"})
    assert symptoms(alone, record_terms(alone, default_lexicon()), options) == {}
    # Not only hardware: the kernel's OOM kill and the agent's report that its worker died of
    # SIGKILL on that node (torchelastic's "failed (exitcode: -9)")
    texts = {
        "oom": "Out of memory: Killed process 2502682 (python3) total-vm:160000000kB",
        "agent": "failed (exitcode: -9) local_rank: 1 (pid: 2502682) of binary: /usr/bin/python3",
    }
    cells = {("a", "oom"): Cell(1, math.nan, math.nan, 5.0), ("a", "agent"): Cell(1, 9.0, 9.0, 2.0)}
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, system_templates=frozenset({"oom"})))
    assert symptoms(data, record_terms(data, default_lexicon()), options) == {
        "agent": (options.symptom_factor, "symptom-of-system-log:a")
    }


def test_the_schedulers_node_failure_after_a_nodes_machine_check_is_its_symptom() -> None:
    # Node a's kernel panics on a machine check; three minutes on, slurmstepd on the nodes
    # left prints that the step was cancelled "DUE TO NODE FAILURE": the scheduler's words
    # speak of the job, they follow what a's kernel said. Without a kernel's report, or with
    # one only after the scheduler's, they stand.
    from l4_plugin.analysis.evidence import record_terms, symptoms
    from l4_plugin.analysis.lexicon import default_lexicon

    texts = {
        "mce": "kernel: [413996.569910] Kernel panic - not syncing: Fatal machine check",
        "slurm": "slurmstepd: error: *** STEP <NUM>.<NUM> ON <*> CANCELLED AT <*> DUE TO NODE "
        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    }
    cells = {
        ("a", "mce"): Cell(1, 100.0, 100.0, 5.0),
        ("b", "slurm"): Cell(1, 290.0, 290.0, 9.0),
        ("c", "slurm"): Cell(1, 290.0, 290.0, 9.0),
    }
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, system_templates=frozenset({"mce"})))
    options = AnalysisOptions()
    assert symptoms(data, record_terms(data, default_lexicon()), options) == {
        "slurm": (options.symptom_factor, "symptom-of-system-log:a")
    }
    # a dmesg without wall-clock times: no later than anybody can tell
    untimed = replace(data, cells={**cells, ("a", "mce"): Cell(1, math.nan, math.nan, 5.0)})
    assert "slurm" in symptoms(untimed, record_terms(untimed, default_lexicon()), options)
    later = replace(data, cells={**cells, ("a", "mce"): Cell(1, 400.0, 400.0, 5.0)})
    assert symptoms(later, record_terms(later, default_lexicon()), options) == {}
    alone = replace(data, cells={k: v for k, v in cells.items() if k[1] != "mce"})
    assert symptoms(alone, record_terms(alone, default_lexicon()), options) == {}


def test_a_node_whose_kernel_killed_a_process_is_not_silent() -> None:
    # The OOM killer took one rank's process: the node's kernel goes on and says so. A hung or
    # crashed node (its last kernel words a lockup or a machine check) says no such thing.
    from l4_plugin.analysis.evidence import killed_on

    texts = {
        "oom": "Out of memory: Killed process <NUM> (python3) total-vm:<SIZE>, anon-rss:<SIZE>",
        "lockup": "watchdog: BUG: soft lockup - CPU#<NUM> stuck for <DUR>! [python3:<NUM>]",
        "step": "step <NUM> | loss <NUM>",
    }
    cells = {("a", "oom"): Cell(1, 5.0, 5.0, 0.0), ("b", "lockup"): Cell(1, 5.0, 5.0, 0.0)}
    cells |= {(n, "step"): Cell(3, 0.0, 4.0, 0.0) for n in ("a", "b", "c")}
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, system_templates=frozenset({"oom", "lockup"})))
    assert killed_on(data) == {"a"}


def test_a_node_whose_agent_reported_its_workers_death_is_not_silent() -> None:
    # GPU fell off the bus on a: its rank aborted (its stderr line has no stamp of its own) and
    # torchelastic's agent reported the death 26 s after the rank's last step. b's ranks hung
    # and were reported only when the job was torn down ten minutes later.
    from l4_plugin.analysis.params import AnalysisOptions
    from l4_plugin.analysis.recipe import _reported_dead

    texts = {
        "failed": "failed (exitcode: <NUM>) local_rank: <NUM> (pid: <NUM>) of binary: <PATH>",
        "step": "step <NUM> | loss <NUM>",
    }
    cells = {
        ("a", "failed"): Cell(1, 626.0, 626.0, 0.0),
        ("b", "failed"): Cell(1, 1250.0, 1250.0, 0.0),
    }
    cells |= {(n, "step"): Cell(3, 0.0, 600.0, 0.0) for n in ("a", "b")}
    data = _data(cells, {}, texts)
    last = {"a": 600.0, "b": 600.0}
    assert _reported_dead(data, last, AnalysisOptions()) == {"a"}


def test_an_agent_that_reported_a_death_before_the_teardown_saw_it_die() -> None:
    # a's ranks print no progress: their last stamped line (a checkpoint's) was at 100; its GPU
    # failed at 620 and its agent reported the death at 626, half an hour before the other
    # nodes' agents reported theirs at the job's teardown (2,426): a died loudly. Had every
    # agent reported at once, a's quiet ranks would say nothing.
    from l4_plugin.analysis.params import AnalysisOptions
    from l4_plugin.analysis.recipe import _reported_dead

    texts = {"failed": "failed (exitcode: <NUM>) local_rank: <NUM> (pid: <NUM>) of binary: <PATH>"}
    cells = {("a", "failed"): Cell(1, 626.0, 626.0, 0.0)}
    cells |= {(n, "failed"): Cell(1, 2426.0 + k, 2426.0 + k, 0.0) for k, n in enumerate("bcd")}
    data = _data(cells, {}, texts)
    last = {"a": 100.0, "b": 2300.0, "c": 2300.0, "d": 2300.0}
    assert _reported_dead(data, last, AnalysisOptions()) == {"a"}
    together = {**cells, ("a", "failed"): Cell(1, 2425.0, 2425.0, 0.0)}
    assert _reported_dead(_data(together, {}, texts), last, AnalysisOptions()) == set()


def test_an_agent_at_the_default_log_level_is_known_by_its_omp_warning() -> None:
    # torchrun at its default level (WARNING) logs none of its start-up lines; on a node that
    # starts several workers without OMP_NUM_THREADS it warns that it set it. a's machine
    # panicked after its last step, its agent with it; b, c and d's agents reported their
    # workers' deaths.
    from l4_plugin.analysis.recipe import _unreported

    texts = {
        "omp": "Setting OMP_NUM_THREADS environment variable for each process to be <NUM> in "
        "default, to avoid your system being overloaded, please further tune the variable for "
        "optimal performance in your application as needed.",
        "failed": "failed (exitcode: <NUM>) local_rank: <NUM> (pid: <NUM>) of binary: <PATH>",
        "step": "step <NUM> | loss <NUM>",
    }
    cells = {(n, "omp"): Cell(1, 0.0, 0.0, 0.0) for n in "abcd"}
    cells |= {(n, "failed"): Cell(1, 612.0 + k, 612.0 + k, 0.0) for k, n in enumerate("bcd")}
    cells |= {(n, "step"): Cell(3, 0.0, 600.0, 0.0) for n in "abcd"}
    last = {"a": 600.0, "b": 604.0, "c": 604.0, "d": 604.0}
    assert _unreported(_data(cells, {}, texts), last) == {"a": (612.0, ("failed",))}
    # without the warning no agent is known to have run on a
    no_omp = {k: v for k, v in cells.items() if k != ("a", "omp")}
    assert _unreported(_data(no_omp, {}, texts), last) == {}


def test_a_node_whose_agent_died_with_it_is_silent() -> None:
    # a's machine panicked (a machine check) seconds after its last step: its ranks and its
    # torchrun agent printed nothing more. The others' agents, alive, stopped their workers
    # 5 s later. A hung node's agent lives and reports with the others.
    from l4_plugin.analysis.recipe import _unreported

    texts = {
        "start": "[default] starting workers for entrypoint: python",
        "term": "Sending process <NUM> closing signal SIGTERM",
        "step": "step <NUM> | loss <NUM>",
    }
    cells = {(n, "start"): Cell(1, 0.0, 0.0, 0.0) for n in "abcd"}
    cells |= {(n, "term"): Cell(7, 605.0 + k, 606.0 + k, 0.0) for k, n in enumerate("bcd")}
    cells |= {(n, "step"): Cell(3, 0.0, 600.0, 0.0) for n in "abcd"}
    data = _data(cells, {}, texts)
    last = {"a": 600.0, "b": 604.0, "c": 604.0, "d": 604.0}
    assert set(_unreported(data, last)) == {"a"}
    assert _unreported(data, last)["a"] == (605.0, ("term",))
    # a's agent stopped its workers too (a hang): none
    hung = {**cells, ("a", "term"): Cell(7, 607.0, 607.0, 0.0)}
    assert _unreported(_data(hung, {}, texts), last) == {}
    # a never got past start-up: the job failed while starting, and what tore it down
    # (srun --kill-on-bad-exit, a PyTorchJob's pod clean-up) killed a before its agent spoke
    starting = _data(cells, {}, texts)
    del starting.stage_spans[("a", "training")]
    assert _unreported(starting, last) == {}
    # no agent ran on a (its start-up not logged: another launcher), or most agents said
    # nothing (the scheduler killed the job): none
    other = {k: v for k, v in cells.items() if k != ("a", "start")}
    assert _unreported(_data(other, {}, texts), last) == {}
    few = {k: v for k, v in cells.items() if k not in {("c", "term"), ("d", "term")}}
    assert _unreported(_data(few, {}, texts), last) == {}
    # a printed on after the others' reports began (its own teardown): not the agent's death
    assert _unreported(data, {**last, "a": 620.0}) == {}
    # the job's silent nodes: a, seconds before the others gave up (too soon for the lag)
    from l4_plugin.analysis.params import AnalysisOptions
    from l4_plugin.analysis.recipe import _silence
    from l4_plugin.analysis.results import EventStat

    events = tuple(
        EventStat(
            t,
            "INFO",
            {n: c.first_ts for (n, x), c in cells.items() if x == t},
            {n: c.count for (n, x), c in cells.items() if x == t},
            "training",
        )
        for t in texts
    )
    found = _silence(data, events, list("abcd"), frozenset(texts), None, AnalysisOptions())
    assert [s.node for s in found.silent] == ["a"] and found.silent[0].missing_new == ("term",)


def test_the_schedulers_own_reason_is_evidence_even_against_baselines() -> None:
    # kube-scheduler's "Preempted by pod … on node …" is an INFO ("Normal") event: where the
    # baselines are compared the lexicon's words are no evidence, except decisive ones.
    from l4_plugin.analysis.evidence import record_terms
    from l4_plugin.analysis.lexicon import default_lexicon
    from l4_plugin.analysis.recipe import _lexicon_evidence
    from l4_plugin.analysis.results import FilterResult, KeptTemplate

    texts = {
        "preempt": "17m Normal Preempted pod/w-0 Preempted by pod 8d53 on node gpu-node-b8",
        "oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    }
    data = _data({}, {}, texts)
    terms = record_terms(data, default_lexicon())
    compared = FilterResult(
        tuple(KeptTemplate(t, "absent-in-baseline", math.inf) for t in texts), (), False
    )
    priors, _ = _lexicon_evidence(data, terms, compared, AnalysisOptions())
    assert set(priors) == {"preempt"} and priors["preempt"][1] == "failure-words:platform"
    alone = FilterResult(compared.kept, (), True)
    assert set(_lexicon_evidence(data, terms, alone, AnalysisOptions())[0]) == {"preempt", "oom"}


def test_a_node_whose_kernel_reported_its_own_link_down_is_no_witness() -> None:
    # a's link went down (its kernel says so): its NCCL completions fail naming b, the peer at the
    # other end. c's watchdog names a as the remote that went away. a is the suspect, not b;
    # a consequence that names a remote fault ("remote process exited or there was a network
    # error") is no fault of the node that printed it.
    from l4_plugin.analysis.evidence import event_stats, record_terms
    from l4_plugin.analysis.lexicon import default_lexicon
    from l4_plugin.analysis.recipe import _hardware, _peers

    texts = {
        "cable": "mlx5_core <HEX>: mlx5_<NUM>: Port: <NUM> Link DOWN",
        "compl": "NCCL WARN NET/IB : Got completion from peer <IP><<NUM>> with status=<NUM>",
        "remote": "NCCL watchdog thread terminated with exception: NCCL error: remote process "
        "exited or there was a network error, NCCL version <NUM>",
    }
    cells = {
        ("a", "cable"): Cell(1, 10.0, 10.0, 1.0),
        ("a", "compl"): Cell(1, 11.0, 11.0, 2.0),
        ("c", "compl"): Cell(1, 12.0, 12.0, 2.0),
        ("c", "remote"): Cell(1, 13.0, 13.0, 3.0),
        ("b", "remote"): Cell(1, 13.0, 13.0, 3.0),
    }
    data = _data(cells, {}, texts)
    for t in ("cable", "compl", "remote"):
        data.templates[t] = replace(data.templates[t], levels={"ERROR": 1})
    data = replace(
        data,
        job=replace(data.job, system_templates=frozenset({"cable"})),
        announcements=tuple(
            (n, f"{n}:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.{k}<0>")
            for k, n in enumerate("abc", 1)
        ),
        peer_lines=(
            (
                "a",
                "compl",
                "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<7> with status=12",
            ),
            (
                "c",
                "compl",
                "NCCL WARN NET/IB : Got completion from peer 10.0.0.1<7> with status=12",
            ),
        ),
    )
    events = event_stats(data)
    hardware = _hardware(record_terms(data, default_lexicon()))
    kept = frozenset(texts)
    assert _peers(data, events, kept, "training", hardware).nodes == ("a",)
    # without the kernel's word, a is a witness like any other: both are named
    blind = replace(data, job=replace(data.job, system_templates=frozenset()))
    assert set(_peers(blind, events, kept, "training", hardware).nodes) == {"a", "b"}


def test_a_quiet_node_is_silent_only_when_it_stopped_printing_what_it_printed() -> None:
    # Ray: rank 0's node p prints progress to the end; q1 and q2 print start-up lines and a
    # warning now and then, q3 its checkpoint lines too. At the end the others print their
    # checkpoint lines and errors. q1's last line is an hour old: nothing it printed went on
    # without it, so its last line says nothing of when it stopped; q3 stopped saving while
    # the others went on.
    from l4_plugin.analysis.evidence import event_stats
    from l4_plugin.analysis.recipe import _silence_detector

    texts = {
        "boot": "Initializing TorchBackend in DeepSpeed with backend nccl",
        "flush": "<NUM> pytorch allocator cache flushes since last step",
        "saved": "zero checkpoint saved <PATH>",
        "step": "step=<NUM>, skipped=<NUM>",
        "err": "RuntimeError: DataLoader worker (pid <NUM>) is killed by signal: Bus error",
    }
    cells = {(n, "boot"): Cell(1, 0.0, 0.0, 1.0) for n in ("p", "q1", "q2", "q3", "q4")}
    cells |= {
        ("p", "step"): Cell(500, 10.0, 7000.0, 2.0),
        ("q2", "err"): Cell(1, 7000.0, 7000.0, 3.0),
    }
    cells |= {
        ("q1", "flush"): Cell(2, 100.0, 3500.0, 2.0),
        ("q2", "flush"): Cell(2, 200.0, 6900.0, 2.0),
    }
    cells |= {(n, "saved"): Cell(9, 600.0, 6950.0, 4.0) for n in ("p", "q2", "q4")}
    cells |= {("q3", "saved"): Cell(4, 600.0, 3000.0, 4.0)}
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, progress_nodes=frozenset({"p"})))
    silent = {
        s.node
        for s in _silence_detector(data, event_stats(data), list(data.nodes), frozenset()).silent
    }
    assert silent == {"q3"}


def test_a_quiet_node_that_was_torn_down_with_the_others_did_not_stop_printing() -> None:
    # Ray (gen3 4141 case-03): every worker's process prints abseil's "SIGTERM received" as the
    # job is torn down. q2's copy has no stamp of its own and takes its stream's last one, an
    # hour old; q1's and q3's were forwarded by the driver and take its time, the end. q2 was
    # there to be torn down: it stopped printing nothing. q4 never printed it: still silent.
    from l4_plugin.analysis.evidence import event_stats, record_terms, teardown
    from l4_plugin.analysis.lexicon import default_lexicon
    from l4_plugin.analysis.recipe import _silence_detector

    texts = {
        "boot": "Initializing TorchBackend in DeepSpeed with backend nccl",
        "step": "step=<NUM>, skipped=<NUM>",
        "saved": "zero checkpoint saved <PATH>",
        "term": "*** SIGTERM received at time=1745877716 on cpu 46 ***",
    }
    quiet = ["q1", "q2", "q3", "q4", "q5", "q6"]
    cells = {(n, "boot"): Cell(1, 0.0, 0.0, 1.0) for n in ["p", *quiet]}
    cells |= {("p", "step"): Cell(500, 10.0, 7000.0, 2.0)}
    cells |= {(n, "saved"): Cell(3, 600.0, 3600.0, 3.0) for n in ["p", *quiet]}
    cells |= {(n, "term"): Cell(2, 3600.0, 7000.0, 4.0) for n in ["p", "q1", "q3", "q5", "q6"]}
    cells[("q2", "term")] = Cell(1, 3600.0, 3600.0, 4.0)
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, progress_nodes=frozenset({"p"})))
    ends = teardown(record_terms(data, default_lexicon()))
    assert "term" in ends
    silent = {
        s.node for s in _silence_detector(data, event_stats(data), [*quiet, "p"], ends).silent
    }
    assert silent == {"q4"}
    # (without the teardown's words, q2 seemed to stop printing the banner it printed)
    before = _silence_detector(data, event_stats(data), [*quiet, "p"], frozenset()).silent
    assert {s.node for s in before} == {"q2", "q4"}


def test_one_quiet_node_of_many_that_missed_the_end_everyone_printed_is_silent() -> None:
    # Slurm: eight nodes print no progress of their own; at the end seven print the watchdog's
    # timeout, half an hour after the eighth printed its last line (a soft lockup froze it).
    from l4_plugin.analysis.evidence import event_stats
    from l4_plugin.analysis.recipe import _silence_detector

    texts = {
        "boot": "Initializing TorchBackend in DeepSpeed with backend nccl",
        "step": "step=<NUM>, skipped=<NUM>",
        "wd": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=<NUM>) ran for <DUR>",
    }
    quiet = [f"q{k}" for k in range(8)]
    cells = {(n, "boot"): Cell(1, 0.0, 0.0, 1.0) for n in ["p", *quiet]}
    cells |= {("p", "step"): Cell(500, 10.0, 5000.0, 2.0)}
    cells |= {(n, "wd"): Cell(1, 6800.0, 6800.0, 3.0) for n in ["p", *quiet[1:]]}
    cells[("q0", "boot")] = Cell(1, 0.0, 5000.0, 1.0)
    data = _data(cells, {}, texts)
    data = replace(data, job=replace(data.job, progress_nodes=frozenset({"p"})))
    silent = {
        s.node
        for s in _silence_detector(data, event_stats(data), list(data.nodes), frozenset()).silent
    }
    assert silent == {"q0"}


def test_a_template_one_node_printed_as_a_cause_is_the_causes() -> None:
    # Drain made one template of a DataLoader worker "killed by signal: Killed" (the culprit's,
    # killed from outside) and "…: Terminated" (the others', by the teardown). The exemplar is a
    # Terminated one: another node's copy says what the template also is.
    from l4_plugin.analysis.evidence import record_terms
    from l4_plugin.analysis.lexicon import default_lexicon

    text = "RuntimeError: DataLoader worker (pid <NUM>) is killed by signal: <*>"
    terminated = "RuntimeError: DataLoader worker (pid 7331) is killed by signal: Terminated. "
    data = _data({("a", "dl"): Cell(1, 5.0, 5.0, 1.0)}, {}, {"dl": text})
    data.templates["dl"] = replace(data.templates["dl"], message=terminated)
    assert record_terms(data, default_lexicon())["dl"].cascade
    killed = replace(data, variants={"dl": (terminated.replace("Terminated", "Killed"),)})
    term = record_terms(killed, default_lexicon())["dl"]
    assert (term.category, term.cascade) == ("platform", False)


def test_nccls_warning_just_before_torchs_nccl_error_is_its_words() -> None:
    # NVIDIA-NeMo/Run#266: NCCL warns "Could not find NET with id 0" and returns an internal
    # error; torch then reports "NCCL error in: …, internal error - please report this issue".
    # The warning is the error's own words: an error's level, the error's category. A warning
    # printed long before (a start-up banner a hundred lines up) or on another node is not.
    from l4_plugin.analysis.evidence import event_stats, nccl_details, record_terms
    from l4_plugin.analysis.lexicon import default_lexicon

    texts = {
        "net": "graph/topo.h:<NUM> NCCL WARN Could not find NET with id <NUM>",
        "early": "NCCL WARN Missing iommu=pt from kernel command line",
        "torch": "torch.distributed.DistBackendError: NCCL error in: <PATH>:<NUM>, internal error "
        "- please report this issue to the NCCL developers, NCCL version <NUM>.<NUM>.<NUM>",
    }
    cells = {
        ("a", "early"): Cell(1, 1.0, 1.0, 10.0),
        ("a", "net"): Cell(1, 50.0, 50.0, 198.0),
        ("a", "torch"): Cell(1, 50.0, 50.0, 200.0),
        ("b", "net"): Cell(1, 50.0, 50.0, 150.0),
    }
    data = _data(cells, {}, texts)
    levels = {"net": "WARN", "early": "WARN", "torch": "ERROR"}
    data = replace(
        data,
        templates={
            t: replace(info, levels={levels[t]: 1}, message=info.text)
            for t, info in data.templates.items()
        },
    )
    assert nccl_details(data) == {"net": "torch"}
    # a warning with words of its own (NET/IB's failed completion) says them itself
    ib = "NCCL WARN NET/IB : Got completion from peer <IP><<NUM>> with status=<NUM> opcode=<NUM>"
    own = replace(
        data,
        templates={**data.templates, "net": replace(data.templates["net"], text=ib, message=ib)},
    )
    assert nccl_details(own) == {}
    stats = {e.template_id: e for e in event_stats(data)}
    assert stats["net"].level == "ERROR" and stats["early"].level == "WARN"
    terms = record_terms(data, default_lexicon())
    assert terms["net"] == terms["torch"] and terms["torch"].category == "framework"
    # on the node that printed no NCCL error, the same warning stays a warning
    only_b = replace(
        data,
        cells={k: v for k, v in cells.items() if k[0] == "b"}
        | {("b", "early"): Cell(1, 1.0, 1.0, 10.0)},
    )
    assert nccl_details(only_b) == {}


def test_the_rank_whose_collective_is_not_the_others_is_shown() -> None:
    # pytorch/pytorch#77562: rank 0 in a REDUCE only it called, ranks 1 and 5 in FSDP's
    # all-gather at the same sequence number: rank 0's copy is the one to show. Ranks that
    # agree, or split two against two, or differ only in the number, single out nobody.
    from l4_plugin.analysis.evidence import divergent_copies

    def copy(rank: int, op: str, seq: int = 3742816) -> str:
        return (
            f"[E ProcessGroupNCCL.cpp:737] [Rank {rank}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum={seq}, OpType={op}, Timeout(ms)=1800000) ran for 1801750 "
            "milliseconds before timing out."
        )

    text = "[Rank <RANK>] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=<NUM>, <*>"
    cells = {("a", "wd"): Cell(3, 10.0, 10.0, 1.0)}

    def job(first: str, *others: str) -> JobData:
        data = _data(cells, {}, {"wd": text})
        info = replace(data.templates["wd"], levels={"ERROR": 3}, message=first)
        return replace(data, templates={"wd": info}, variants={"wd": others} if others else {})

    odd = copy(0, "REDUCE")
    gather = copy(1, "_ALLGATHER_BASE"), copy(5, "_ALLGATHER_BASE")
    assert divergent_copies(job(gather[0], gather[1], odd)) == {"wd": odd}
    assert divergent_copies(job(odd, *gather)) == {"wd": odd}
    assert divergent_copies(job(gather[0], gather[1])) == {}
    assert divergent_copies(job(odd, copy(2, "REDUCE"), *gather)) == {}
    # 2U1/Qwen-VL-Series-Finetune#17: rank 0 four collectives behind the others
    behind = copy(0, "ALLREDUCE", 959)
    waiting = copy(1, "ALLREDUCE", 963), copy(5, "ALLREDUCE", 963), copy(4, "ALLREDUCE", 963)
    assert divergent_copies(job(waiting[0], behind, *waiting[1:])) == {"wd": behind}
    # ranks spread over three works single out nobody
    assert divergent_copies(job(behind, copy(3, "ALLREDUCE", 960), *waiting)) == {}
