"""Stage and iteration rules on real-looking masked bodies and raw lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from l4_plugin.errors import ConfigError
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.rollup import NodeRollup
from l4_plugin.ingest.stages import StageRules


def _scanned(rules: StageRules, lines: list[str]) -> NodeRollup:
    """One node's rollup of ``lines``, read as one file."""
    rollup = NodeRollup("n1", rules)
    rollup.scan("r0.log", 0, [(lines, LineParser().feed(lines), None, 0)])
    return rollup


@pytest.fixture(scope="module")
def rules() -> StageRules:
    return StageRules.load()


def _body(raw: str) -> str:
    return LineParser().feed([raw])[0].body


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        (
            "[rank0]: [2024-03-18 04:01:03] iteration      117/   1000 | consumed samples: 512 |",
            117,
        ),
        ("[rank0]:steps: 15001 loss: 1.7467 iter time (s): 3.198 samples/sec: 640.362", 15001),
        ("[default0]: 16%|█         | 2/12 [00:10<00:55,  5.54s/it]", 2),
        # a custom loop's print() behind torchrun's --tee label and mpirun's
        ("[default0]:step 17 loss 0.2758", 17),
        ("[1,0]<stdout>:step 9 | loss 2.31", 9),
        # TF Estimator's loss hook (NVIDIA/DeepLearningExamples' BERT with LAMB), as Python's
        # logging and as absl's glog-style line; detectron2's metrics line
        ("INFO:tensorflow:loss = 11.222988, step = 1", 1),
        (
            "I0606 09:26:10.654364 46912496659904 basic_session_run_hooks.py:262] loss = 9.5, "
            "step = 101 (2.707 sec)",
            101,
        ),
        (
            "[03/02 11:20:13 d2.utils.events]:  eta: 0:10:54  iter: 19  total_loss: 2.318  "
            "loss_cls: 0.7263  time: 0.3412  lr: 0.00039962  max_mem: 2876M",
            19,
        ),
        # RETURNN's progress: an epoch and a step, no loss by that name
        ("ep 1 train, step 97, ce 0.859, fer 0.977, mem_usage:cuda:0 1.6GB", 97),
        # PaddlePaddle's pass and batch, behind mpirun's label (PaddlePaddle/Paddle#14739)
        ("Tue Dec  4 23:03:36 2018[1,8]<stdout>:PassID 0, BatchID 0001, Test Loss 0.59", 1),
        ("Pass 3, Batch 200, Cost 0.693147", 200),
        # Lightning's bar: the trainer's global step; where tqdm shows it in scientific
        # notation (shorter for 1000.0), the bar's batch
        (
            "Epoch 0:  82%|███ | 211/256 [30:10<06:26, 0.12it/s, v_num=4op4, "
            "reduced_train_loss=7.19, global_step=210, consumed_samples=5.4e+4]",
            210,
        ),
        (
            "Epoch 0:  35%|███ | 1001/2837 [2:08:49<3:37:42,  0.13it/s, v_num=wv0r, "
            "reduced_train_loss=1.853, global_step=1e+3, consumed_samples=2.56e+5]",
            1001,
        ),
    ],
)
def test_iteration_markers(rules: StageRules, raw: str, number: int) -> None:
    role = rules.role(_body(raw))
    assert role.stage == "training" and role.iteration is not None
    assert role.iteration.number_of(raw) == number


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (
            "[rank0]: [2024-03-18 04:01:03] iteration      117/   1000 | consumed samples: 512 | "
            "elapsed time per iteration (ms): 2345.6 | learning rate: 1.0E-04 |",
            2.3456,
        ),
        ("[rank0]:steps: 15001 loss: 1.7467 iter time (s): 3.198 samples/sec: 640.362", 3.198),
        ("[default0]: 16%|█         | 2/12 [00:10<00:55,  5.54s/it]", 5.54),
        ("[default0]: 16%|█         | 2/12 [00:10<00:55,  2.50it/s]", 0.4),
        ("[default0]: 16%|█         | 2/12 [00:10<00:55,  0.00it/s]", None),
        (
            "[rank0]: [2024-03-18 04:01:03] iteration      117/   1000 | consumed samples: 512 |",
            None,
        ),
    ],
)
def test_iteration_durations(rules: StageRules, raw: str, seconds: float | None) -> None:
    role = rules.role(_body(raw))
    assert role.iteration is not None
    got = role.iteration.seconds_of(raw)
    assert got == (None if seconds is None else pytest.approx(seconds))


def test_iteration_duration_rules_are_checked(tmp_path: Path) -> None:
    bad = tmp_path / "stages.yaml"
    bad.write_text(
        "iterations:\n  - name: x\n    marker: 'step'\n    number: 'step (\\d+)'\n"
        "    seconds:\n      - {pattern: 'took ([\\d.]+)', unit: minutes}\n"
    )
    with pytest.raises(ConfigError, match=r"iterations\[0\]\.seconds\[0\]: needs pattern and unit"):
        StageRules.load(bad)
    bad.write_text(
        "iterations:\n  - name: x\n    marker: 'step'\n    number: 'step (\\d+)'\n"
        "    seconds:\n      - {pattern: 'took [\\d.]+', unit: s}\n"
    )
    with pytest.raises(ConfigError, match="needs a group for the number"):
        StageRules.load(bad)


@pytest.mark.parametrize(
    ("raw", "stage"),
    [
        ("[rank0]:node-1:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", "init"),
        (
            "[default0]:Map (num_proc=32):  50%|█████     | 2048/4096 [00:25<00:10, 18 ex/s]",
            "data_loading",
        ),
        ("[rank0]:> building train, validation, and test datasets ...", "data_loading"),
        (
            "[default0]:Loading checkpoint shards: 100%|██████████| 4/4 [00:26<00:00]",
            "model_loading",
        ),
        (
            "[rank0]:[2024-09-02 00:12:04,445] [INFO] [logging.py:96:log_dist] [Rank 0] "
            "Saving model checkpoint: /mnt/x.pt",
            "checkpointing",
        ),
        ("[rank0]:training ...", "training"),
        # OpenRLHF's bars (TideDra/lmm-r1#43), diffusers' "Steps:"; an evaluation's bar is none
        (
            "Train epoch [1/1]:  88%|████████▊ | 7/8 [01:46<00:14, 14.28s/it, pg=-0.795, kl=0]",
            "training",
        ),
        ("Episode [1/16]:   0%|          | 0/309 [03:58<?, ?it/s]", "training"),
        ("Steps:  12%|█▏        | 120/1000 [02:00<14:40,  1.00s/it, loss=0.1]", "training"),
        ("[rank0]:[after training is done] datetime: 2024-03-18 05:00:00", "shutdown"),
        # huggingface/m4-logs tr_141: the trainer's "iteration: N/M" line
        (
            "iteration:  2500/500000   0% | elapsed time: 07:41:19 | per_token_loss: 3.1525 | "
            "lr: 9.990E-06 | num_tokens: 788088885",
            "training",
        ),
    ],
)
def test_stage_switches(rules: StageRules, raw: str, stage: str) -> None:
    assert rules.role(_body(raw)).stage == stage


