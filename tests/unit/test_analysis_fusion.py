"""Fusion and the evaluation baselines on a synthetic IB-port failure and a silent hang."""

from __future__ import annotations

import math

import numpy as np
import pytest

from l4_plugin.analysis.baselines import error_count, error_time, iforest_all
from l4_plugin.analysis.crossjob import CrossJobFilter
from l4_plugin.analysis.fusion import Fusion
from l4_plugin.analysis.peers import NamedNode, PeerResult
from l4_plugin.analysis.results import (
    BaselineStat,
    EventStat,
    FilterResult,
    JobTemplateStat,
    SpatialResult,
)
from l4_plugin.analysis.silence import SilenceDetector
from l4_plugin.analysis.spatial import SpatialAnalyzer
from l4_plugin.errors import AnalysisError

NODES = [f"n{i:02d}" for i in range(16)]
CULPRIT, PEERS = "n05", ("n04", "n06")


def _events() -> list[EventStat]:
    every = {n: 10.0 for n in NODES}
    return [
        EventStat("iter-line", "INFO", every, {n: 500 for n in NODES}, "training"),
        EventStat("benign-error", "ERROR", every, {n: 3 for n in NODES}, "training"),
        EventStat("ib-port-error", "ERROR", {CULPRIT: 100.0}, {CULPRIT: 2}, "training"),
        EventStat(
            "ib-completion-error",
            "ERROR",
            {CULPRIT: 100.5, PEERS[0]: 101.0, PEERS[1]: 101.2},
            {CULPRIT: 4, PEERS[0]: 400, PEERS[1]: 380},
            "training",
        ),
        EventStat(
            "watchdog-timeout",
            "ERROR",
            {n: 700.0 + k for k, n in enumerate(NODES)},
            {n: 8 for n in NODES},
            "training",
        ),
        EventStat("odd-info", "INFO", {"n12": 40.0}, {"n12": 30}, "init"),
    ]


def _baseline() -> dict[str, BaselineStat]:
    return {
        "iter-line": BaselineStat(3, 3, 1.0, 500.0),
        "benign-error": BaselineStat(3, 3, 1.0, 3.0),
    }


def _analyses(events: list[EventStat]) -> tuple[FilterResult, SpatialResult]:
    stats = [JobTemplateStat(e.template_id, e.count, len(e.counts), e.count / 16) for e in events]
    filt = CrossJobFilter().fit(_baseline()).transform(stats)
    counts = np.array([[e.counts.get(n, 0) for e in events] for n in NODES], dtype=float)
    weights = [1.0 if e.template_id in filt.kept_ids else 0.0 for e in events]
    spatial = SpatialAnalyzer().fit(
        counts, NODES, [e.template_id for e in events], [e.level for e in events], weights
    )
    return filt, spatial.result_


def test_root_cause_first_and_precise_set() -> None:
    events = _events()
    filt, spatial = _analyses(events)
    res = Fusion().fit(events, NODES, crossjob=filt, spatial=spatial).result_
    ids = [e.template_id for e in res.events]
    assert ids[0] == "ib-port-error"
    assert set(ids) == {"ib-port-error", "ib-completion-error", "watchdog-timeout"}
    top = res.events[0]
    assert "absent-in-baseline" in top.reasons and "earliest-evidence" in top.reasons
    assert f"spatial-outlier:{CULPRIT}" in top.reasons
    assert "cascade" in next(e for e in res.events if e.template_id == "watchdog-timeout").reasons
    assert res.nodes[0].node == CULPRIT
    assert [n.node for n in res.nodes[:3]].count(CULPRIT) == 1
    assert len(res.nodes) == len(NODES)
    assert res.nodes[0].events[0] == "ib-port-error"
    assert not res.no_baseline
    assert all(0.0 <= e.score <= 1.0 for e in res.candidates)


def test_no_baseline_still_ranks_root_cause() -> None:
    events = _events()
    stats = [JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events]
    filt = CrossJobFilter().fit({}).transform(stats)
    counts = np.array([[e.counts.get(n, 0) for e in events] for n in NODES], dtype=float)
    spatial = (
        SpatialAnalyzer()
        .fit(counts, NODES, [e.template_id for e in events], [e.level for e in events])
        .result_
    )
    res = Fusion().fit(events, NODES, crossjob=filt, spatial=spatial).result_
    assert res.no_baseline
    assert res.events[0].template_id == "ib-port-error"
    assert res.nodes[0].node == CULPRIT


