"""A restarted job's attempts: the one the report leads with, and the nodes every one names."""

from __future__ import annotations

from l4_plugin.analysis.attempts import AttemptOutcome, across


def outcome(
    k: int, stage: str, culprits: tuple[str, ...] = (), trained: bool = True
) -> AttemptOutcome:
    return AttemptOutcome(k, stage, culprits, "hardware/node", trained=trained)


def test_a_restart_that_failed_while_starting_leads_with_the_attempt_before() -> None:
    found = across([outcome(0, "training", ("n2",)), outcome(1, "init", ("n1",), trained=False)])
    assert found is not None and found.lead == 0
    assert "attempt 0 is the last that got past start-up" in found.why
    assert "attempt 1 failed while starting again" in found.why


def test_the_last_attempt_leads_when_it_got_past_start_up() -> None:
    found = across([outcome(0, "training", ("n2",)), outcome(1, "training", ("n2",))])
    assert found is not None and found.lead == 1 and found.why == "attempt 1 is the last"
    assert found.bound == ("n2",) and "n2 is the culprit in every attempt (0, 1)" in found.note


def test_every_attempt_failing_to_start_leads_with_the_last() -> None:
    found = across([outcome(0, "init", trained=False), outcome(1, "init", trained=False)])
    assert found is not None and found.lead == 1 and "every attempt failed" in found.why


def test_other_nodes_each_time_is_not_bound_to_a_node() -> None:
    found = across(
        [
            outcome(0, "training", ("n1",)),
            outcome(1, "training", ("n3",)),
            outcome(2, "init", trained=False),
        ]
    )
    assert found is not None and found.bound == ()
    assert (
        found.note
        == "not bound to a node: each attempt names another (attempt 0: n1; attempt 1: n3)"
    )
    assert found.lead == 1


def test_one_attempt_is_no_comparison() -> None:
    assert across([outcome(0, "training", ("n1",))]) is None


def test_an_attempt_that_failed_to_start_says_nothing_of_the_node() -> None:
    found = across([outcome(0, "training", ("n1",)), outcome(1, "init", ("n2",), trained=False)])
    assert found is not None and found.bound == () and found.note == ""


def test_an_attempt_that_printed_nothing_never_leads() -> None:
    quiet = AttemptOutcome(1, None, (), "unknown", nodes=("n1",), printed=False)
    found = across([outcome(0, "training", ("n1",)), quiet])
    assert found is not None and found.lead == 0
    assert found.why == (
        "attempt 0 is the last that got past start-up: "
        "attempt 1 left no line (its workers' files are empty)"
    )


def test_the_same_fault_seen_again_without_a_culprit_leads_with_the_attempt_that_names_it() -> None:
    # A GPU's uncorrectable error in training; on restart the same GPU fails at its first step,
    # before anything tells its node apart: the first attempt names the culprit.
    found = across([outcome(0, "training", ("n2",)), outcome(1, "training")])
    assert found is not None and found.lead == 0
    assert "attempt 0 names the culprit" in found.why
    # another kind of failure the second time is that attempt's own
    other = AttemptOutcome(1, "training", (), "user/code", trained=True)
    found = across([outcome(0, "training", ("n2",)), other])
    assert found is not None and found.lead == 1


def test_a_fault_bound_to_its_node_first_struck_in_the_earlier_attempt() -> None:
    # gen3's restarts: attempt 0 failed on n2's bad GPU in iteration 101; attempt 1 resumed
    # from the checkpoint of 80 and failed on n2 again at once (81). The failure first struck
    # in 101.
    from dataclasses import replace

    from l4_plugin.analysis.attempts import first_struck

    first = replace(outcome(0, "training", ("n2",)), iteration=101)
    again = replace(outcome(1, "training", ("n2",)), iteration=81)
    found = across([first, again])
    assert found is not None and found.lead == 1
    assert first_struck(found, [first, again], "hardware/node") == first
    # another kind of failure the first time, or another node each time: the lead's own
    assert first_struck(found, [first, again], "hardware/network") is None
    other = replace(first, culprits=("n7",))
    unbound = across([other, again])
    assert unbound is not None and first_struck(unbound, [other, again], "hardware/node") is None
    # an earlier attempt that placed nothing, or one that failed while starting: none
    unplaced = replace(first, iteration=None)
    assert first_struck(found, [unplaced, again], "hardware/node") is None
    starting = replace(first, stage="init", trained=False)
    assert first_struck(found, [starting, again], "hardware/node") is None


def test_a_restart_naming_the_node_of_a_hardware_fault_is_the_leads_culprit() -> None:
    # realruns' node-cut-off-restarts: in training every rank timed out alike (no culprit);
    # the restart failed while starting, the node cut off answering "No route to host".
    lead = AttemptOutcome(0, "training", (), "framework", trained=True)
    cut = AttemptOutcome(1, "init", ("n3",), "hardware/network")
    found = across([lead, cut])
    assert found is not None and found.lead == 0 and found.still == cut
    # a lead that names its own culprit keeps it
    named = AttemptOutcome(0, "training", ("n1",), "framework", trained=True)
    found = across([named, cut])
    assert found is not None and found.still is None
    # a configuration's or a platform's failure at start-up says nothing of a node
    for category in ("user/config", "platform"):
        port = AttemptOutcome(1, "init", ("n3",), category)
        found = across([lead, port])
        assert found is not None and found.still is None
    # a restart that got past start-up is no start-up failure; the first restart that is one
    trained = AttemptOutcome(1, "training", ("n3",), "hardware/network", trained=True)
    found = across([lead, trained])
    assert found is not None and found.still is None
    other = AttemptOutcome(2, "init", ("n2",), "hardware/node")
    found = across([lead, cut, other])
    assert found is not None and found.still == cut