def test_ordinary_lines_have_no_role(rules: StageRules) -> None:
    role = rules.role(_body("[rank0]:RuntimeError: CUDA error: an illegal memory access"))
    assert role.stage is None and role.iteration is None
    # pytorch/torchtitan#822: torch's warning as a process dies without the call is no shutdown
    warned = rules.role(
        _body(
            "[rank0]:[W205 11:53:42.876753845 ProcessGroupNCCL.cpp:1496] Warning: WARNING: "
            "destroy_process_group() was not called before program exit, which can leak resources."
        )
    )
    assert warned.stage is None
    assert rules.role(_body("INFO train: calling destroy_process_group")).stage == "shutdown"


def test_pre_training_stages_do_not_interrupt_training(rules: StageRules) -> None:
    assert rules.next_stage("training", "data_loading", training_started=True) == "training"
    assert rules.next_stage("init", "data_loading", training_started=False) == "data_loading"
    assert rules.next_stage("training", "checkpointing", training_started=True) == "checkpointing"


def test_bad_rules_file_names_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "stages.yaml"
    bad.write_text("stages:\n  - name: init\n    patterns: ['(unclosed']\n")
    with pytest.raises(ConfigError, match=r"stages\[0\]\.patterns\[0\]: invalid regex"):
        StageRules.load(bad)
    bad.write_text("stages:\n  - name: warmup\n")
    with pytest.raises(ConfigError, match=r"stages\[0\]: needs a name from init"):
        StageRules.load(bad)
    bad.write_text("iterations:\n  - {name: x, marker: 'a', number: 'b'}\n")
    with pytest.raises(ConfigError, match=r"needs a group for the number"):
        StageRules.load(bad)


def _stages_by_body(job_dir: Path) -> dict[str, set[str]]:
    """Stage(s) every line kind of a job's rank files was tagged with (the ingest's scan)."""
    from l4_plugin.ingest.jobdir import discover
    from l4_plugin.ingest.reader import read_lines

    parser, rules = LineParser(), StageRules.load()
    out: dict[str, set[str]] = {}
    for f in discover(job_dir):
        rollup = NodeRollup(f.node, rules)
        rollup.scan(f.relative, f.rank, [(c, parser.feed(c), None, 0) for c in read_lines(f.path)])
        for (kind, stage, _), _g in rollup.groups.items():
            # "?stage": the file's own stage, before the job timeline places the line
            out.setdefault(kind.body, set()).add(stage.lstrip("?"))
    return out


def test_lines_after_a_finished_save_are_training_again(rules: StageRules) -> None:
    lines = [
        "[rank0]: [2024-03-18 04:01:03] iteration      100/   1000 | consumed samples: 512 |",
        "[rank0]:saving checkpoint at iteration     100 to /ckpt",
        "[rank0]:  successfully saved checkpoint at iteration     100 to /ckpt",
        "[rank0]:node-1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
        "[rank0]: [2024-03-18 04:01:09] iteration      101/   1000 | consumed samples: 516 |",
        "[rank0]:[2024-09-02 00:12:04,445] [INFO] [logging.py:96:log_dist] [Rank 0] "
        "Saving model checkpoint: /ckpt/global_step101/mp_rank_00_model_states.pt",
        "[rank0]:[2024-09-02 00:12:05,445] [INFO] [torch_checkpoint_engine.py:33:commit] "
        "[Torch] Checkpoint global_step101 is ready now!",
        "[rank0]:[E1105 12:00:00.123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout",
    ]
    parser = LineParser()
    rollup = NodeRollup("n1", rules)
    rollup.scan("r0.log", 0, [(lines, parser.feed(lines), None, 0)])
    stage_of = {g.first_pos: stage.lstrip("?") for (_, stage, _), g in rollup.groups.items()}
    assert [stage_of[i] for i in range(1, 9)] == [
        "training",
        "checkpointing",
        "checkpointing",
        "training",
        "training",
        "checkpointing",
        "checkpointing",
        "training",
    ]


def test_done_line_before_training_does_not_start_training(rules: StageRules) -> None:
    lines = ["[rank0]:Configuration saved in /out/config.json", "[rank0]:building model"]
    rollup = _scanned(rules, lines)
    # the file's own stage ("?": no iteration marker of its own, placed on the job timeline later)
    assert {stage for (_, stage, _) in rollup.groups} == {"?checkpointing"}


def test_an_async_save_is_no_checkpointing_stage(
    rules: StageRules,
) -> None:
    # NeMo 2 on a rank that prints no progress (per-task Slurm files): an asynchronous save
    # runs beside training, so neither its scheduling nor its end is a checkpointing stage; the
    # watchdog timeout after it keeps the file's provisional stage (placed on the job timeline).

    lines = [
        "[NeMo I 2025-10-01 04:53:38 nemo_model_checkpoint:497] Scheduled async checkpoint save "
        "for /ckpt/step=89-last",
        "[NeMo I 2025-10-01 04:54:15 nemo_model_checkpoint:522] Async checkpoint save for step "
        "90 (/ckpt/step=89-last) finalized successfully.",
        "[rank0]:[E1001 05:26:42.368454694 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1379, OpType=ALLREDUCE)",
    ]
    rollup = _scanned(rules, lines)
    stages = {kind.body[:20]: stage for (kind, stage, _) in rollup.groups}
    assert not any(stage.endswith("checkpointing") for stage in stages.values()), stages


def test_a_save_seen_begin_and_end_returns_to_training_without_progress_lines(
    rules: StageRules,
) -> None:
    # A rank that prints no progress of its own (Megatron-LM's earlier pipeline stages): a save
    # it saw begin and end is its only mark; what follows (the watchdog timeout that ended the
    # job) is training, not a save that never ended.

    lines = [
        "[2025-10-01 04:53:38] saving checkpoint at iteration     900 to /ckpt",
        "[2025-10-01 04:54:15]   successfully saved checkpoint from iteration     900 to /ckpt",
        "[rank0]:[E1001 05:26:42.368454694 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1379, OpType=ALLREDUCE)",
    ]
    rollup = _scanned(rules, lines)
    stages = {kind.body[:20]: stage for (kind, stage, _) in rollup.groups}
    assert stages["[Rank <RANK>] Watchd"].endswith("training"), stages