def test_silent_node_ranked_first_and_cascade_reason() -> None:
    events = [
        EventStat("iter-line", "INFO", {n: 10.0 for n in NODES}, {n: 100 for n in NODES}),
        EventStat(
            "watchdog-timeout",
            "ERROR",
            {n: 1600.0 for n in NODES if n != CULPRIT},
            {n: 8 for n in NODES if n != CULPRIT},
        ),
    ]
    last_ts = np.array([1000.0 if n == CULPRIT else 1600.0 for n in NODES])
    seen = np.array([[1000.0, np.nan] if n == CULPRIT else [1000.0, 1600.0] for n in NODES])
    silence = SilenceDetector().fit(NODES, last_ts, None, seen, ["iter-line", "watchdog-timeout"])
    filt = (
        CrossJobFilter()
        .fit({"iter-line": BaselineStat(2, 2, 1.0, 100.0)})
        .transform([JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events])
    )
    res = Fusion().fit(events, NODES, crossjob=filt, silence=silence.result_).result_
    assert res.silent_nodes == (CULPRIT,)
    assert res.nodes[0].node == CULPRIT and "silent" in res.nodes[0].reasons
    assert [e.template_id for e in res.events] == ["watchdog-timeout"]
    assert "only-on-silent-node-peers" in res.events[0].reasons


def test_fusion_errors() -> None:
    with pytest.raises(AnalysisError, match="relative_threshold"):
        Fusion(relative_threshold=0.0).fit([])
    with pytest.raises(AnalysisError, match="given twice"):
        Fusion().fit(_events() + _events()[:1])
    empty = Fusion().fit([]).result_
    assert empty.events == () and empty.nodes == ()


def test_baselines_same_shape_and_blind_spots() -> None:
    events = _events()
    by_count = error_count(events, NODES)
    assert by_count.method == "error_count"
    assert by_count.nodes[0].node in PEERS  # the loud neighbour, not the culprit
    assert len(by_count.nodes) == len(NODES)
    by_time = error_time(events, NODES)
    assert by_time.events[0].template_id == "watchdog-timeout"
    assert by_time.nodes[0].node not in (CULPRIT, *PEERS)  # the shared benign error at t=10
    forest = iforest_all(events, NODES, random_state=0)
    assert forest.method == "iforest_all"
    assert len(forest.nodes) == len(NODES)
    assert forest.nodes == iforest_all(events, NODES, random_state=0).nodes
    with pytest.raises(AnalysisError, match="tau"):
        error_time(events, tau=0.0)
    with pytest.raises(AnalysisError, match="no nodes"):
        iforest_all([])


def test_job_wide_echo_in_the_root_window_is_not_root_evidence() -> None:
    nodes = [f"n{i}" for i in range(8)]
    events = [
        EventStat("oom", "ERROR", {"n3": 100.0}, {"n3": 1}, "training"),
        # torchrun's agent on every node, three seconds later
        EventStat("child-failed", "ERROR", {n: 103.0 for n in nodes}, {n: 1 for n in nodes}),
        # the peers' watchdog ten minutes later
        EventStat(
            "watchdog",
            "ERROR",
            {n: 700.0 for n in nodes if n != "n3"},
            {n: 8 for n in nodes if n != "n3"},
            "training",
        ),
    ]
    res = Fusion(root_window=5.0).fit(events, nodes).result_
    reasons = {e.template_id: e.reasons for e in res.candidates}
    assert "earliest-evidence" in reasons["oom"]
    assert "earliest-evidence" not in reasons["child-failed"]
    assert "cascade" in reasons["watchdog"]
    assert res.events[0].template_id == "oom"
    assert "watchdog" in {e.template_id for e in res.events}  # cascade stays in the set
    assert res.nodes[0].node == "n3"
    assert all("earliest-evidence" not in n.reasons for n in res.nodes[1:])


