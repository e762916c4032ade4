"""The job timeline (issue 13): ranks that print no progress line get the job's stage and
iteration by time; peers name the culprit by address; silent means stopped, not loud."""

from __future__ import annotations

from pathlib import Path

from l4_plugin.analysis.peers import AddressBook, name_peers, own_addresses
from l4_plugin.ingest.timeline import Timeline


def test_timeline_places_by_time_and_keeps_own_pre_training_stage() -> None:
    refs = {"a": 100.0, "b": 200.0, "c": 300.0, "d": 250.0}
    tl = Timeline()
    tl.mark(("data_loading", None, 0), "a")
    tl.mark(("training", 1, 0), "b")
    tl.mark(("training", 2, 0), "c")
    tl.mark(("checkpointing", None, 0), "d")  # a rank that saves but prints no iteration
    tl.mark(("training", 1, 0), "c")  # a later file reaching the same transition: ignored
    tl.resolve(refs.get)
    assert tl.at(50.0) == ("init", None)
    assert tl.at(150.0) == ("data_loading", None)
    assert tl.at(210.0) == ("training", 1)
    assert tl.at(260.0) == ("checkpointing", 1)  # takes the job's iteration at that time
    assert tl.place("model_loading", 150.0) == ("model_loading", None)  # own stage is later
    assert tl.place("init", None) == ("init", None)  # no time: its own stage


def test_address_book_turns_a_peers_completion_error_into_the_culprit() -> None:
    nodes = ["n1", "n2", "n3"]
    announcements = [
        ("n1", "n1:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"),
        ("n2", "n2:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.2<0>"),
        ("n3", "node-c:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>"),
    ]
    completion = (
        "NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4711> with status=12 "
        "localGid ::ffff:{own} remoteGids::ffff:10.0.0.3 hca mlx5_0"
    )
    result = name_peers(
        nodes,
        announcements,
        [
            ("n1", "t1", completion.format(own="10.0.0.1")),
            ("n2", "t1", completion.format(own="10.0.0.2")),
            ("n3", "t2", "RuntimeError: CUDA error on node-c"),  # its own host: names nobody
        ],
    )
    assert result.nodes == ("n3",)
    assert result.named[0].witnesses == ("n1", "n2") and result.named[0].share == 1.0
    assert result.witnesses == {"n1": ("n3",), "n2": ("n3",)}
    # The announced host name belongs to n3 too; a line's own local address is not a peer's.
    assert AddressBook(nodes, announcements).owner["node-c"] == "n3"
    assert "10.0.0.1" in own_addresses(completion.format(own="10.0.0.1"))
    # Ray's raylet names its own node in its state dump; the driver names a dead one by it
    raylet = (
        "[2025-05-17 20:51:00,549 I 2798 2798] (raylet) node_manager.cc:525: [state-dump] "
        "Node name: 10.73.20.248"
    )
    dead = (
        "WARNING worker.py:2253 -- The node with node id: fce3 and address: 10.73.20.248 and "
        "node name: 10.73.20.248 has been marked dead because the detector has missed too many "
        "heartbeats from it."
    )
    ray = name_peers(["head", "w1"], [("w1", raylet)], [("head", "t", dead)])
    assert ray.nodes == ("w1",)
    resources = (
        "(raylet) node_manager.cc:525: [state-dump] InitialConfigResources: {node:10.73.20.248: "
        "10000, GPU: 80000, CPU: 1920000, accelerator_type:A100: 10000}"
    )
    assert own_addresses(resources) == {"10.73.20.248"}


def test_a_node_with_its_own_link_down_is_no_witness() -> None:
    # n1's port went down: its transfers fail naming the peer at the other end (n2). That is n1's
    # fault's consequence, not a statement against n2; n3's error about n1 still is one.
    nodes = ["n1", "n2", "n3"]
    announcements = [
        (n, f"{n}:1:2 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.{k}<0>")
        for k, n in enumerate(nodes, 1)
    ]
    statements = [
        ("n1", "t1", "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4711> with status=12"),
        ("n3", "t1", "NCCL WARN NET/IB : Got completion from peer 10.0.0.1<4711> with status=12"),
    ]
    assert set(name_peers(nodes, announcements, statements).nodes) == {"n1", "n2"}
    result = name_peers(nodes, announcements, statements, faulted={"n1"})
    assert result.nodes == ("n1",) and result.witnesses == {"n3": ("n1",)}


def test_an_address_two_nodes_announce_belongs_to_nobody() -> None:
    book = AddressBook(
        ["a", "b"],
        [("a", "Bootstrap : Using docker0:172.17.0.1<0>"), ("b", "OOB docker0:172.17.0.1<0>")],
    )
    assert "172.17.0.1" not in book.owner
    assert book.named("Connection reset by peer [172.17.0.1]:5555") == set()


def test_timeline_orders_transitions_of_one_second_by_iteration_then_save() -> None:
    tl = Timeline()
    tl.mark(("checkpointing", None, 0), "t")  # rank 0: no iteration line of its own
    tl.mark(("training", 56, 0), "t")  # the last stage's iteration line, the same second
    tl.resolve(lambda ref: 100.0)
    assert tl.at(100.0) == ("checkpointing", 56)


def test_stack_frames_are_validated(tmp_path: Path) -> None:
    import pytest

    from l4_plugin.errors import ConfigError
    from l4_plugin.ingest.stages import StageRules, default_stage_rules

    assert default_stage_rules().stage_of_stack('File "t.py", line 3, in save_checkpoint') == (
        "checkpointing"
    )
    bad = tmp_path / "stages.yaml"
    bad.write_text("frames:\n  - {stage: warmup, pattern: 'x'}\n", "utf-8")
    with pytest.raises(ConfigError, match=r"stages.yaml: frames\[0\]: needs a stage"):
        StageRules.load(bad)