@pytest.mark.parametrize("seed", [1, 2, 4])  # Megatron-LM, DeepSpeed, HF Trainer
def test_simulated_jobs_return_to_training_after_checkpoints(
    rules: StageRules, tmp_path: Path, seed: int
) -> None:
    from l4_simulate import simulate

    simulate(tmp_path, nodes=2, iterations=70, fault="nan-loss", seed=seed, baselines=0)
    stages = _stages_by_body(tmp_path / "job")
    checkpoint_kinds = {b for b, s in stages.items() if "checkpointing" in s}
    assert checkpoint_kinds, "the simulated job saves checkpoints"
    # Only save lines themselves are checkpointing; iteration markers and the failure are not.
    assert all(re.search(r"(?i)sav|checkpoint", b) for b in checkpoint_kinds), checkpoint_kinds
    for body, seen in stages.items():
        if rules.role(body).iteration is not None:
            assert seen == {"training"}, body


def test_done_without_then_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "stages.yaml"
    bad.write_text("stages:\n  - name: checkpointing\n    done: ['saved']\n")
    with pytest.raises(ConfigError, match=r"stages\[0\]\.then: .* got None"):
        StageRules.load(bad)


@pytest.mark.parametrize(
    "raw",
    [
        "Epoch 1:  45%|████▌     | 450/1000 [01:23<01:40,  5.4it/s, loss=2.31, v_num=0]",
        "  1/100  3.09G  3.413  4.199  13  640: 100% ━━━━━━━━ 588/588 3.6it/s 2:45",
    ],
)
def test_a_progress_bar_with_a_rate_means_training(rules: StageRules, raw: str) -> None:
    kind = LineParser().feed([raw])[0]
    assert rules.role(kind.body).stage == "training"


def test_a_worker_error_re_raised_is_one_record_named_by_the_workers_exception(
    rules: StageRules,
) -> None:
    # torch's ExceptionWrapper (DataLoader workers): the main process re-raises the worker's
    # error with the worker's traceback in its message, after "Original Traceback"; the record
    # is one, named by what the worker raised, an error whatever its class is called.

    body = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/torch/_utils.py", line 715, in reraise',
        "    raise exception",
        "pyarrow.lib.ArrowInvalid: Caught ArrowInvalid in DataLoader worker process 2.",
        "Original Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py", line 351, '
        "in _worker_loop",
        "    data = fetcher.fetch(index)",
        "pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer. Either the file is "
        "corrupted or this is not a parquet file.",
        "",
    ]
    lines = [f"[rank14]: {line}" for line in body]
    rollup = _scanned(rules, lines)
    records = [(key[0], group) for key, group in rollup.groups.items() if key[0].body.strip()]
    assert len(records) == 1, [kind.body for kind, _ in records]
    kind, group = records[0]
    assert kind.body.startswith("pyarrow.lib.ArrowInvalid: Parquet magic bytes"), kind.body
    assert kind.level == "ERROR"
    assert group.message.count("\n") == len(body) - 2


def test_an_engines_count_beside_a_trainers_numbers_nothing(rules: StageRules) -> None:
    # HF's Trainer on DeepSpeed: the bar counts the trainer's steps, the engine's step= line
    # (every steps_per_print) may count otherwise; the trainer's number is the iteration. A
    # file with only the engine's lines is numbered by them.

    bar = " 72%|███████   | {k}/2735 [1:39:46<37:58,  3.02s/it]"
    engine = (
        "[2025-07-30 15:03:19,690] [INFO] [logging.py:128:log_dist] [Rank 0] step={k}, "
        "skipped=0, lr=[6.3e-06], mom=[[0.9, 0.95]]"
    )
    lines = [bar.format(k=390), engine.format(k=780), "after both", bar.format(k=391)]
    rollup = _scanned(rules, lines)
    assert rollup.last_iteration == 391
    its = {key[0].body: key[2] for key in rollup.groups if key[0].body == "after both"}
    assert its == {"after both": 390}, its

    # one rank's two files, its trainer's bar on stderr and the engine's lines on stdout: the
    # node's files are scanned by one rollup, stderr first
    split = NodeRollup("n3", rules)
    err, out = [bar.format(k=390)], [engine.format(k=780), "after it"]
    split.scan("w.err", 0, [(err, LineParser().feed(err), None, 0)])
    split.scan("w.out", 0, [(out, LineParser().feed(out), None, 0)])
    assert split.last_iteration == 390

    alone = [engine.format(k=780), "after it"]
    rollup = NodeRollup("n2", rules)
    rollup.scan("r0.log", 0, [(alone, LineParser().feed(alone), None, 0)])
    assert rollup.last_iteration == 780


def test_a_c10_warning_keeps_its_stack(rules: StageRules) -> None:
    # torch's TCPStore client when the store's host went away (a real gloo run): a warning with
    # the C++ stack c10 appends; the stack's lines are no records of their own.

    lines = [
        "[W1127 15:53:18.822621315 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on "
        "SocketImpl(fd=4, addr=[n03]:60351, remote=[n01]:19607): Failed to recv, got 0 bytes. "
        "Connection was likely closed. Did the remote server shutdown or crash?",
        "Exception raised from recvBytes at /__w/pytorch/pytorch/torch/csrc/distributed/c10d/"
        "Utils.hpp:787 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7f in libc10.so)",
        "frame #1: c10::DistError::DistError(c10::SourceLocation, std::string) + 0x72 (0x7f in "
        "libc10.so)",
    ]
    rollup = _scanned(rules, lines)
    [(key, group)] = list(rollup.groups.items())
    assert key[0].level == "WARNING"
    assert group.message.count("\n") == 3
    # c10 leaves the interpreter's frames out with a line of its own; the frames after it are
    # the same stack's (a real gloo run: "frame #29: …" became an event of its own)
    skipped = [
        *lines,
        "<omitting python frames>",
        "frame #29: <unknown function> + 0x2724a (0x7f in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #30: __libc_start_main + 0x85 (0x7f in /lib/x86_64-linux-gnu/libc.so.6)",
    ]
    rollup = NodeRollup("n1", rules)
    rollup.scan("r0.log", 0, [(skipped, LineParser().feed(skipped), None, 0)])
    [(key, group)] = list(rollup.groups.items())
    assert group.message.count("\n") == 6