def test_the_named_culprits_first_line_leads_and_witness_statements_follow() -> None:
    # A hung rank: its neighbours report the broken connection first and loudly; the culprit
    # only prints its watchdog timeout, which every other rank prints later too.
    nodes = ["a", "b", "c", "d"]
    events = [
        EventStat("iter-line", "INFO", {n: 10.0 for n in nodes}, {n: 100 for n in nodes}),
        EventStat("remote-exited", "ERROR", {"a": 100.0, "b": 100.2}, {"a": 8, "b": 8}),
        EventStat(
            "watchdog-timeout",
            "ERROR",
            {"c": 700.0, "a": 710.0, "b": 710.0, "d": 711.0},
            {n: 8 for n in nodes},
            positions={"c": 50.0},
        ),
        EventStat(
            "watchdog-detail",
            "ERROR",
            {"c": 700.0, "a": 710.0, "b": 710.0, "d": 711.0},
            {n: 8 for n in nodes},
            positions={"c": 51.0},
        ),
    ]
    filt = (
        CrossJobFilter()
        .fit({"iter-line": BaselineStat(2, 2, 1.0, 100.0)})
        .transform([JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events])
    )
    peers = PeerResult(
        named=(NamedNode("c", ("a", "b"), ("remote-exited",), 1.0),),
        witnesses={"a": ("c",), "b": ("c",)},
        addresses=4,
    )
    consequence = {
        "watchdog-timeout": (0.5, "consequence-words"),
        "watchdog-detail": (0.5, "consequence-words"),
    }
    plain = Fusion().fit(events, nodes, crossjob=filt, ordering=consequence).result_
    assert plain.events[0].template_id == "remote-exited"  # without peers: the loud witnesses
    res = Fusion().fit(events, nodes, crossjob=filt, peers=peers, ordering=consequence).result_
    assert res.nodes[0].node == "c"
    ids = [e.template_id for e in res.events]
    # The culprit's first line (by time, then by where it printed it) leads; the witnesses'
    # statement ranks after it; membership is unchanged.
    assert ids[0] == "watchdog-timeout" and "culprit-evidence:c" in res.events[0].reasons
    assert set(ids) == {e.template_id for e in plain.events}
    heard = next(e for e in res.events if e.template_id == "remote-exited")
    assert "witness-statement" in heard.reasons
    assert ids.index("remote-exited") > 0
    # The launcher tearing the culprit's workers down printed there first: never its own line.
    teardown = EventStat("no-error-file", "ERROR", {"c": 699.0}, {"c": 1}, positions={"c": 1.0})
    all_events = [*events, teardown]
    filt_all = (
        CrossJobFilter()
        .fit({"iter-line": BaselineStat(2, 2, 1.0, 100.0)})
        .transform(
            [JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in all_events]
        )
    )
    torn = Fusion().fit(
        all_events,
        nodes,
        crossjob=filt_all,
        peers=peers,
        ordering={**consequence, "no-error-file": (0.5, "consequence-words")},
        teardown=frozenset({"no-error-file"}),
    )
    first = torn.result_.events[0]
    assert first.template_id == "watchdog-timeout" and "culprit-evidence:c" in first.reasons


def test_a_loud_node_nobody_names_does_not_reorder_the_events() -> None:
    events = _events()
    filt, spatial = _analyses(events)
    res = Fusion().fit(events, NODES, crossjob=filt, spatial=spatial).result_
    assert not any(r.startswith("culprit-evidence") for e in res.events for r in e.reasons)


def test_lines_without_a_clock_tie_in_the_order_their_node_printed_them() -> None:
    # dmesg's seconds since boot are no wall-clock time: a soft lockup printed before the hung
    # task it caused comes first when nothing else tells them apart.
    nan = math.nan
    events = [
        EventStat("hung-task", "ERROR", {"k": nan}, {"k": 1}, positions={"k": 9.0}),
        EventStat("soft-lockup", "ERROR", {"k": nan}, {"k": 1}, positions={"k": 3.0}),
    ]
    stats = [JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events]
    filt = CrossJobFilter().fit({}).transform(stats)
    ranked = Fusion().fit(events, ["k", "j"], crossjob=filt).result_.events
    assert [e.template_id for e in ranked][:2] == ["soft-lockup", "hung-task"]


