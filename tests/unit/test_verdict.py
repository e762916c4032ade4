"""The verdict from rules, events and the node ranking, and the failure lexicon.

ARCHITECTURE.md, *The report*, says where the verdict sits in the report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.analysis.lexicon import Lexicon, default_lexicon
from l4_plugin.analysis.verdict import (
    VerdictEvent,
    VerdictNode,
    VerdictRule,
    blame_of,
    culprits,
    decide,
)
from l4_plugin.errors import ConfigError
from l4_plugin.records import FAULT_CATEGORIES

LEX = default_lexicon()
NODES = [
    VerdictNode("n3", 0.95, ("spatial-outlier", "named-by-peers:4")),
    VerdictNode("n1", 0.4, ("earliest-evidence", "witness-of:n3")),
    VerdictNode("n2", 0.1, ()),
]


def _ev(text: str, nodes: tuple[str, ...], *reasons: str, score: float = 1.0) -> VerdictEvent:
    return VerdictEvent(text, nodes, reasons, score)


def test_a_user_error_evicts_nobody() -> None:
    # The culprit ranking points at a node, but the failure is the user's code: evicting a
    # healthy machine does not fix it.
    events = [
        _ev("TypeError: forward() got an unexpected keyword argument 'position_ids'", ("n3",)),
        _ev("Watchdog caught collective operation timeout", ("n1", "n2"), "cascade"),
    ]
    v = decide(events, NODES, [], LEX, n_nodes=3)
    assert v.category == "user/code" and v.blame == "user"
    assert v.evict == () and v.restart == "after-fix"


def test_a_named_culprit_is_evicted_alone_for_a_hardware_fault() -> None:
    rule = VerdictRule("gpu-xid-79-fallen-off-bus", "hardware/accelerator", "cause", ("n3",), 0.9)
    events = [
        _ev("NET/IB : Got completion from peer 10.0.0.3", ("n1",), score=0.9),
        _ev("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus", ("n3",), score=0.5),
    ]
    v = decide(events, NODES, [rule], LEX, n_nodes=3)
    assert v.category == "hardware/accelerator" and v.blame == "infrastructure"
    assert v.evict == ("n3",) and v.restart == "after-eviction"
    assert v.confidence == pytest.approx(0.9)
    assert any("gpu-xid-79" in w for w in v.why)


def test_a_rule_matched_on_every_node_says_nothing_of_the_culprit() -> None:
    everywhere = VerdictRule("ib-x", "hardware/network", "cause", ("n1", "n2", "n3"), 0.95)
    events = [_ev("Watchdog caught collective operation timeout", ("n1", "n2"), "cascade")]
    v = decide(events, NODES, [everywhere], LEX, n_nodes=3)
    # n3 printed nothing that says why, but its peers waited on it while it stayed up.
    assert v.category == "hardware/accelerator" and v.evict == ("n3",)


def test_a_silent_culprit_is_a_node_fault() -> None:
    nodes = [VerdictNode("n2", 0.99, ("silent",)), VerdictNode("n1", 0.3, ())]
    v = decide([], nodes, [], LEX, n_nodes=2)
    assert (v.category, v.evict) == ("hardware/node", ("n2",))


def test_a_culprit_that_finished_training_while_its_peers_failed_ran_fewer_steps() -> None:
    # A rank whose shard ran out of batches left the loop; its peers' next all-reduce found
    # the connection closed (tests/realruns/cases/uneven-data-early-exit, a real run).
    nodes = [VerdictNode("m42", 0.9, ("spatial-outlier", "no-trace")), VerdictNode("m41", 0.3, ())]
    events = [
        _ev(
            "[rank2]: RuntimeError: [pair.cc:553] Connection closed by peer [10.77.0.12]:24964",
            ("m41", "m43"),
            "error-level",
            "consequence-words",
        ),
        _ev("INFO m42 rank3 train: training finished", ("m42",)),
    ]
    ended = {"m42": "train: training finished"}
    v = decide(events, nodes, [], LEX, n_nodes=3, stage="training", finished=ended)
    assert (v.category, v.evict) == ("user/code", ())
    assert any("unequal numbers of steps" in w for w in v.why)
    # ... not when every node finished (a failure after training), nor in another stage
    every = dict.fromkeys(("m41", "m42", "m43"), "training finished")
    assert decide(events, nodes, [], LEX, 3, stage="training", finished=every).category != (
        "user/code"
    )
    assert decide(events, nodes, [], LEX, 3, stage="init", finished=ended).category != "user/code"


def test_nodes_that_waited_for_a_rendezvous_are_not_evicted() -> None:
    # tests/realruns/cases/nnodes-more-than-started (a real run): --nnodes 4, three nodes
    # started; each waited for the fourth and timed out. The one holding the endpoint stands out,
    # but it came: taking it out never helps.
    nodes = [VerdictNode("v11", 0.9, ("spatial-outlier", "earliest-evidence"))]
    events = [
        _ev(
            "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
            ("v11", "v12", "v13"),
            "error-level",
        )
    ]
    v = decide(events, [*nodes, VerdictNode("v12", 0.2, ())], [], LEX, n_nodes=3, stage="init")
    assert v.category == "platform" and v.evict == ()


def test_a_process_killed_outright_on_one_node_of_several_is_that_nodes() -> None:
    # tests/realruns/cases/sigkill-rank (a real run): one rank SIGKILLed on node-18 while the
    # other nodes ran on; a paste of one node's log saying the same is the job's memory.
    killed = "  traceback : Signal 9 (SIGKILL) received by PID 3319"
    nodes = [VerdictNode("n18", 0.95, ("spatial-outlier", "no-trace")), VerdictNode("n17", 0.2, ())]
    v = decide([_ev(killed, ("n18",), "error-level")], nodes, [], LEX, n_nodes=3)
    assert v.category == "platform"
    alone = decide([_ev(killed, ("n0",), "error-level")], [], [], LEX, n_nodes=1)
    assert alone.category == "user/config"


def test_the_lead_event_decides_when_its_words_leave_no_doubt() -> None:
    # A benign row-remapping rule on the loudest node must not outvote the error that ended the
    # job: a full shared file system evicts nobody.
    nodes = [VerdictNode("n1", 0.93, ("spatial-outlier",)), VerdictNode("n2", 0.7, ())]
    rule = VerdictRule("gpu-row-remapping-xid-63-64", "hardware/accelerator", "cause", ("n1",), 0.9)
    events = [_ev("OSError: [Errno 28] No space left on device: '/ckpt/x.pt'", ("n1", "n2"))]
    v = decide(events, nodes, [rule], LEX, n_nodes=4)
    assert v.category == "hardware/storage" and v.evict == () and v.restart == "after-fix"


def test_nothing_known_is_unknown() -> None:
    v = decide([_ev("something odd happened", ("n1",))], [], [], LEX, n_nodes=1)
    assert (v.category, v.blame, v.evict) == ("unknown", "unknown", ())
    assert v.to_json()["category"] == "unknown"


def test_culprits_need_strong_evidence_or_a_clear_gap() -> None:
    close = [VerdictNode("a", 0.9, ("spatial-outlier",)), VerdictNode("b", 0.85, ())]
    assert culprits(close) == ()
    assert culprits([VerdictNode("a", 0.9, ("silent",)), VerdictNode("b", 0.89, ())]) == ("a",)
    assert culprits([VerdictNode("a", 0.3, ("silent",))]) == ()


def test_blame() -> None:
    assert [blame_of(c) for c in FAULT_CATEGORIES].count("infrastructure") == 5
    assert blame_of("framework") == "user" and blame_of("unknown") == "unknown"


def test_lexicon_reads_words_not_fragments_of_words() -> None:
    # "process" holds "roce": a whole word is needed.
    term = LEX.classify("torch.OutOfMemoryError: CUDA out of memory. Process 1 has 77 GiB in use")
    assert term is not None and term.category == "user/config"
    cascade = LEX.classify("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)")
    assert cascade is not None and cascade.cascade


@pytest.mark.parametrize(
    "line",
    [
        "kernel: nvme 0000:17:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer",
        "kernel: pcieport 0000:00:01.1: AER: Corrected error received: 0000:17:00.0",
        "WARNING [health] GPU 00000000:9a:00.0: Clocks Event Reasons: SW Power Cap: Active",
    ],
)
def test_handled_conditions_are_benign_words_not_a_cause(line: str) -> None:
    # "PCIe Bus Error: severity=Corrected" is no SIGBUS, and a GPU at its software power cap is
    # working normally: neither may name the verdict's category.
    term = LEX.classify(line)
    assert term is not None and term.benign and not term.says_cause
    bad = LEX.classify("Clocks Event Reasons: HW Thermal Slowdown: Active (GPU temp 92 C)")
    assert bad is not None and bad.says_cause and bad.category == "hardware/accelerator"
    assert LEX.classify("Bus error (core dumped)").says_cause  # type: ignore[union-attr]
    events = [
        _ev(line, ("n1",), "spatial-outlier:n1"),
        _ev("torch.OutOfMemoryError: CUDA out of memory.", ("n2",), score=0.9),
    ]
    assert decide(events, [], [], LEX, n_nodes=3).category == "user/config"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{pattern: 'x', category: hardware/gpu}", "category: expected one of"),
        ("{pattern: '(', category: framework}", "invalid regex"),
        ("{pattern: 'x', category: framework, weight: 2}", "weight: expected a number"),
        ("{pattern: 'x', category: framework, colour: red}", "unknown key"),
        ("{pattern: 'x', benign: yes please}", "benign: expected true or false"),
        ("{pattern: 'x', benign: true, cascade: true}", "either benign or cascade"),
        ("{pattern: 'x', category: platform, cascade: true, decisive: true}", "decisive: only"),
    ],
)
def test_a_bad_lexicon_entry_is_a_located_error(tmp_path: Path, entry: str, message: str) -> None:
    path = tmp_path / "lexicon.yaml"
    path.write_text(f"entries:\n  - {entry}\n", "utf-8")
    with pytest.raises(ConfigError, match=rf"lexicon.yaml: entries\[0\].*{message}"):
        Lexicon.load(path)


def test_rules_check_reports_a_broken_lexicon(tmp_path: Path) -> None:
    from l4_plugin.rules import check_paths

    (tmp_path / "lexicon.yaml").write_text("entries:\n  - {pattern: '(', category: framework}\n")
    errors = check_paths([tmp_path])
    assert len(errors) == 1 and "entries[0].pattern: invalid regex" in str(errors[0])


def test_cuda_boilerplate_is_never_the_sample() -> None:
    from l4_plugin.diagnosis.assembly import without_boilerplate

    record = (
        "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
    )
    assert without_boilerplate(record) == (
        "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    )
    only = "For debugging consider passing CUDA_LAUNCH_BLOCKING=1."
    assert without_boilerplate(only) == only


# --- evidence-based eviction, consequences, local and alone categories ------------------------


def test_hardware_evidence_on_a_named_node_evicts_it_without_a_clear_culprit() -> None:
    # gen3's Xid 48 shape: a second node scores close to the first (its watchdog lines), so the
    # ranking singles nobody out; the confirmed rule and the Xid line both name one node.
    nodes = [
        VerdictNode("g1288", 1.0, ("spatial-outlier", "earliest-evidence")),
        VerdictNode("g1120", 0.95, ("spatial-outlier",)),
        VerdictNode("g1048", 0.0, ()),
    ]
    assert culprits(nodes) == ()
    rule = VerdictRule(
        "gpu-xid-48-double-bit-ecc", "hardware/accelerator", "cause", ("g1288",), 0.9
    )
    events = [
        _ev(
            "NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
            "double bit error (DBE) has been detected on GPU",
            ("g1288",),
            score=0.86,
        ),
        _ev("Timeout at NCCL work: 21241, last enqueued NCCL work: 21243", ("g1120",), score=0.8),
    ]
    v = decide(events, nodes, [rule], LEX, n_nodes=8)
    assert v.category == "hardware/accelerator"
    assert v.evict == ("g1288",) and v.restart == "after-eviction"


def test_storage_evicts_only_a_node_that_alone_carries_the_evidence() -> None:
    full = "OSError: [Errno 28] No space left on device: '/mnt/ckpt/iter_56/model.pt'"
    shared = decide([_ev(full, ("n1", "n2", "n3", "n4", "n5"))], [], [], LEX, n_nodes=22)
    assert shared.category == "hardware/storage" and shared.evict == ()
    assert shared.restart == "after-fix"
    local = decide([_ev(full, ("n7",))], [], [], LEX, n_nodes=22)
    assert local.evict == ("n7",) and local.restart == "after-eviction"


def test_a_port_in_use_on_one_node_of_many_is_that_nodes_environment() -> None:
    line = (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
        "address already in use"
    )
    many = decide([_ev(line, ("h0",))], [], [], LEX, n_nodes=16)
    assert (many.category, many.evict, many.blame) == ("platform", ("h0",), "infrastructure")
    # On a single machine it is the user's second run on the same port (torchtune#1025).
    alone = decide([_ev(line, ("h0",))], [], [], LEX, n_nodes=1)
    assert (alone.category, alone.evict, alone.restart) == ("user/config", (), "after-fix")


def test_consequences_never_lead() -> None:
    # The launcher's and the scheduler's reactions come first in time and rank; the cause is the
    # user's exception below them.
    events = [
        _ev("srun: error: gpu-r41-u15: tasks 192-199: Terminated", ("s",), score=0.9),
        _ev(
            "slurmstepd: error: *** JOB 61 ON gpu-r41-u15 CANCELLED AT 2025-08-11T15:44 ***", ("s",)
        ),
        _ev("ray.train.base_trainer.TrainingFailedError: ... an error such as OOM)", ("d",)),
        _ev("ZeroDivisionError: division by zero", ("n3",), score=0.7),
    ]
    v = decide(events, [], [], LEX, n_nodes=4)
    assert v.category == "user/code" and v.evict == ()


def test_timeouts_alone_point_to_a_collective_mismatch() -> None:
    # particleflow#390 / MOSS#275 shape: nothing but the watchdog; no rank singled out.
    events = [
        _ev(
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=10646, "
            "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1808898 milliseconds",
            ("n1",),
            "cascade",
        )
    ]
    v = decide(events, [VerdictNode("n1", 0.3, ())], [], LEX, n_nodes=1)
    assert v.category == "user/code" and v.confidence < 0.5 and v.evict == ()
    # hiyouga/LlamaFactory#2424: the same timeouts while rank 0 still tokenized the dataset
    # (the others at main_process_first's barrier): the timeout was too short for the
    # preparation; so while a checkpoint loads. In training they stay the ranks' disagreement.
    for stage, category in (
        ("data_loading", "user/config"),
        ("model_loading", "user/config"),
        ("training", "user/code"),
        ("init", "user/code"),
        (None, "user/code"),
    ):
        v = decide(events, [VerdictNode("n1", 0.3, ())], [], LEX, n_nodes=1, stage=stage)
        assert (v.category, v.evict) == (category, ()), stage
    # With a culprit that stayed up while its peers waited, the same timeouts are its hang.
    hung = [VerdictNode("n3", 0.95, ("named-by-peers:4",)), VerdictNode("n1", 0.2, ())]
    assert decide(events, hung, [], LEX, n_nodes=4).category == "hardware/accelerator"


def test_a_cancel_with_nothing_before_it_is_the_users_decision() -> None:
    events = [
        _ev("slurmstepd: error: *** JOB 3737 ON c2 CANCELLED AT 2021-08-03T16:28:28 ***", ("c2",))
    ]
    v = decide(events, [], [], LEX, n_nodes=2)
    assert v.category == "user/config"


def test_a_misoperation_rule_is_a_user_configuration_verdict() -> None:
    rule = VerdictRule("someone-cancelled", "user/misoperation", "cause", (), 0.8)
    v = decide([], [], [rule], LEX, n_nodes=2)
    assert (v.category, v.blame, v.evict) == ("user/config", "user", ())


def test_whose_code_raised_a_generic_error_decides_its_category() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/data/Megatron-LM/pretrain_gpt.py", line 207, in <module>\n    pretrain()\n'
        '  File "/data/Megatron-LM/megatron/core/pipeline_parallel/schedules.py", line 216, in '
        "forward_step\n    config.grad_scale_func(torch.tensor(1.0, device=loss.device))\n"
        "UnboundLocalError: local variable 'loss' referenced before assignment"
    )
    v = decide([_ev(text, ("n1",))], [], [], LEX, n_nodes=1)
    assert (v.category, v.blame, v.restart) == ("framework", "user", "after-fix")


def test_a_librarys_own_module_lacking_an_attribute_is_the_library_not_versions() -> None:
    # deepspeedai/DeepSpeed#7649 (fixed in DeepSpeed); a module of another package lacking
    # one stays a version mismatch
    frames = (
        "Traceback (most recent call last):\n"
        '  File "/src/DeepSpeed/deepspeed/runtime/engine.py", line 3039, in _get_ckpt_name\n'
        "    mp_rank = self.mpu.get_model_parallel_rank()\n"
    )
    own = "AttributeError: module 'deepspeed.runtime.sp' has no attribute 'get_model_parallel_rank'"
    other = "AttributeError: module 'torch' has no attribute 'float8_e4m3fn'"
    v = decide([_ev(frames + own, ("n1",))], [], [], LEX, n_nodes=1)
    assert v.category == "framework"
    v = decide([_ev(frames + other, ("n1",))], [], [], LEX, n_nodes=1)
    assert v.category == "user/software-incompatibility"


def test_a_preemption_evicts_nobody() -> None:
    # SystemsGenetics/GEMmaker#233: the scheduler took the nodes back; they are healthy.
    line = (
        "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO "
        "PREEMPTION ***"
    )
    v = decide([_ev(line, ("cn119",))], [], [], LEX, n_nodes=8)
    assert (v.category, v.evict, v.restart) == ("platform", (), "as-is")


def test_the_clusters_account_explains_a_silent_culprit() -> None:
    # gen3's k8s OOMKilled shape: the killed pod went silent; the cluster's event (the job's own
    # file) says the kernel's memory cgroup killed it.
    nodes = [
        VerdictNode("worker-30", 1.0, ("spatial-outlier", "silent")),
        VerdictNode("w1", 0.2, ()),
    ]
    rules = [
        VerdictRule("node-silent", "hardware/node", "cause", ("worker-30",), 0.7),
        VerdictRule("host-oom-killer", "user/config", "cause", ("(job)",), 0.9),
    ]
    v = decide([], nodes, rules, LEX, n_nodes=32)
    assert (v.category, v.evict) == ("user/config", ())
    # The same rule on the job's own files with no culprit: it describes the job.
    assert decide([], [], rules[1:], LEX, n_nodes=32).category == "user/config"


def test_an_error_leads_a_warning_of_the_same_rank_and_the_jobs_files_are_never_evicted() -> None:
    # gen3's Slurm preemption with a decoy: a link flapped on another node (a warning) just
    # before the scheduler preempted the job (printed in the batch script's output).
    events = [
        _ev(
            "NCCL WARN NET/IB : mlx5_11:1 Got async event : port error",
            ("ip-10-2-62-116",),
            "warning-level",
            score=0.795,
        ),
        _ev(
            "slurmstepd: error: *** JOB 6153359 ON ip-10-1-199-12 CANCELLED AT "
            "2025-05-04T20:12:28 DUE TO PREEMPTION ***",
            ("(job)",),
            "error-level",
            score=0.768,
        ),
    ]
    v = decide(events, [], [], LEX, n_nodes=24)
    assert (v.category, v.evict, v.restart) == ("platform", (), "as-is")
    shm = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."
    assert decide([_ev(shm, ("(job)",))], [], [], LEX, n_nodes=8).evict == ()


def test_the_culprits_own_words_outweigh_an_inference_from_silence() -> None:
    # gen3's corrupt shard: the culprit stopped (node-silent, an inference) after its DataLoader
    # said why: a Parquet file that does not read back.
    nodes = [VerdictNode("ip-4", 1.0, ("spatial-outlier",)), VerdictNode("ip-8", 0.5, ())]
    rule = VerdictRule("node-silent", "hardware/node", "cause", ("ip-4",), 0.7)
    events = [
        _ev(
            "pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer. Either the file "
            "is corrupted or this is not a parquet file.",
            ("ip-4",),
        )
    ]
    v = decide(events, nodes, [rule], LEX, n_nodes=16)
    assert (v.category, v.evict) == ("hardware/storage", ("ip-4",))
    # A confirmed rule that names the fault itself still comes first.
    xid = VerdictRule("gpu-xid-79-fallen-off-bus", "hardware/accelerator", "cause", ("ip-4",), 0.9)
    assert decide(events, nodes, [xid], LEX, n_nodes=16).category == "hardware/accelerator"


def test_memory_another_process_held_is_the_platforms_fault() -> None:
    # The kernel killed a rank for memory on n3, but its OOM table shows another user's process
    # holding most of it: a node left unclean, evicted; without that table, the job's own.
    events = [
        _ev("Out of memory: Killed process 2979380 (python3) total-vm:160000000kB", ("n3",)),
        _ev("Watchdog caught collective operation timeout", ("n1", "n2"), "cascade"),
    ]
    hog = {"n3": "pid 686710 (python3, uid 1007, the job's is 0) held 221 GiB of n3's memory"}
    v = decide(events, NODES, [], LEX, n_nodes=3, outsiders=hog)
    assert v.category == "platform" and v.evict == ("n3",)
    assert any("uid 1007" in w for w in v.why)
    own = decide(events, NODES, [], LEX, n_nodes=3)
    assert own.category == "user/config" and own.evict == ()
    # another node's table says nothing of n3's kill
    elsewhere = decide(events, NODES, [], LEX, n_nodes=3, outsiders={"n2": hog["n3"]})
    assert elsewhere.category == "user/config"


def test_a_platform_fault_in_the_culprits_own_words_evicts_it() -> None:
    # A template every node prints with other values ("exitcode: -9" on n3, "-15" elsewhere):
    # the culprit's copy is the evidence. A kill for memory evicts nobody; a platform fault
    # whose words are the culprit's evicts that node.
    events = [
        _ev(
            "failed (exitcode: -9) local_rank: 0 (pid: 3319) of binary: /usr/bin/python3",
            ("n1", "n2", "n3"),
            "error-level",
        )
    ]
    v = decide(events, NODES, [], LEX, n_nodes=3)
    assert (v.category, v.evict) == ("user/config", ())
    # a platform fault in its own words (its DataLoader worker killed from outside; elsewhere
    # the teardown's SIGTERM) evicts it
    events = [
        _ev(
            "RuntimeError: DataLoader worker (pid 11510) is killed by signal: Killed. ",
            ("n1", "n2", "n3"),
            "error-level",
        )
    ]
    v = decide(events, NODES, [], LEX, n_nodes=3)
    assert (v.category, v.evict) == ("platform", ("n3",))


def test_a_store_connection_lost_by_the_culprit_alone_is_its_network() -> None:
    # A node cut off the network (a real torchrun + gloo run, its link taken down): every
    # rank's collective timed out in gloo; only the cut-off node's store connection timed out
    # too, the others still reached the store.
    gloo = (
        "[default1]:[rank3]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
        "tcp/unbound_buffer.cc:78] Timed out waiting 30000ms for recv operation to complete"
    )
    store = (
        "[W1127 15:58:21.368845835 socket.cpp:494] [c10d] waitForInput: socket SocketImpl(fd=4, "
        "addr=[::400d:f2db:8b7f:0]:1893, remote=[10b6:62e1:d755:0]:57697) timed out after 60000ms"
    )
    cut = [VerdictNode("d2", 0.9, ("spatial-outlier",)), VerdictNode("d1", 0.2, ())]
    events = [_ev(gloo, ("d1", "d2", "d3")), _ev(store, ("d2",))]
    v = decide(events, cut, [], LEX, n_nodes=3)
    assert v.category == "hardware/network" and v.evict == ("d2",)
    # every node's store connection timed out: no one node's network
    everywhere = [_ev(gloo, ("d1", "d2", "d3")), _ev(store, ("d1", "d2", "d3"))]
    assert decide(everywhere, cut, [], LEX, n_nodes=3).category != "hardware/network"
    # one node alone: the wait itself (rank 0 busy for longer than the timeout)
    alone = decide([_ev(store, ("d1",))], [VerdictNode("d1", 0.3, ())], [], LEX, n_nodes=1)
    assert alone.category == "user/config"


def test_words_only_other_nodes_printed_evict_the_culprit_not_them() -> None:
    # realruns' sigkill-rank-restarts: the culprit's own lines say nothing known (its peer's
    # gloo error, its agent's teardown); the other node lost the rendezvous store when the
    # job fell apart. The store's loss says what kind of fault it was; the node to take out is
    # still the culprit the ranking names, not the one that printed the words.
    store = (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to "
        "the C10d store has failed. See inner exception for details."
    )
    teardown = "Sending process 3921 closing signal SIGTERM"
    ranked = [VerdictNode("x1", 0.92, ("spatial-outlier", "no-trace")), VerdictNode("x2", 0.4, ())]
    events = [_ev(teardown, ("x1",), "cascade"), _ev(store, ("x2",), "error-level")]
    v = decide(events, ranked, [], LEX, n_nodes=2)
    assert (v.category, v.evict) == ("platform", ("x1",))
    # no culprit singled out: the words' own node, as before
    even = [VerdictNode("x1", 0.3, ()), VerdictNode("x2", 0.3, ())]
    assert decide(events, even, [], LEX, n_nodes=2).evict == ("x2",)


def test_versions_that_do_not_fit_on_the_node_whose_software_differs_are_its_image() -> None:
    # gen3's node-image mismatch: NCCL's bootstrap on the one node running another NCCL build
    words = (
        "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317\n"
        "Last error:\nMessage truncated : received 4096 bytes instead of 4160"
    )
    odd = [VerdictNode("n3", 0.97, ("spatial-outlier", "odd-version")), VerdictNode("n1", 0.4, ())]
    events = [_ev(words, ("n3", "n1", "n2", "n4"))]
    v = decide(events, odd, [], LEX, n_nodes=8)
    assert (v.category, v.evict) == ("platform", ("n3",))
    # the same words with no node standing apart by its versions: the job's build
    plain = [VerdictNode("n3", 0.97, ("spatial-outlier",)), VerdictNode("n1", 0.4, ())]
    assert decide(events, plain, [], LEX, n_nodes=8).category == "user/software-incompatibility"


def test_a_rendezvous_short_of_the_nodes_its_launcher_asks_for_is_the_configuration() -> None:
    # torchrun --nnodes 4 on three started nodes: the rendezvous waits for a fourth and times
    # out (a real run of ours). The words alone say the platform's rendezvous.
    events = [
        _ev(
            "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
            ("n1", "n2", "n3"),
            "error-level",
        )
    ]
    nodes = [VerdictNode(n, 0.3, ()) for n in ("n1", "n2", "n3")]
    alone = decide(events, nodes, [], LEX, n_nodes=3, stage="init")
    assert alone.category == "platform"
    short = decide(events, nodes, [], LEX, n_nodes=3, stage="init", asked_nodes=4)
    assert short.category == "user/config" and short.evict == ()
    assert short.restart == "after-fix" and "waits for 4 nodes, 3 ran" in short.why[-1]
    # as many nodes as asked, or failing after init, or words that name another cause: as read
    for kept in (
        decide(events, nodes, [], LEX, n_nodes=3, stage="init", asked_nodes=3),
        decide(events, nodes, [], LEX, n_nodes=3, stage="training", asked_nodes=4),
    ):
        assert kept.category == "platform"
    code = [_ev("ZeroDivisionError: division by zero", ("n1",), "error-level")]
    assert decide(code, nodes, [], LEX, n_nodes=3, stage="init", asked_nodes=4).category == (
        "user/code"
    )


@pytest.mark.parametrize(
    ("config", "asked"),
    [
        ({"nnodes": "4"}, 4),
        ({"launcher.nnodes": "2:4"}, 2),  # torchrun's elastic MIN:MAX waits for MIN
        ({"num_nodes": " 8 "}, 8),  # DeepSpeed's launcher
        ({"NUM_MACHINES": "2"}, 2),
        ({"nodes": "4"}, None),  # a scheduler's allocation, not what a launcher waits for
        ({"nnodes": "$NNODES"}, None),
        ({"nnodes": "4", "trainer.num_nodes": "2"}, None),  # two answers: none
        ({}, None),
    ],
)
def test_the_nodes_a_launcher_waits_for(config: dict[str, str], asked: int | None) -> None:
    from l4_plugin.diagnosis.assembly import asked_nodes

    assert asked_nodes(config) == asked


def test_a_job_that_slowed_down_and_then_was_torn_down_is_a_slow_machines() -> None:
    # A real run of ours: one rank slowed every step from iteration 8 on, the job ran into its
    # wall-clock limit; the report leads with the line where it slowed (its other events the
    # teardown's: a DataLoader's worker terminated, torchrun's agent stopping).
    onset = _ev(
        " iteration        8/      40 | elapsed time per iteration (ms): 1035.1 |",
        ("n4",),
        "slowdown-line:8",
    )
    teardown = [
        _ev(
            "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__>\n"
            "RuntimeError: DataLoader worker (pid 7318) is killed by signal: Terminated.",
            ("n2", "n3"),
            "error-level",
            "consequence-words",
        ),
        _ev("Received 15 death signal, shutting down workers", ("n1",), "consequence-words"),
    ]
    nodes = [VerdictNode(n, 0.3, ()) for n in ("n1", "n2", "n3", "n4")]
    v = decide([onset, *teardown], nodes, [], LEX, n_nodes=4, stage="training")
    assert v.category == "hardware/node" and "slowed down from iteration 8" in v.why[-1]
    # the line second (what the job printed says why: a thermal report first): its words
    thermal = _ev("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", ("n4",))
    assert decide([thermal, onset], nodes, [], LEX, n_nodes=4).category == "hardware/accelerator"