def test_load_state_dicts_messages_continue_its_error(rules: StageRules) -> None:
    # torch's load_state_dict raises "Error(s) in loading state_dict for M:" and a tab-indented
    # line per mismatch; under a pod's stamps each has a time of its own and still belongs to it.

    stamp = "2025-01-22T15:08:43.90441{}Z [rank3]: "
    lines = [
        stamp.format(1) + "Traceback (most recent call last):",
        stamp.format(2) + '  File "/workspace/train.py", line 88, in <module>',
        stamp.format(3) + "    model.load_state_dict(state)",
        stamp.format(4) + "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:",
        stamp.format(5) + "\tsize mismatch for model.embed_tokens.weight: copying a param with "
        "shape torch.Size([129280, 8192]) from checkpoint, the shape in current model is "
        "torch.Size([128256, 8192]).",
        stamp.format(6) + '\tUnexpected key(s) in state_dict: "lm_head.bias". ',
    ]
    rollup = _scanned(rules, lines)
    [(_, group)] = list(rollup.groups.items())
    assert "size mismatch for model.embed_tokens.weight" in group.message
    assert "Unexpected key(s)" in group.message


def test_torch_loads_weights_only_refusal_is_one_record(rules: StageRules) -> None:
    # modelscope/ms-swift#5808 (torch 2.6 resuming a DeepSpeed checkpoint): torch.load's error
    # goes on over tab-indented lines, the last one naming the class it refused.

    lines = [
        "[rank4]: _pickle.UnpicklingError: Weights only load failed. This file can still be "
        "loaded, to do so you have two options, do those steps only if you trust the source of "
        "the checkpoint. ",
        "[rank4]: \t(1) In PyTorch 2.6, we changed the default value of the `weights_only` "
        "argument in `torch.load` from `False` to `True`. Re-running `torch.load` with "
        "`weights_only` set to `False` will likely succeed, but it can result in arbitrary code "
        "execution. Do it only if you got the file from a trusted source.",
        "[rank4]: \t(2) Alternatively, to load with `weights_only=True` please check the "
        "recommended steps in the following error message.",
        "[rank4]: \tWeightsUnpickler error: Unsupported global: GLOBAL "
        "deepspeed.runtime.fp16.loss_scaler.LossScaler was not an allowed global by default.",
        "[rank4]: ",
        "[rank4]: Check the documentation of torch.load to learn more about types accepted by "
        "default with weights_only https://pytorch.org/docs/stable/generated/torch.load.html.",
    ]
    rollup = _scanned(rules, lines)
    # (the prefixed blank line is a line of its own)
    [group] = [g for g in rollup.groups.values() if g.message.strip() != "[rank4]:"]
    assert "LossScaler was not an allowed global" in group.message
    assert "Check the documentation of torch.load" in group.message


def test_nccls_invalid_usage_and_its_last_error_continue_torchs_error(rules: StageRules) -> None:
    # pytorch/torchtitan#2184: NCCL's result is "ncclInvalidUsage" (no "Error" in its name)

    lines = [
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
        "distributed/c10d/NCCLUtils.cpp:77, invalid usage (run with NCCL_DEBUG=WARN for "
        "details), NCCL version 2.26.5",
        "[rank2]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        "[rank2]: Last error:",
        "[rank2]: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 6000",
    ]
    rollup = _scanned(rules, lines)
    [group] = list(rollup.groups.values())
    assert "Duplicate GPU detected" in group.message


def test_ddps_unused_parameter_error_is_one_record(rules: StageRules) -> None:
    # speechbrain/speechbrain#2340: the reducer's error goes on over lines of its own, the last
    # naming the parameters that got no gradient

    lines = [
        "RuntimeError: Expected to have finished reduction in the prior iteration before "
        "starting a new one. This error indicates that your module has parameters that were not "
        "used in producing loss. You can enable unused parameter detection by passing the "
        "keyword argument `find_unused_parameters=True` to "
        "`torch.nn.parallel.DistributedDataParallel`, and by ",
        "making sure all `forward` function outputs participate in calculating loss. ",
        "If you already have done the above, then the distributed data parallel module wasn't "
        "able to locate the output tensors in the return value of your module's `forward` "
        "function.",
        "Parameters which did not receive grad for rank 0: model.encoder.layers.22.fc.bias, "
        "model.encoder.layers.22.fc.weight",
        "Parameter indices which did not receive grad for rank 0: 437 438 439",
    ]
    rollup = _scanned(rules, lines)
    [group] = list(rollup.groups.values())
    assert "layers.22.fc.bias" in group.message and "437 438 439" in group.message


def test_an_nccl_line_never_continues_the_record_before_it(rules: StageRules) -> None:
    # Interleaved ranks: a warning, then another rank's NCCL WARN whose message ("NET/IB : …")
    # reads like the bare continuation NCCL prints after "Last error:"; with its own header it
    # is a record of its own.

    lines = [
        "[default1]:[W reducer.cpp:1389] Warning: find_unused_parameters=True was specified in "
        "DDP constructor, but did not find any unused parameters in the forward pass.",
        "[default6]:worker-390:87466:87485 [6] NCCL WARN NET/IB : Got completion from peer "
        "10.99.162.189<51450> with status=12 opcode=0 len=0 vendor err 129 (Send)",
    ]
    rollup = _scanned(rules, lines)
    assert len(rollup.groups) == 2, [key[0].body for key in rollup.groups]


def test_torchs_nccl_error_with_nccls_last_error_is_one_record(rules: StageRules) -> None:
    # NVIDIA/nccl#2076: torch's DistBackendError goes on with NCCL's result and its last error,
    # NCCL's own message bare; one record, so its last line (the cause's words) names it.

    lines = [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version "
        "2.21.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
        "Last error:",
        "socketProgressOpt: Call to recv from 172.16.0.4<33759> failed : Connection reset by peer",
    ]
    # EvolvingLMMs-Lab/open-r1-multimodal#7: bootstrap's own words after "Last error:"
    alt = [*lines[:3], "Bootstrap : no socket interface found"]
    for labelled in (lines, [f"[rank3]: {line}" for line in lines], alt):
        rollup = NodeRollup("n1", rules)
        rollup.scan("r0.log", 0, [(labelled, LineParser().feed(labelled), None, 0)])
        [group] = list(rollup.groups.values())
        assert group.message.endswith(labelled[-1])