def test_among_equals_the_line_that_names_a_cause_leads() -> None:
    # A chained traceback's two exceptions, one moment, scored alike: the one whose words name
    # a cause (errno 28, 0.95) before the earlier one that names only its class (0.5), and
    # that before a line the lexicon knows nothing of. A better-scored line stays first.
    events = [
        EventStat("pos", "ERROR", {"k": 10.000001}, {"k": 1}),
        EventStat("handling", "ERROR", {"k": 10.000002}, {"k": 1}),
        EventStat("nospace", "ERROR", {"k": 10.000003}, {"k": 1}),
    ]
    stats = [JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events]
    filt = CrossJobFilter().fit({}).transform(stats)
    named = {"nospace": 0.95, "pos": 0.5}
    ranked = Fusion().fit(events, ["k", "j"], crossjob=filt, named=named).result_.events
    assert [e.template_id for e in ranked][:3] == ["nospace", "pos", "handling"]
    ranked = Fusion().fit(events, ["k", "j"], crossjob=filt).result_.events
    assert [e.template_id for e in ranked][:3] == ["pos", "handling", "nospace"]
    louder = [*events[:2], EventStat("nospace", "WARN", {"k": 10.000003}, {"k": 1})]
    ranked = Fusion().fit(louder, ["k", "j"], crossjob=filt, named=named).result_.events
    assert ranked[0].template_id == "pos"


def test_within_a_whole_seconds_stamp_the_line_that_is_no_consequence_leads() -> None:
    # Rank 3's error file says its peer reset the connection, stamped in whole seconds (55.000:
    # torch writes int(time.time())); the agent says rank 2 was killed outright at 55.975. The
    # error file's line came some time within second 55: the second's lines are a tie, and the
    # kill, whose words are no consequence's, leads. An error file's own cause ("division by
    # zero", 12.000) leads a peer's consequence at 12.5 likewise; a second apart, time decides.
    events = [
        EventStat("reset", "ERROR", {"k": 55.0}, {"k": 1}, "training"),
        EventStat("killed", "ERROR", {"k": 55.975}, {"k": 1}, "training"),
    ]
    pre = {"reset": 0.9, "killed": 0.8}
    by_id = {e.template_id: e for e in events}
    said = frozenset({"reset"})
    fusion = Fusion()
    assert fusion._culprit_evidence("k", pre, by_id, "training", said=said) == {"killed"}
    assert fusion._culprit_evidence("k", pre, by_id, "training") == {"reset"}
    cause = {
        "zero": EventStat("zero", "ERROR", {"k": 12.0}, {"k": 1}, "training"),
        "peer": EventStat("peer", "ERROR", {"k": 12.5}, {"k": 1}, "training"),
    }
    got = fusion._culprit_evidence(
        "k", {"zero": 0.9, "peer": 0.9}, cause, "training", said=frozenset({"peer"})
    )
    assert got == {"zero"}
    earlier = {**by_id, "reset": EventStat("reset", "ERROR", {"k": 54.0}, {"k": 1}, "training")}
    assert fusion._culprit_evidence("k", pre, earlier, "training", said=said) == {"reset"}
    # a line without a time (dmesg's) among them: by its position, as before
    nan = {**by_id, "reset": EventStat("reset", "ERROR", {"k": math.inf}, {"k": 1}, "training")}
    assert fusion._culprit_evidence("k", pre, nan, "training", said=said) == {"killed"}
    # stamps within the second (no whole-second one): time decides, whatever the words
    fine = {**by_id, "reset": EventStat("reset", "ERROR", {"k": 55.5}, {"k": 1}, "training")}
    assert fusion._culprit_evidence("k", pre, fine, "training", said=said) == {"reset"}


def test_a_consequence_printed_first_is_no_evidence_and_a_driver_copy_no_second_node() -> None:
    # Ray: the teardown's "*** SIGTERM received" reaches three workers before the failing
    # worker's traceback is stamped; the driver's log repeats that traceback. The SIGTERM is
    # no earliest evidence, and the traceback is one host's (the driver is the job's own file),
    # not a cascade most nodes printed.
    from l4_plugin.records import JOB_NODE

    nodes = ["a", "b", "c", "d"]
    events = [
        EventStat("sigterm", None, {"a": 97.0, "c": 97.0, "d": 97.0}, {"a": 1, "c": 1, "d": 1}),
        EventStat("traceback", "ERROR", {"a": 100.0, JOB_NODE: 160.0}, {"a": 1, JOB_NODE: 1}),
    ]
    ordering = {"sigterm": (0.5, "consequence-words")}
    filt = (
        CrossJobFilter()
        .fit({"iter-line": BaselineStat(2, 2, 1.0, 100.0)})
        .transform([JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events])
    )
    res = Fusion(root_window=1.0).fit(events, nodes, crossjob=filt, ordering=ordering).result_
    reasons = {e.template_id: e.reasons for e in res.candidates}
    assert "earliest-evidence" not in reasons["sigterm"]
    assert "earliest-evidence" in reasons["traceback"]
    assert "cascade" not in reasons["traceback"]
    assert res.events[0].template_id == "traceback"