def test_an_error_whose_message_ends_announcing_more_takes_its_next_bare_line(
    rules: StageRules,
) -> None:
    # tensorflow/tpu#785: TPUEstimator's error names the task, its message on the next line; a
    # next line with a level or a time of its own is a record of its own.

    lines = [
        "ERROR:tensorflow:Error recorded from training_loop: From /job:worker/replica:0/task:0:",
        "Core halted unexpectedly: No error message available as no compiler metadata was found.",
        "INFO:tensorflow:training_loop marked as finished",
    ]
    rollup = _scanned(rules, lines)
    assert len(rollup.groups) == 2
    error = next(g for k, g in rollup.groups.items() if k[0].level == "ERROR")
    assert error.message.endswith(lines[1])
    for own in ("WARNING:tensorflow:Reraising captured error", "2024-01-02 03:04:05 core halted"):
        rollup = _scanned(rules, [lines[0], own])
        assert len(rollup.groups) == 2, own


def test_the_line_after_nccls_last_error_is_its_words_whatever_they_are(
    rules: StageRules,
) -> None:
    # gen3's node-image mismatch (NCCL bootstrap.cc's words after "Last error:"): the line is
    # the record's, not another rank's NCCL warning after it, nor a line after a blank one's
    # turn of another stream.

    head = [
        "[default2]:[rank34]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:317,"
        " internal error - please report this issue to the NCCL developers, NCCL version 2.19.3",
        "[default2]:[rank34]: ncclInternalError: Internal check failed.",
        "[default2]:[rank34]: Last error:",
    ]
    words = "[default2]:[rank34]: Message truncated : received 4096 bytes instead of 4160"
    warn = (
        "[default6]:gpu-r30-u27:1131063:1131066 [6] bootstrap.cc:77 NCCL WARN Message truncated :"
        " received 4096 bytes instead of 4160"
    )
    for lines, ends in (
        ([*head, words, warn], words),
        ([*head, warn], head[-1]),
        ([*head, "[default6]:[rank38]: step 3 done"], head[-1]),
    ):
        rollup = NodeRollup("n1", rules)
        rollup.scan("r0.log", 0, [(lines, LineParser().feed(lines), None, 0)])
        first, other = rollup.groups.values()
        assert first.message.endswith(ends) and other.message == lines[-1]


def test_torchs_desync_report_is_one_record(rules: StageRules) -> None:
    # ProcessGroupNCCL's desync report: a header line, then tab-indented lines naming the
    # lagging ranks; one record, so its sample says who lagged.

    lines = [
        "[rank0]:[E119 19:58:43.925002098 ProcessGroupNCCL.cpp:1330] [PG ID 0 PG GUID "
        "0(default_pg) Rank 0] ",
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
        "\t   - [80, 81, 82, 83] joined but didn't finish collective #33301 (count from 1)",
        "\t - Snapshot of ranks' latest states:",
        "\t   #33301 started ranks:",
        "\t     [80, 81, 82, 83]",
    ]
    rollup = _scanned(rules, lines)
    [group] = list(rollup.groups.values())
    assert "joined but didn't finish collective" in group.message


def _records(rules: StageRules, lines: list[str]) -> list[tuple[str, str]]:
    """(record's kind body, its message) of the lines scanned as one file."""

    rollup = _scanned(rules, lines)
    return [(k[0].body, g.message) for k, g in rollup.groups.items() if k[0].body.strip()]


def test_a_traceback_quoted_in_an_exceptions_message_is_one_record(rules: StageRules) -> None:
    # torch.distributed.checkpoint's CheckpointException quotes each failed rank's traceback
    # ("Traceback (most recent call last): (RANK n)"), torch.multiprocessing.spawn the
    # child's after "-- Process n terminated with the following error:": one record each,
    # named by the exception that ends it.
    checkpoint = [
        "[rank26]: Traceback (most recent call last):",
        '[rank26]:   File "/ws/torchtitan/train.py", line 577, in train',
        "[rank26]:     self.checkpointer.save(",
        "[rank26]: torch.distributed.checkpoint.api.CheckpointException: CheckpointException "
        "ranks:dict_keys([26])",
        "[rank26]: Traceback (most recent call last): (RANK 26)",
        '[rank26]:   File "/torch/distributed/checkpoint/filesystem.py", line 420, in write_data',
        "[rank26]:     _write_files_from_queue(",
        "[rank26]: OSError: [Errno 28] No space left on device",
    ]
    spawn = [
        "Traceback (most recent call last):",
        '  File "/app/main.py", line 40, in <module>',
        "    mp.spawn(run, nprocs=8)",
        "torch.multiprocessing.spawn.ProcessRaisedException: ",
        "",
        "-- Process 3 terminated with the following error:",
        "Traceback (most recent call last):",
        '  File "/app/main.py", line 22, in run',
        "    model = DDP(model, device_ids=[gpu])",
        "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error",
    ]
    for lines, last in ((checkpoint, "OSError: [Errno"), (spawn, "RuntimeError: NCCL error")):
        records = _records(rules, lines)
        assert len(records) == 1, records
        assert records[0][0].startswith(last), records


def test_a_collectors_time_does_not_cut_a_chained_traceback(rules: StageRules) -> None:
    # A shipper that stamps every line it ships (JSON lines rendered with their time, a pod log
    # read with --timestamps) puts its time before "During handling…" and the next Traceback.
    stamp = "2025-04-04T03:51:02.522120Z "
    lines = [
        f"[rank3]: {stamp}Traceback (most recent call last):",
        '[rank3]:   File "/app/data.py", line 10, in load',
        "[rank3]:     return read(path)",
        f"[rank3]: {stamp}FileNotFoundError: [Errno 2] No such file or directory: 'x'",
        "[rank3]: ",
        f"[rank3]: {stamp}During handling of the above exception, another exception occurred:",
        "[rank3]: ",
        f"[rank3]: {stamp}Traceback (most recent call last):",
        '[rank3]:   File "/app/train.py", line 5, in main',
        "[rank3]:     batch = next(it)",
        f"[rank3]: {stamp}RuntimeError: the data shard could not be read",
    ]
    records = _records(rules, lines)
    assert len(records) == 1, records
    assert records[0][0].startswith("RuntimeError: the data shard"), records


def test_a_traceback_a_file_ends_with_takes_the_last_time_its_process_printed(
    rules: StageRules,
) -> None:
    # torchrun --log-dir: a rank's stderr holds a start-up warning, then, half an hour later,
    # the traceback it died with, stamp-less; its stdout went on printing steps until then.
    from l4_plugin.ingest.rollup import process_key, time_ref
    from l4_plugin.ingest.timeline import Timeline

    stderr = [
        "[rank26]:[W830 23:49:23.752660751 ProcessGroupNCCL.cpp:4115] using GPU 2 to perform "
        "barrier as devices used by this process are currently unknown.",
        "/torch/utils/checkpoint.py:1399: FutureWarning: `torch.cpu.amp.autocast(args...)` is "
        "deprecated.",
        "[rank26]: Traceback (most recent call last):",
        '[rank26]:   File "/ws/torchtitan/train.py", line 577, in train',
        "[rank26]: OSError: [Errno 28] No space left on device",
    ]
    stdout = [
        "[titan] 2025-08-31 00:17:16,360 - root - INFO - step: 390  loss:  5.0522",
        "[titan] 2025-08-31 00:17:16,893 - root - INFO - Saving the checkpoint.",
    ]
    assert process_key("h/attempt_0/2/stderr.log") == process_key("h/attempt_0/2/stdout.log")
    assert process_key("job-7-1.out") == process_key("job-7-1.err") != process_key("job-7-2.err")
    for order in ((stderr, stdout), (stdout, stderr)):
        rollup = NodeRollup("n1", rules, Timeline())
        parser = LineParser()
        for lines in order:
            name = "stderr.log" if lines is stderr else "stdout.log"
            rollup.scan(f"h/attempt_0/2/{name}", None, [(lines, parser.feed(lines), None, 0)])
        times = {
            word: time_ref(rollup, k[2], g)
            for k, g in rollup.groups.items()
            for word in ("OSError", "FutureWarning")
            if word in k[0].body
        }
        assert times["OSError"] == stdout[-1], times
        # the warning before the traceback keeps the time it was printed at
        assert times["FutureWarning"] == stderr[0], times
    # Alone, the traceback has nothing later to go by: the stamp before it.
    rollup = NodeRollup("n1", rules, Timeline())
    rollup.scan("h/0/stderr.log", None, [(stderr, LineParser().feed(stderr), None, 0)])
    [(key, group)] = [(k, g) for k, g in rollup.groups.items() if k[0].body.startswith("OSError")]
    assert time_ref(rollup, key[2], group) == stderr[0]


def test_a_ranks_buffered_steps_mark_the_timeline_by_its_own_stream(rules: StageRules) -> None:
    # torchrun's tee log: rank 0's print()ed steps, block-buffered, reach the file at exit,
    # after the agent's report of its death. The steps began no later than rank 0's own last
    # stamp (its start-up warning), not the agent's report; its lines keep the file's time.
    from l4_plugin.ingest.timeline import Timeline

    start = "[default0]:[W1127 15:57:10.732304168 socket.cpp:207] [c10d] The hostname of the client"
    agent = (
        "E1127 15:57:55.577000 4465 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 1) local_rank: 1 (pid: 4544) of binary: /venv/bin/python3"
    )
    lines = [
        "W1127 15:57:02.016000 4465 torch/distributed/run.py:874] Setting OMP_NUM_THREADS",
        start,
        agent,
        "[default0]:training from step 0 to 40, 960 samples, world 6",
        *(f"[default0]:step {i} loss 0.{i}" for i in range(1, 6)),
    ]
    rollup = NodeRollup("n1", rules, Timeline())
    rollup.scan("n1/torchrun.log", None, [(lines, LineParser().feed(lines), None, 0)])
    marks = {key: ref for key, ref in rollup.timeline.marks.items() if key[1] is not None}
    assert sorted(key[1] for key in marks) == [1, 2, 3, 4, 5]
    assert set(marks.values()) == {start}
    steps = [g for k, g in rollup.groups.items() if k[0].body.startswith("step")]
    assert steps and all(g.first_ts_ref == agent for g in steps)


@pytest.mark.parametrize(
    ("stamp", "body", "ends"),
    [
        # kubectl logs --timestamps: every line, frames too, behind the kubelet's RFC 3339 time.
        (
            "2025-04-21T15:15:34.2637{:02d}Z ",
            [
                "Traceback (most recent call last):",
                '  File "/usr/local/bin/torchrun", line 8, in <module>',
                "    sys.exit(main())",
                '  File "/usr/lib/python3/dist-packages/torch/distributed/run.py", line 919, '
                "in main",
                "    run(args)",
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            ],
            "torch.distributed.elastic.multiprocessing.errors",
        ),
        # the same of torchrun --tee's copy of a rank's own output: the kubelet's time, then
        # "[default1]:" and the rank's "[rank25]: " before each frame's indent.
        (
            "2025-10-10T19:22:26.3808{:02d}Z [default1]:[rank25]: ",
            [
                "Traceback (most recent call last):",
                '  File "/usr/local/lib/python3.10/dist-packages/torch/_utils.py", line 715, '
                "in reraise",
                "    raise exception",
                "pyarrow.lib.ArrowInvalid: Caught ArrowInvalid in DataLoader worker process 1.",
            ],
            "pyarrow.lib.ArrowInvalid: Caught ArrowInvalid",
        ),
    ],
)
def test_a_pod_logs_stamps_keep_a_traceback_one_record(
    rules: StageRules, stamp: str, body: list[str], ends: str
) -> None:
    records = _records(rules, [stamp.format(i) + line for i, line in enumerate(body)])
    assert len(records) == 1, records
    assert records[0][0].startswith(ends), records


# torchrun's failure summary (torch/distributed/elastic/multiprocessing/errors/__init__.py,
# ``_FAILURE_FORMAT_TEMPLATE``): a row "  traceback : ${message}" whose message, a rank's
# traceback, has its later lines indented two more (tests/realruns/cases, uneven-data-early-exit).
_SUMMARY = [
    "Failures:",
    "[1]:",
    "  time      : 2026-11-29_19:53:19",
    "  host      : gpu-m42",
    "  rank      : 5 (local_rank: 1)",
    "  exitcode  : 1 (pid: 27362)",
    "  error_file: /tmp/run/gpu-m42/logs/job1_5bhx65b6/attempt_0/1/error.json",
    "  traceback : Traceback (most recent call last):",
    '    File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/'
    'errors/__init__.py", line 367, in wrapper',
    "      return f(*args, **kwargs)",
    "             ^^^^^^^^^^^^^^^^^^",
    '    File "/work/train.py", line 288, in train',
    "      loss.backward()",
    "  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [10.77.0.13]:23264",
    "  ",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
]