def test_a_link_that_came_back_is_no_earliest_evidence_for_its_node() -> None:
    # A decoy: node b's IB port flapped and recovered hours before the job ran out of time;
    # node a's degraded link explains the slowness. The flap is no evidence the failure
    # followed, so b is not the earliest node.
    nodes = ["a", "b", "c", "d"]
    events = [
        EventStat("flap", "WARN", {"b": 50.0}, {"b": 2}, "training"),
        EventStat("pcie", "ERROR", {"a": 90.0}, {"a": 1}, "training"),
    ]
    filt = (
        CrossJobFilter()
        .fit({"iter-line": BaselineStat(2, 2, 1.0, 100.0)})
        .transform([JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events])
    )
    recovered = {"flap": (0.5, "recovered-before-failure")}
    res = Fusion(root_window=1.0).fit(events, nodes, crossjob=filt, discounts=recovered).result_
    reasons = {e.template_id: e.reasons for e in res.candidates}
    assert "earliest-evidence" not in reasons["flap"]
    assert "earliest-evidence" in reasons["pcie"]
    assert res.nodes[0].node == "a"
    res = Fusion(root_window=1.0).fit(events, nodes, crossjob=filt).result_
    assert "earliest-evidence" in {e.template_id: e.reasons for e in res.candidates}["flap"]


def test_a_node_apart_only_by_a_link_that_came_back_is_no_spatial_suspect() -> None:
    # gen3's decoy: node b stands apart by its flap (and the time limit's "sending signal
    # TERM", printed on the host that ran it); node a by its degraded PCIe link, the cause.
    from l4_plugin.analysis.results import Attribution, NodeScore

    nodes = ["a", "b", "c", "d"]
    events = [
        EventStat("flap", "WARN", {"b": 50.0}, {"b": 2}, "training"),
        EventStat("term", "WARN", {"b": 900.0}, {"b": 1}, "training"),
        EventStat("pcie", "INFO", {"a": 1.0}, {"a": 1}, "init"),
    ]

    def apart(node: str, score: float, *tids: tuple[str, float]) -> NodeScore:
        return NodeScore(
            node,
            score,
            score,
            score,
            tuple(Attribution(t, w, 1.0, 0.0, "excess", 1) for t, w in tids),
        )

    spatial = SpatialResult(
        (
            apart("b", 0.9, ("flap", 6.2), ("term", 3.9)),
            apart("a", 0.7, ("pcie", 3.9)),
            apart("c", 0.0),
            apart("d", 0.0),
        ),
        ("b", "a"),
        "combined",
        True,
    )
    recovered = {"flap": (0.5, "recovered-before-failure")}
    res = Fusion().fit(events, nodes, spatial=spatial, discounts=recovered).result_
    ranked = {n.node: n for n in res.nodes}
    assert res.nodes[0].node == "a" and "spatial-outlier" in ranked["a"].reasons
    assert "spatial-outlier" not in ranked["b"].reasons
    # the flap still on (not discounted): b stands apart by it
    res = Fusion().fit(events, nodes, spatial=spatial).result_
    assert "spatial-outlier" in {n.node: n for n in res.nodes}["b"].reasons


def test_the_node_of_the_lead_event_has_it_as_a_reason_unless_the_line_is_job_wide() -> None:
    nodes = [f"n{i}" for i in range(8)]
    local = [EventStat("xid", "ERROR", {"n3": 100.0}, {"n3": 1}, "training")]
    res = Fusion().fit(local, nodes).result_
    assert "lead-event" in res.nodes[0].reasons and res.nodes[0].node == "n3"
    wide = [EventStat("nan-loss", "ERROR", {n: 100.0 for n in nodes}, {n: 1 for n in nodes})]
    res = Fusion().fit(wide, nodes).result_
    assert all("lead-event" not in n.reasons for n in res.nodes)


def test_a_node_on_another_stack_leads_the_nodes() -> None:
    # Node c runs another NCCL than the rest (analysis.versions): evidence for it, and the
    # other nodes' oddities (a launcher's extra lines) weigh less.
    nodes = ["a", "b", "c", "d"]
    events = [EventStat("truncated", "WARN", {"c": 100.0}, {"c": 1}, "init")]
    stack = {"c": "nccl 2.17.1 where 3 nodes run 2.21.5"}
    res = Fusion().fit(events, nodes, stack=stack).result_
    assert res.nodes[0].node == "c" and "odd-version" in res.nodes[0].reasons
    plain = Fusion().fit(events, nodes).result_
    assert "odd-version" not in plain.nodes[0].reasons