@pytest.mark.parametrize("stamp", ["", "2026-11-29T19:53:20.7070000{:02d}Z "])
def test_a_failure_summarys_quoted_traceback_is_one_record_named_by_its_error(
    rules: StageRules, stamp: str
) -> None:
    # Plain (torchrun's stderr) and under a pod log's stamps: the quoted frames join the row
    # that opens them, and the exception, indented less than the frames, ends and names them.
    records = _records(rules, [stamp.format(i) + line for i, line in enumerate(_SUMMARY)])
    quoted = [r for r in records if "in wrapper" in r[1]]
    assert len(quoted) == 1, records
    assert quoted[0][0].startswith("RuntimeError: [<PATH>:<NUM>] Connection closed"), records
    assert "loss.backward()" in quoted[0][1] and "traceback : Traceback" in quoted[0][1]


@pytest.mark.parametrize("label", ["{r}: ", "[default{r}]:[rank{r}]: ", "[1,{r}]<stderr>:"])
def test_ranks_printing_their_tracebacks_at_once_keep_one_record_each(
    rules: StageRules, label: str
) -> None:
    # Every rank of a job failing at import writes its traceback to an unbuffered stderr at
    # the same moment; srun -l (mpirun, torchrun's --tee) interleaves them line by line
    # (tests: benchmarks/relayout.py's srun -l of a dev case). One record per rank, each named
    # by its own exception; a line of another rank neither continues nor closes it.
    body = [
        "Traceback (most recent call last):",
        '  File "/workspace/Megatron-LM/pretrain_gpt.py", line 14, in <module>',
        "    from megatron.core.models.gpt import GPTModel",
        "ImportError: /usr/lib/transformer_engine_torch.so: undefined symbol: _ZN3c10",
    ]
    lines = [label.format(r=r) + line for line in body for r in (1, 2, 3)]
    groups = [(k[0].body, g) for k, g in _scanned(rules, lines).groups.items()]
    assert [(b[:12], g.count) for b, g in groups] == [("ImportError:", 3)], groups
    for kept in groups[0][1].kept:
        assert kept.message.count("\n") == 3, kept.message
        assert kept.message.count(label.format(r=kept.rank)) == 4, kept.message


_OOM_REPORT = [
    "Mar  7 13:02:08 gpu-7 kernel: [201754.848222] Tasks state (memory values in pages):",
    "Mar  7 13:02:08 gpu-7 kernel: [201754.849222] [  pid  ]   uid  tgid total_vm      rss "
    "pgtables_bytes swapents oom_score_adj name",
    "Mar  7 13:02:08 gpu-7 kernel: [201754.850222] [ 686710]  1007  686710  61000000  58000000"
    "      480000000        0             0 python3",
    "Mar  7 13:02:08 gpu-7 kernel: [201754.851222] [2979380]     0 2979380  40000000   9001000"
    "       90000000        0         -1000 python3",
    "Mar  7 13:02:08 gpu-7 kernel: [201754.856222] oom-kill:constraint=CONSTRAINT_NONE,nodemask="
    "(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/,task=python3,pid=2979380,uid=0",
    "Mar  7 13:02:08 gpu-7 kernel: [201754.857222] Out of memory: Killed process 2979380 "
    "(python3) total-vm:160000000kB, anon-rss:36000000kB, file-rss:410000kB",
]


def test_the_oom_killers_task_table_is_one_record(rules: StageRules) -> None:
    # mm/oom_kill.c's dump_tasks: the table joins its "Tasks state" line; the kill that follows
    # is a record of its own.

    rollup = NodeRollup("n1", rules)
    rollup.scan("kern.log", None, [(_OOM_REPORT, LineParser().feed(_OOM_REPORT), None, 0)])
    messages = sorted(g.message for g in rollup.groups.values())
    assert len(messages) == 2, messages
    table, killed = sorted(messages, key=lambda m: "Tasks state" not in m)
    assert table.count("\n") == 4 and "pid=2979380,uid=0" in table
    assert "Out of memory: Killed process" in killed and "\n" not in killed


def test_rays_top_memory_users_join_its_out_of_memory_error(rules: StageRules) -> None:
    lines = [
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        "Memory on the node (IP: 10.1.2.3, ID: c66e87154965) where the task (actor ID: 41fc, "
        "pid=1042426, memory used=61.30GB) was running was 1923.40GB / 2015.50GB (0.954304), "
        "which exceeds the memory usage threshold of 0.95. Top 10 memory users:",
        "PID\tMEM(GB)\tCOMMAND",
        "366824\t1411.52\tpython3 /home/svc-old/jobs/llm-eval/run_eval.py --batch-size 64",
        "1042416\t60.01\tray::RayTrainWorker.train",
        "Refer to the documentation on how to address the out of memory issue: https://docs.ray."
        "io/en/latest/ray-core/scheduling/ray-oom-prevention.html.",
        "Training errored after 1 iterations at 2025-09-03 17:45:19.",
    ]
    rollup = NodeRollup("n1", rules)
    rollup.scan("driver.log", None, [(lines, LineParser().feed(lines), None, 0)])
    [report] = [g.message for g in rollup.groups.values() if "OutOfMemoryError" in g.message]
    assert "366824\t1411.52\tpython3" in report and "Refer to the documentation" in report
    assert "Training errored" not in report


def test_a_faulthandler_dump_is_one_record_with_the_crash_it_follows(rules: StageRules) -> None:
    # A rank of tests/realruns/cases/segfault-in-save: faulthandler (torch's @record enables
    # it) prints every thread's stack after "Fatal Python error"; none of its lines is a record
    # of its own, and its frames (innermost first, no comma) open no traceback. The line after
    # the dump is a record again; so is a stack pasted with no error before it.
    from tests.unit.test_stacks import CRASH

    for label in ("", "[default0]:"):
        lines = [label + x for x in [*CRASH.splitlines(), "training finished"]]
        rollup = NodeRollup("n1", rules)
        rollup.scan("r0.log", 0, [(lines, LineParser().feed(lines), None, 0)])
        # (an empty line is a line kind of its own, as anywhere)
        messages = {k[0].body: g.message for k, g in rollup.groups.items() if k[0].body}
        assert set(messages) == {"Fatal Python error: Segmentation fault", "training finished"}
        crash = messages["Fatal Python error: Segmentation fault"]
        assert crash == "\n".join(x for x in lines[:-1] if x != label)
    paste = CRASH.splitlines()[8:11]
    rollup = NodeRollup("n1", rules)
    rollup.scan("r0.log", 0, [(paste, LineParser().feed(paste), None, 0)])
    [group] = rollup.groups.values()
    assert group.message == "\n".join(paste)