def test_lines_of_one_moment_rank_in_the_order_their_node_printed_them() -> None:
    # A kernel's machine check, stamped to the second: "Machine Check Exception", then "RIP",
    # then the panic, all at 12:48:40 on node x, alike in every other respect. With no culprit
    # named, they keep the order node x printed them in (not their template ids' order).
    nodes = ["x", "y", "z", "w"]
    lines = [("zz-mce", 10.0), ("aa-rip", 11.0), ("mm-panic", 12.0)]
    events = [EventStat("iter", "INFO", {n: 1.0 for n in nodes}, {n: 50 for n in nodes})] + [
        EventStat(t, "ERROR", {"x": 100.0}, {"x": 1}, positions={"x": at}) for t, at in lines
    ]
    res = Fusion().fit(events, nodes).result_
    ids = [e.template_id for e in res.events if e.template_id != "iter"]
    assert ids[:3] == ["zz-mce", "aa-rip", "mm-panic"], ids


def test_a_line_naming_a_failure_without_a_level_is_reported_when_nothing_else_is() -> None:
    # prajdabre/yanmtt#7, pasted: a loss printed as "76980 nan" among plain progress, no line
    # with a level. The lexicon's words (a weak prior, a low-information line) are all there is:
    # the line is reported, with the low score that says how sure this is.
    nodes = ["n0"]
    events = [
        EventStat("progress", None, {"n0": 1.0}, {"n0": 40}),
        EventStat("nan", None, {"n0": 2.0}, {"n0": 4}),
    ]
    priors = {"nan": (0.15, "failure-words:user/config")}
    discounts = {"nan": (0.6, "low-information")}
    res = Fusion().fit(events, nodes, priors=priors, discounts=discounts).result_
    assert [e.template_id for e in res.events] == ["nan"]
    assert Fusion().fit(events, nodes, discounts=discounts).result_.events == ()


def test_of_consequences_alike_the_one_that_says_most_leads() -> None:
    # QwenLM/Qwen-VL#121, pasted without times (read by position): the watchdog's boilerplate
    # came first, its timeout of the named collective last; scored alike, the timeout leads.
    events = [
        EventStat("some-ops-failed", "ERROR", {"k": 2.0}, {"k": 1}),
        EventStat("taking-down", "ERROR", {"k": 3.0}, {"k": 1}),
        EventStat("watchdog-timeout", "ERROR", {"k": 5.0}, {"k": 1}),
    ]
    stats = [JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events]
    filt = CrossJobFilter().fit({}).transform(stats)
    said = {t: (0.5, "consequence-words") for t in ("some-ops-failed", "taking-down")}
    said["watchdog-timeout"] = (0.5, "consequence-words")
    telling = {"some-ops-failed": 0.8, "taking-down": 0.8, "watchdog-timeout": 0.9}
    fusion = Fusion().fit(events, ["k"], crossjob=filt, ordering=said, telling=telling)
    assert [e.template_id for e in fusion.result_.events] == [
        "watchdog-timeout",
        "some-ops-failed",
        "taking-down",
    ]
    fusion = Fusion().fit(events, ["k"], crossjob=filt, ordering=said)
    assert fusion.result_.events[0].template_id == "some-ops-failed"


def test_lines_of_no_time_tie_whichever_nan_they_carry() -> None:
    # Each cell's missing time is its own NaN object: the order their node printed them still
    # decides (a NaN compares as neither before nor after, and would stop the sort's keys).
    events = [
        EventStat("hung-task", "ERROR", {"k": float("nan")}, {"k": 1}, positions={"k": 9.0}),
        EventStat("soft-lockup", "ERROR", {"k": float("nan")}, {"k": 1}, positions={"k": 3.0}),
    ]
    stats = [JobTemplateStat(e.template_id, e.count, len(e.counts), 1.0) for e in events]
    filt = CrossJobFilter().fit({}).transform(stats)
    ranked = Fusion().fit(events, ["k", "j"], crossjob=filt).result_.events
    assert [e.template_id for e in ranked][:2] == ["soft-lockup", "hung-task"]