def test_a_ray_tasks_traceback_is_one_record_named_by_its_exception(rules: StageRules) -> None:
    # Ray prints a remote task's traceback with its header replaced by where the task ran
    # (RayTaskError.__str__): "ray::Task() (pid=…, ip=…)" heads a traceback, at its start and
    # after "The above exception was the direct cause…" (verl-project/verl#6773).
    header = (
        "ray::WorkerDict.actor_rollout_init_model() (pid=4591, ip=172.36.2.44, "
        "actor_id=deebc0c1099943dc9616a62902000000)"
    )
    body = [
        header,
        '  File "/pkg/verl/utils/device.py", line 197, in get_npu_versions',
        '    result = subprocess.run(["npu-smi", "info"], check=True)',
        '  File "/usr/lib/python3.11/subprocess.py", line 571, in run',
        "    raise CalledProcessError(retcode, process.args,",
        "subprocess.CalledProcessError: Command '['npu-smi', 'info']' returned non-zero exit "
        "status 215.",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        header,
        '  File "/usr/lib/python3.11/concurrent/futures/_base.py", line 456, in result',
        "    return self.__get_result()",
        "RuntimeError: NPU versions could not be read",
    ]
    records = _records(rules, body)
    assert [k for k, _ in records] == ["RuntimeError: NPU versions could not be read"]
    message = records[0][1]
    assert message.startswith(header) and "subprocess.CalledProcessError" in message
    assert message.count(header) == 2 and "The above exception" in message
    # A paste cut off before the chain's last exception: the record is still one, named by the
    # exception that closed its first part (an error), not by a frame.
    cut = _records(rules, body[:-1])
    assert len(cut) == 1 and cut[0][0].startswith("subprocess.CalledProcessError: "), cut
    scanned = _scanned(rules, body[:-1])
    assert [k[0].level for k in scanned.groups if k[0].body.strip()] == ["ERROR"]


def test_frames_a_paste_left_unindented_are_one_traceback_and_an_error(rules: StageRules) -> None:
    # deepspeedai/DeepSpeed#7833: a traceback quoted without its header, its frames dedented,
    # cut off at its last frame (no exception printed): one record, an error's report.
    body = [
        'File "/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2365, in '
        "_take_model_step",
        "  self.optimizer.step()",
        'File "/venv/lib/python3.10/site-packages/deepspeed/runtime/bf16_optimizer.py", line 394,'
        " in get_grads_for_norm",
        "  tensor_mp_rank = bwc_tensor_model_parallel_rank(mpu=self.mpu)",
        'File "/venv/lib/python3.10/site-packages/deepspeed/utils/bwc.py", line 42, in '
        "bwc_tensor_model_parallel_rank",
    ]
    scanned = _scanned(rules, body)
    records = [(k[0], g.message) for k, g in scanned.groups.items()]
    assert len(records) == 1, records
    kind, message = records[0]
    assert kind.level == "ERROR" and message == "\n".join(body)
    # closed by its exception, the record is named by it
    named = _records(rules, [*body, "AttributeError: 'module' has no attribute 'get_rank'"])
    assert [k for k, _ in named] == ["AttributeError: 'module' has no attribute 'get_rank'"]
    # a line that only names a file is no frame
    assert len(_records(rules, ['File "a.txt" not found', "  retrying"])) == 2


def test_a_notebooks_traceback_is_one_record_named_by_its_exception(rules: StageRules) -> None:
    # unslothai/unsloth#724, IPython 8's frames ("Cell In[8], line 1", "File …:36, in f"), and
    # IPython 7's ("<ipython-input-5-…> in <module>", "/usr/lib/…/client.py in f(a)")
    new = [
        "RuntimeError                              Traceback (most recent call last)",
        "Cell In[8], line 1",
        "----> 1 trainer_stats = trainer.train()",
        "",
        "File <string>:36, in train(self, resume_from_checkpoint, trial, **kwargs)",
        "",
        "RuntimeError: Unsloth currently does not work on multi GPU setups",
    ]
    old = [
        "Fault                                     Traceback (most recent call last)",
        "<ipython-input-5-366cceb6869e> in <module>",
        '----> 1 server.get_licenses("not-existing-id")',
        "",
        "/usr/lib/python3.9/xmlrpc/client.py in __call__(self, *args)",
        "   1115     def __call__(self, *args):",
        "-> 1116         return self.__send(self.__name, args)",
        "",
        "Fault: <Fault: 'no such license'>",
    ]
    for lines in (new, old):
        records = _records(rules, lines)
        assert [k for k, _ in records] == [lines[-1]], records
        assert records[0][1] == "\n".join(lines)
    # the same frames' shapes after an ordinary line are lines of their own
    assert len(_records(rules, ["INFO starting", "Cell In[8], line 1"])) == 2


def test_frames_a_paste_left_out_do_not_cut_its_traceback(rules: StageRules) -> None:
    # NVIDIA-NeMo (hub download race, a real-extra paste): "..." where frames were left out, the
    # chain cut off before its last exception: one record, named by the exception it printed.
    body = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.8/shutil.py", line 791, in move',
        "    os.rename(src, real_dst)",
        "FileNotFoundError: [Errno 2] No such file or directory: '/root/.cache/vocab.tmp'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "megatron_gpt_prompt_learning.py", line 91, in main',
        "...",
        '  File "/opt/NeMo/nemo/collections/nlp/modules/common/megatron/megatron_utils.py", line '
        "211, in _download",
        "    wget.download(url, path)",
    ]
    records = _records(rules, body)
    assert len(records) == 1, records
    kind, message = records[0]
    assert kind.startswith("FileNotFoundError: ") and "\n...\n" in message
    assert message.startswith(body[0]) and message.endswith(body[-1])


def test_a_shifted_pastes_exception_still_ends_its_traceback(rules: StageRules) -> None:
    # (a torchtitan paste, its first line's indent lost, the rest shifted right) the exception is
    # indented too, but less than the source line above it: it ends the traceback, and the
    # progress line after it is a line of its own.
    body = [
        'File "/pkg/torch/distributed/checkpoint/_state_dict_stager.py", line 320, in deepcopy',
        "      y = self._deepcopy_dispatch[type](x, memo)",
        "          ~~~~~~~~~~~~~~~~~~~~~~~^^^^^^",
        "  KeyError: <class 'type'>",
        "[rank0]:[titan] 2026-06-01 13:33:57,903 - root - INFO - step: 19  loss:  3.01032",
    ]
    records = _records(rules, body)
    assert records[0][0] == "KeyError: <class 'type'>", records
    assert records[0][1] == "\n".join(body[:4]) and len(records) == 2
    # a source line deeper than its frame, whatever it names, stays the frame's
    deeper = [*body[:2], "        ValueError: not an exception's line", "ValueError: bad"]
    assert [k for k, _ in _records(rules, deeper)] == ["ValueError: bad"]
