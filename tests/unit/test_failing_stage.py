"""The failing stage: the markers, then the failing record's frames and words (shipped rules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from l4_plugin.analysis.failing_stage import failing_stage
from l4_plugin.analysis.results import StageResult, StageSpan
from l4_plugin.analysis.tables import Cell, JobData, JobDoc, TemplateInfo
from l4_plugin.analysis.temporal import StageAnalyzer
from l4_plugin.errors import ConfigError
from l4_plugin.ingest.stages import StageRules, default_stage_rules
from l4_plugin.records import STAGE_ORDER

RULES = default_stage_rules()


def _data(
    lines: list[tuple[str, str]], spans: dict[tuple[str, str], tuple[float, float]] | None = None
) -> JobData:
    """One node's lines in order (template id, text); positions are line numbers."""
    cells = {("n", t): Cell(1, float(i), float(i), float(i)) for i, (t, _) in enumerate(lines)}
    spans = spans or {("n", "init"): (0.0, float(len(lines)))}
    return JobData(
        job=JobDoc("j", "failed", "fp", ("n",), len(lines), None, None),
        time_unit="position",
        cells=cells,
        templates={t: TemplateInfo(text=x, message=x) for t, x in lines},
        stage_spans={k: (a, b, a, b) for k, (a, b) in spans.items()},
        iteration_cells={},
        iteration_spans={},
        node_iteration_start={},
        node_last_iteration={},
    )


def _marked(stage: str) -> StageResult:
    return StageResult(stage=stage, order=STAGE_ORDER, nodes=(), lagging=())


def test_init_spans_of_quiet_files_do_not_outvote_the_markers() -> None:
    # Three nodes' ranks trained; their kernel logs (and a fourth node whose files print no
    # progress) sit in init until after the failure.
    spans = []
    for n in ("a", "b", "c"):
        spans += [
            StageSpan(n, "init", 0, 900),
            StageSpan(n, "training", 10, 800),
        ]
    spans += [StageSpan("d", "init", 0, 900)]
    res = StageAnalyzer(order=STAGE_ORDER, default="init").fit(spans).result_
    assert res.stage == "training" and res.lagging == ("d",)
    assert {n.node: n.last_stage for n in res.nodes}["a"] == "training"
    # Without a default stage the kernel logs' spans win, as the plain rule says.
    plain = StageAnalyzer(order=STAGE_ORDER).fit(spans).result_
    assert plain.stage == "init"


def test_a_dataloader_failure_inside_training_is_data_loading() -> None:
    tb = (
        'File "/workspace/train.py", line 541, in train_one_epoch\n'
        "    for step, batch in enumerate(train_loader):\n"
        'File "/env/site-packages/torch/utils/data/dataloader.py", line 1448, in _next_data\n'
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."
    )
    data = _data([("tb", tb)], {("n", "init"): (0, 1), ("n", "training"): (1, 9)})
    assert failing_stage(data, _marked("training"), ["tb"], RULES) == "data_loading"
    # A failure in the training step's own frames stays in training.
    step = (
        'File "/workspace/train.py", line 90, in train_step\n    loss.backward()\nRuntimeError: x'
    )
    data = _data([("tb", step)], {("n", "init"): (0, 1), ("n", "training"): (1, 9)})
    assert failing_stage(data, _marked("training"), ["tb"], RULES) == "training"


def test_a_teardowns_stack_names_no_stage_the_job_failed_in() -> None:
    # tests/realruns/cases/straggler: torchrun's SIGTERM at the wall-clock limit stopped the
    # DataLoader workers; their iterators' __del__ printed tracebacks in dataloader.py. A
    # consequence's stack: the job stays in training; the same record, no consequence, is a
    # failure in data loading.
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1704,'
        " in __del__\n    self._shutdown_workers()\n"
        '  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1654,'
        " in _shutdown_workers\n    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)\n"
        "RuntimeError: DataLoader worker (pid 7323) is killed by signal: Terminated."
    )
    spans = {("n", "init"): (0, 1), ("n", "training"): (1, 9)}
    data = _data([("tb", tb)], spans)
    teardown = frozenset({"tb"})
    assert failing_stage(data, _marked("training"), ["tb"], RULES, None, teardown) == "training"
    assert failing_stage(data, _marked("training"), ["tb"], RULES) == "data_loading"


def test_a_dataloader_failure_after_a_saves_marker_is_data_loading() -> None:
    # NVIDIA/Megatron-LM#5: saved, then evaluated; the validation iterator ran dry. A save's
    # own stack after its marker stays checkpointing.
    tb = (
        'File "pretrain_bert.py", line 189, in get_batch\n    data = next(data_iterator)\n'
        'File "/env/site-packages/torch/utils/data/dataloader.py", line 794, in __next__\n'
        "    raise StopIteration\nStopIteration"
    )
    spans = {("n", "init"): (0, 1), ("n", "checkpointing"): (1, 9)}
    data = _data([("tb", tb)], spans)
    assert failing_stage(data, _marked("checkpointing"), ["tb"], RULES) == "data_loading"
    save = 'File "/m/checkpointing.py", line 9, in save_checkpoint\nOSError: [Errno 28] x'
    data = _data([("tb", save)], spans)
    assert failing_stage(data, _marked("checkpointing"), ["tb"], RULES) == "checkpointing"
    step = 'File "/workspace/train.py", line 90, in build_model\nRuntimeError: x'
    data = _data([("tb", step)], spans)
    assert failing_stage(data, _marked("checkpointing"), ["tb"], RULES) == "checkpointing"


def test_loading_the_data_or_the_model_is_what_the_failing_record_names() -> None:
    # open-mmlab/mmdetection#1997: the weights loaded (the last marker model loading's), the
    # annotations indexed, then a DataLoader worker's bus error; a state dict that does not fit
    # after the data's marker is the model's. Other words keep the marker's stage.
    bus = "ERROR: Unexpected bus error encountered in worker. This might be caused by shm."
    spans = {("n", "init"): (0, 1), ("n", "model_loading"): (1, 9)}
    assert failing_stage(_data([("e", bus)], spans), _marked("model_loading"), ["e"], RULES) == (
        "data_loading"
    )
    fit = "RuntimeError: Error(s) in loading state_dict for GPT: size mismatch for wte"
    spans = {("n", "init"): (0, 1), ("n", "data_loading"): (1, 9)}
    assert failing_stage(_data([("e", fit)], spans), _marked("data_loading"), ["e"], RULES) == (
        "model_loading"
    )
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert failing_stage(_data([("e", ecc)], spans), _marked("data_loading"), ["e"], RULES) == (
        "data_loading"
    )


def test_the_kernels_lines_before_a_ranks_traceback_do_not_hide_its_stack() -> None:
    # Lustre: the kernel's eviction and its lost connection lead; the rank's traceback in the
    # checkpoint writer's frames says the job was saving.
    tb = (
        'File "/env/site-packages/torch/distributed/checkpoint/filesystem.py", line 420, in '
        "write_data\nOSError: [Errno 108] Cannot send after transport endpoint shutdown"
    )
    lines = [
        ("evict", "LustreError: 167-0: fs-OST001f-osc: This client was evicted by fs-OST001f"),
        ("lost", "Lustre: fs-OST001f-osc: Connection to fs-OST001f was lost"),
        ("tb", tb),
    ]
    data = _data(lines, {("n", "init"): (0, 1), ("n", "training"): (1, 9)})
    data = replace(data, job=replace(data.job, system_templates=frozenset({"evict", "lost"})))
    assert failing_stage(data, _marked("training"), ["evict", "lost", "tb"], RULES) == (
        "checkpointing"
    )


def test_a_pasted_traceback_names_its_stage_by_its_innermost_frame() -> None:
    tb = (
        'File "finetune.py", line 272, in train\n'
        "    model.save_checkpoint(args.output_dir, global_step)\n"
        'File "/env/dist-packages/deepspeed/comm/comm.py", line 526, in all_reduce'
    )
    assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == "checkpointing"


def test_building_the_model_or_its_optimizer_is_model_loading() -> None:
    # NVIDIA/TransformerEngine#1123: Megatron-core builds each submodule from its spec
    # (spec_utils.build_module); an optimizer built before training (DeepSpeed's
    # _configure_optimizer, Lightning's configure_optimizers) is the same set-up.
    for frame in ("build_module", "_configure_optimizer", "configure_optimizers"):
        tb = (
            f'File "./Megatron-LM/megatron/core/transformer/spec_utils.py", line 99, in {frame}\n'
            "    return module(\n"
            "AssertionError: FlashAttention maximum version 2.5.8 is supported."
        )
        assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == "model_loading"


@pytest.mark.parametrize(
    ("frame", "error"),
    [
        # Lightning-AI/pytorch-lightning#10379: metrics synced as they are logged (1.5's names)
        (
            'File "/env/site-packages/pytorch_lightning/utilities/distributed.py", line 158, in '
            "sync_ddp_if_available",
            "RuntimeError: Tensors must be CUDA and dense",
        ),
        # modelscope/ms-swift#10183: DDP broadcasting its buffers before a forward
        (
            'File "/env/site-packages/torch/nn/parallel/distributed.py", line 2231, in '
            "_sync_buffers",
            "RuntimeError: Detected mismatch between collectives on ranks.",
        ),
        # facebookresearch/fairscale#364: OSS clipping the gradients of an empty shard
        (
            'File "/env/site-packages/fairscale/optim/oss.py", line 284, in clip_grad_norm',
            "RuntimeError: stack expects a non-empty TensorList",
        ),
        # verl-project/verl#772: the RL trainer's validation inside its loop (fit → _validate),
        # failing in vLLM's scheduler
        (
            'File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 566, in _validate\n'
            "    test_output_gen_batch = generation_manager.run_llm_loop(\n"
            '  File "/env/site-packages/vllm/v1/request.py", line 98, in append_output_token_ids',
            "AttributeError: 'numpy.ndarray' object has no attribute 'extend'",
        ),
        # deepspeedai/DeepSpeed#7636: ZeRO's hook reducing gradients as the backward makes them
        (
            'File "/src/DeepSpeed/deepspeed/runtime/zero/stage_1_and_2.py", line 985, in '
            "grad_handling_hook\n    self.process_gradients(param, i)\n"
            '  File "/src/DeepSpeed/deepspeed/runtime/base_optimizer.py", line 70, in '
            "report_ipg_memory_usage",
            "KeyError: torch.bfloat16",
        ),
        # deepspeedai/DeepSpeed#3005: activation checkpointing partitioning a forward's
        # activations (no checkpoint saved or loaded)
        (
            'File "/deepspeed/runtime/activation_checkpointing/checkpointing.py", line 421, in '
            "partition_activations",
            "IndexError: list index out of range",
        ),
        # pytorch/torchtitan#774: a pipeline schedule stepping its microbatches
        (
            'File "/env/site-packages/torch/distributed/pipelining/schedules.py", line 1251, in '
            "_step_microbatches",
            "KeyError: 6",
        ),
    ],
)
def test_a_step_of_syncs_buffers_and_pipelines_is_training(frame: str, error: str) -> None:
    tb = f"{frame}\n    x = y\n{error}"
    assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == "training"


def test_a_workers_model_initialisation_is_model_loading() -> None:
    # verl-project/verl#6773: a Ray worker's init_model (the task's name in Ray's header, and
    # a frame of OpenRLHF's and verl's workers)
    for tb in (
        "ray::WorkerDict.actor_rollout_init_model() (pid=4591, ip=172.36.2.44)\n"
        '  File "/pkg/verl/utils/device.py", line 197, in get_npu_versions\n'
        "subprocess.CalledProcessError: Command '['npu-smi']' returned non-zero exit status 215.",
        'File "/pkg/openrlhf/trainer/ray/ppo_actor.py", line 77, in init_model_from_pretrained\n'
        "    x = y\nRuntimeError: boom",
    ):
        assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == (
            "model_loading"
        )


def test_a_jit_built_op_is_set_up_with_the_model() -> None:
    # DeepSpeed builds its optimizer's ops with torch.utils.cpp_extension as the engine starts:
    # OpenRLHF/OpenRLHF#208 (its lock held), deepspeedai/DeepSpeed#5627 (no ninja on a node).
    for line in (
        "Using <PATH> as PyTorch extensions root...",
        "Building extension module cpu_adam...",
        "Loading extension module fused_adam...",
    ):
        assert RULES.marker_stage(line) == "model_loading"
    # QwenLM/Qwen#1125, pytorch/pytorch#69746: the build's own failure, alone
    for words in (
        "nvcc fatal   : Unsupported gpu architecture 'compute_89'",
        "RuntimeError: Error building extension 'fused_adam'",
        "ninja: build stopped: subcommand failed.",
    ):
        assert RULES.stage_of_words(words) == "model_loading"
    # Triton compiling a kernel at a step's first call is no such build
    assert RULES.stage_of_words("ptxas fatal   : Value 'sm_100' is not defined") is None


def test_rich_frames_printed_above_the_error_count() -> None:
    # accelerate launch prints a rich traceback: the frames are lines of their own above it.
    lines = [
        ("f1", "│ /env/dist-packages/accelerate/accelerator.py:949 in _prepare_one │"),
        ("f2", "│ /env/dist-packages/torch/nn/modules/module.py:989 in _apply │"),
        ("err", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    ]
    assert failing_stage(_data(lines), _marked("init"), ["err"], RULES) == "model_loading"


def test_a_failure_right_after_the_init_banner_is_in_init() -> None:
    lines = [
        ("banner", "NET/IB : Using [<NUM>]mlx5_0:<NUM>/IB ; OOB eth0:<IP><<NUM>>"),
        ("err", "NET/IB : Got completion from peer <IP><<NUM>> with error <NUM>, opcode <NUM>"),
    ]
    assert failing_stage(_data(lines), _marked("init"), ["err"], RULES) == "init"
    # Without the banner, an IB completion error strikes a job moving data: training.
    assert failing_stage(_data(lines[1:]), _marked("init"), ["err"], RULES) == "training"


def test_a_job_that_saved_a_step_before_failing_was_training() -> None:
    # NeMo: start-up lines, then saves of steps 9 and 19 (its bar had drawn no line yet), then
    # Slurm's preemption a few lines on: past start-up, however near its banner.
    lines = [
        ("banner", "NET/IB : Using [<NUM>]mlx5_0:<NUM>/IB ; OOB eth0:<IP><<NUM>>"),
        ("cancel", "slurmstepd: error: *** STEP 7.0 ON n CANCELLED AT <TS> DUE TO PREEMPTION ***"),
    ]
    data = _data(lines)
    assert failing_stage(data, _marked("init"), ["cancel"], RULES) == "init"
    saved = (
        "[NeMo I 2025-06-06 17:56:15 nemo_model_checkpoint:497] Scheduled async checkpoint save"
        " for /ckpt/model_name=0--step=19-last"
    )
    trained = replace(data, step_lines=((0.5, saved),))
    assert failing_stage(trained, _marked("init"), ["cancel"], RULES) == "training"
    # a resume's load of step 19 (start-up states a step too), or a save after the failure
    loaded = "loading checkpoint from /ckpt at iteration 19"
    for step_lines in (((0.5, loaded),), ((1.5, saved),)):
        other = replace(data, step_lines=step_lines)
        assert failing_stage(other, _marked("init"), ["cancel"], RULES) == "init"


@pytest.mark.parametrize(
    ("words", "stage"),
    [
        ("INFO: task python:280058 blocked for more than 120 seconds.", "training"),
        (
            "[Rank 12] Process group watchdog thread terminated with exception: CUDA error: "
            "uncorrectable ECC error encountered",
            "training",
        ),
        ("torch.distributed.DistNetworkError: ... name: EADDRINUSE", "init"),
        # shibing624/MedicalGPT#23: a kernel's failed assertion, then the error it caused
        (
            "../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: "
            "[420,0,0], thread: [29,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
            "training",
        ),
        ("RuntimeError: CUDA error: device-side assert triggered", "training"),
        # KellerJordan/modded-nanogpt#61: more ranks than GPUs; CUDA's hint on device-side
        # assertions, which ends every CUDA error, says nothing of the stage
        (
            "RuntimeError: CUDA error: invalid device ordinal\nCompile with `TORCH_USE_CUDA_DSA`"
            " to enable device-side assertions.",
            "init",
        ),
        (
            "RuntimeError: CUDA error: an unknown failure\nCompile with `TORCH_USE_CUDA_DSA` to "
            "enable device-side assertions.",
            "init",
        ),
        # tensorflow/tpu#785: TPUEstimator's training loop recording a TPU's error
        (
            "ERROR:tensorflow:Error recorded from training_loop: From /job:worker/replica:0/"
            "task:0:",
            "training",
        ),
        # the host's memory running out under a running job: IBM/FfDL#127 (a shell's report),
        # Ray's raylet (vllm-project/vllm's colocated rollout), the kernel, a launcher
        (
            "/usr/local/bin/train.sh: line 18:    36 Killed                  python3 train.py",
            "training",
        ),
        (
            "(raylet) 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
            "crashed due to other reasons at node",
            "training",
        ),
        ("Out of memory: Killed process 4242 (python) total-vm:1234kB", "training"),
        ("torch.distributed.elastic: failed (exitcode: -9) local_rank: 3 (pid: 77)", "training"),
        # EveryVoiceTTS/EveryVoice#178: the device's memory run out, no frame printed
        (
            "OutOfMemoryError: CUDA out of memory. Tried to allocate 112.00 MiB. GPU 2 has a",
            "training",
        ),
        # intelligent-machine-learning/dlrover's error collection: a GPU's NVLink failing
        (
            "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
            "training",
        ),
        # huggingface/m4-logs tr_141: a node of the allocation lost, as srun and slurmstepd say
        ("srun: error: Node failure on jean-zay-iam37", "training"),
        (
            "slurmstepd: error: *** STEP 1943824.0 ON jean-zay-iam17 CANCELLED AT "
            "2023-03-06T03:17:51 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
            "training",
        ),
        # xljh0520/JOTR#4: ranks in different all_gathers (TORCH_DISTRIBUTED_DEBUG=DETAIL)
        (
            "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
            "inconsistent collective: CollectiveFingerPrint(OpType=ALLGATHER, TensorShape",
            "training",
        ),
        # verl-project/verl#575: vLLM's allocator waking up its memory, its own words
        (
            "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
            "training",
        ),
        # bigscience-workshop/bigscience tr11-176B-ml: NCCL's watchdog thread finding a GPU's
        # work failed (its C++ frames)
        (
            "  what():  CUDA error: unknown error\nframe #1: c10d::ProcessGroupNCCL::WorkNCCL::"
            "finishedGPUExecutionInternal() const + 0x11a (0x15190c6c29ea in libtorch_cuda.so)",
            "training",
        ),
        # huggingface/pytorch-image-models#693: a checkpoint renamed into place
        (
            "FileNotFoundError: [Errno 2] No such file or directory: "
            "'output/effnet_b0.txt/tmp.pth.tar' -> 'output/effnet_b0.txt/last.pth.tar'",
            "checkpointing",
        ),
        # tatsu-lab/stanford_alpaca#65: FSDP gathering a full state dict to save it
        (
            "/env/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py:2224: "
            "UserWarning: Failed to clone() tensor with name lm_head.weight. This may mean that "
            "this state_dict entry could point to invalid memory regions",
            "checkpointing",
        ),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'", "init"),
        # pytorch/pytorch#973: DataLoader workers passing tensors past the open-file limit
        ("RuntimeError: received 0 items of ancdata", "data_loading"),
        ("something odd", "init"),
    ],
)
def test_the_failing_records_words(words: str, stage: str) -> None:
    assert failing_stage(_data([("e", words)]), _marked("init"), ["e"], RULES) == stage


def test_no_reader_keeps_the_markers() -> None:
    assert failing_stage(_data([("e", "x")]), _marked("init"), ["e"], None) == "init"
    assert failing_stage(_data([("e", "x")]), None, ["e"], RULES) is None


def test_marker_and_words_of_the_shipped_rules() -> None:
    assert RULES.marker_stage("NET/Socket : Using [<NUM>]eth0:<IP><<NUM>>") == "init"
    assert RULES.marker_stage("Got completion from peer") is None
    # CASIA-LMC-Lab/AnomalyGPT#43: killed while loading the language model it announced
    assert RULES.marker_stage("Initializing language decoder from <PATH> ...") == "model_loading"
    assert RULES.marker_stage("Loading pretrained weights from <PATH>") == "model_loading"
    assert RULES.marker_stage("Loading dataset from <PATH>") is None
    assert RULES.stage_of_words("NCCL WARN NET/IB : mlx5_5:1 Got async event : port error") == (
        "training"
    )
    # NVIDIA/Isaac-GR00T#243: DDP's reducer on parameters the forward pass left out
    assert RULES.stage_of_words(
        "RuntimeError: Expected to have finished reduction in the prior iteration before "
        "starting a new one."
    ) == ("training")
    # modelscope/ms-swift#5808: torch.load refusing what a resumed checkpoint holds
    assert RULES.stage_of_words("_pickle.UnpicklingError: Weights only load failed.") == (
        "model_loading"
    )
    # huggingface/transformers#20988: the Trainer removing checkpoints past save_total_limit
    assert (
        RULES.marker_stage("Deleting older checkpoint [<PATH>] due to args.save_total_limit")
        == "checkpointing"
    )


def test_frame_entries_are_validated(tmp_path: Path) -> None:
    bad = tmp_path / "stages.yaml"
    bad.write_text("frames:\n  - {stage: training, pattern: 'x', words: often}\n", "utf-8")
    with pytest.raises(ConfigError, match=r"stages.yaml: frames\[0\]: keys are stage, pattern"):
        StageRules.load(bad)


def test_a_restart_after_a_failure_in_training_is_not_a_start_up_failure() -> None:
    # torchrun restarted the workers after a node crashed in training: the ranks printed
    # start-up markers again, so the markers' vote says data_loading.
    data = _data(
        [("mce", "Kernel panic - not syncing: Fatal machine check"), ("ib", "port error")],
        {("n", "training"): (0, 5), ("n", "data_loading"): (6, 9)},
    )
    printed = {"mce": "init", "ib": "training"}
    assert failing_stage(data, _marked("data_loading"), ["mce", "ib"], RULES, printed) == (
        "training"
    )
    # A failure that began in start-up stays there.
    assert failing_stage(data, _marked("data_loading"), ["mce"], RULES, {"mce": "init"}) == (
        "data_loading"
    )


def test_a_kernel_line_of_its_own_starts_a_slowdown() -> None:
    # gen3's thermal straggler: the whole job slows from iteration 5; the only local evidence is
    # the throttled CPU's kernel line on node c, repeated from about then.
    from l4_plugin.analysis.params import DEFAULT_OPTIONS
    from l4_plugin.analysis.recipe import _slowdown

    nodes = ("a", "b", "c", "d")
    secs = {(n, b): (10.0 if b < 5 else 20.0) for n in nodes for b in range(10)}
    starts, t = {}, 0.0
    for b in range(10):
        for n in nodes:
            starts[(n, b)] = t
        t += 10.0 if b < 5 else 20.0
    cells = {(n, "step"): Cell(10, 0.0, t, 0.0) for n in nodes}
    cells[("c", "therm")] = Cell(4, 52.0, 150.0, 0.0)
    data = JobData(
        job=JobDoc("j", "failed", "fp", nodes, 100, 0.0, t, system_templates=frozenset({"therm"})),
        time_unit="ts",
        cells=cells,
        templates={"step": TemplateInfo("step <NUM> | loss"), "therm": TemplateInfo("CPU temp")},
        stage_spans={(n, "training"): (0.0, t, 0.0, 9.0) for n in nodes},
        iteration_cells={(b, "step"): (starts[("a", b)], 4) for b in range(10)},
        iteration_spans={b: 1 for b in range(10)},
        node_iteration_start=starts,
        node_last_iteration={n: 9 for n in nodes},
        node_iteration_seconds=secs,
    )
    found = _slowdown(data, frozenset({"step", "therm"}), 4, DEFAULT_OPTIONS)
    assert found is not None and found.first_iteration == 5
    assert found.events == ("therm",) and found.nodes == ("c",)
    # torchtitan states tokens per second, no seconds per step: the job's clock alone tells
    # (over two buckets: the onset bucket's pace reaches into the next).
    clock = replace(data, node_iteration_seconds={})
    found = _slowdown(clock, frozenset({"step", "therm"}), 4, DEFAULT_OPTIONS)
    assert found is not None and found.first_iteration == 4
    assert found.events == ("therm",)
    # ... by more than the clock can resolve (40 ms steps a third slower: stamps' jitter)
    fast = {(n, b): 0.04 * b if b < 4 else 0.16 + 0.06 * (b - 4) for n in nodes for b in range(10)}
    assert (
        _slowdown(replace(clock, node_iteration_start=fast), frozenset(), 4, DEFAULT_OPTIONS)
        is None
    )
    # ... when it lasts: a clock that slows only over the last buckets (retries before a link
    # gives up) is how the job ended.
    late = {
        (n, b): (10.0 * b if b < 8 else 80.0 + 40.0 * (b - 8)) for n in nodes for b in range(10)
    }
    assert (
        _slowdown(replace(clock, node_iteration_start=late), frozenset(), 4, DEFAULT_OPTIONS)
        is None
    )
    # A steady clock is no slowdown.
    steady = {(n, b): 10.0 * b for n in nodes for b in range(10)}
    assert (
        _slowdown(replace(clock, node_iteration_start=steady), frozenset(), 4, DEFAULT_OPTIONS)
        is None
    )


def test_a_clock_read_over_buckets_that_do_not_hold_whole_intervals_is_steady() -> None:
    # torchtitan's line every 10 steps, 4.35 s a step, a 40 s save every 250, in buckets of 12
    # (1, 13, 25, …): a bucket starts with its first line, 20 or 30 steps after the one two
    # buckets before. Over two buckets the pace alternates 3.6 / 5.4 s, the saves lift a few,
    # and a slowdown seems to begin at a save; per progress line between (the buckets' counts
    # of them) it is steady. A real one (6 s a step from step 400) still shows.
    from l4_plugin.analysis.params import DEFAULT_OPTIONS
    from l4_plugin.analysis.recipe import _slowdown

    buckets = range(1, 770, 12)

    def started(pace: Callable[[int], float]) -> dict[tuple[str, int], float]:
        line = [0.0]
        for step in range(1, 780):
            line.append(line[-1] + pace(step))
        return {("a", b): line[-(-b // 10) * 10] for b in buckets}

    steady = started(lambda step: 4.35 + (40.0 if step % 250 == 0 else 0.0))
    data = JobData(
        job=JobDoc("j", "failed", "fp", ("a",), 100, 0.0, 4000.0),
        time_unit="ts",
        cells={},
        templates={"step": TemplateInfo("step: <NUM> loss")},
        stage_spans={},
        # (the bucket's progress lines: one or two)
        iteration_cells={
            (b, "step"): (steady[("a", b)], len(range(-(-b // 10) * 10, b + 12, 10)))
            for b in buckets
        },
        iteration_spans=dict.fromkeys(buckets, 12),
        node_iteration_start=steady,
        node_last_iteration={"a": 780},
    )
    assert _slowdown(data, frozenset(), 1, DEFAULT_OPTIONS) is None
    slowed = started(lambda step: (4.35 if step < 400 else 6.0) + (40.0 if step % 250 == 0 else 0))
    found = _slowdown(replace(data, node_iteration_start=slowed), frozenset(), 1, DEFAULT_OPTIONS)
    assert found is not None and 340 <= found.first_iteration <= 400


def test_only_the_roots_stack_names_the_stage() -> None:
    # A node crashed (kernel lines, no stack); ranks elsewhere failed in reaction wherever they
    # were, one of them inside its DataLoader: that stack is not where the job failed.
    lines = [(f"k{i}", f"kernel: soft lockup - CPU#{i} stuck for 23s!") for i in range(3)]
    lines.append(("peer", 'File "x/torch/utils/data/dataloader.py", line 1, in _next_data'))
    failing = [t for t, _ in lines]
    assert failing_stage(_data(lines), _marked("init"), failing, RULES) == "training"


def test_a_kernel_line_is_a_stream_of_its_own() -> None:
    # The kernel's machine-check line sits near the training log's start-up lines only by the
    # accident of line numbers in two files: no start-up marker "just before" it.
    lines = [
        ("rdzv", "[default] Rendezvous'ing worker group"),
        ("mce", "mce: [Hardware Error]: CPU 78: Machine Check Exception: 5 Bank 8"),
    ]
    data = _data(lines)
    assert failing_stage(data, _marked("init"), ["mce"], RULES) == "init"
    kernel = replace(data, job=replace(data.job, system_templates=frozenset({"mce"})))
    assert failing_stage(kernel, _marked("init"), ["mce"], RULES) == "training"


def test_a_rate_averaged_since_the_start_is_no_slowdown_when_the_clock_disagrees() -> None:
    # tqdm's s/it averaged since the start: one long checkpoint save at bucket 5 lifts it for
    # the rest of the job, while the bars' own times show the old pace after one slow bucket.
    from l4_plugin.analysis.params import DEFAULT_OPTIONS
    from l4_plugin.analysis.recipe import _slowdown

    nodes = ("a", "b")
    starts, t = {}, 0.0
    for b in range(12):
        for n in nodes:
            starts[(n, b)] = t
        t += 10.0 + (90.0 if b == 5 else 0.0)
    stated = {(n, b): (10.0 if b < 6 else 16.0 - 0.3 * (b - 6)) for n in nodes for b in range(12)}
    cells = {(n, "step"): Cell(12, 0.0, t, 0.0) for n in nodes}
    data = JobData(
        job=JobDoc("j", "failed", "fp", nodes, 100, 0.0, t),
        time_unit="ts",
        cells=cells,
        templates={"step": TemplateInfo("step <NUM> | loss")},
        stage_spans={(n, "training"): (0.0, t, 0.0, 11.0) for n in nodes},
        iteration_cells={(b, "step"): (starts[("a", b)], 2) for b in range(12)},
        iteration_spans={b: 1 for b in range(12)},
        node_iteration_start=starts,
        node_last_iteration={n: 11 for n in nodes},
        node_iteration_seconds=stated,
    )
    assert _slowdown(data, frozenset({"step"}), 2, DEFAULT_OPTIONS) is None


def _stated_job(
    stated: dict[int, float], starts: dict[int, float], training: dict[str, float]
) -> JobData:
    """One node ("a") printing a marker line per bucket of 10 iterations and stating its
    duration; ``training``: each node's first line of the training stage."""
    end = max(starts.values()) + 100.0
    return JobData(
        job=JobDoc("j", "failed", "fp", tuple(training), 100, 0.0, end),
        time_unit="ts",
        cells={("a", "step"): Cell(len(stated), 0.0, end, 0.0)},
        templates={"step": TemplateInfo("step <NUM> loss <NUM> step_time <NUM>s")},
        stage_spans={(n, "training"): (t, end, 0.0, 1.0) for n, t in training.items()},
        iteration_cells={(b, "step"): (starts[b], 1) for b in stated},
        iteration_spans=dict.fromkeys(stated, 10),
        node_iteration_start={("a", b): t for b, t in starts.items()},
        node_last_iteration={"a": max(stated) + 9},
        node_iteration_seconds={("a", b): s for b, s in stated.items()},
    )


def test_stated_durations_slow_down_though_the_borrowed_clock_shows_no_pace() -> None:
    # Progress lines with no stamp of their own (a bar, NeMo's step lines) take the last stamped
    # line's: most buckets start when the one before did, and the few that advance (a stamped
    # save every fifth bucket) show one steady "pace". The stated durations double from bucket
    # 200 on: the clock cannot tell, so it does not veto the slowdown.
    from l4_plugin.analysis.params import DEFAULT_OPTIONS
    from l4_plugin.analysis.recipe import _slowdown

    buckets = range(0, 400, 10)
    stated = {b: 5.0 if b < 200 else 10.0 for b in buckets}
    starts = {b: 1000.0 + 300.0 * (b // 50) for b in buckets}
    data = _stated_job(stated, starts, {"a": 1000.0})
    found = _slowdown(data, frozenset({"step"}), 1, DEFAULT_OPTIONS)
    assert found is not None and found.first_iteration == 200
    # a clock that times every bucket, at the old pace throughout, still says no
    steady = {b: 1000.0 + 50.0 * (b // 10) for b in buckets}
    assert (
        _slowdown(
            replace(data, node_iteration_start={("a", b): t for b, t in steady.items()}),
            frozenset({"step"}),
            1,
            DEFAULT_OPTIONS,
        )
        is None
    )


def test_buckets_are_timed_from_the_training_start_of_the_nodes_that_state_durations() -> None:
    # Two nodes that print no progress first print a line of the training stage in the job's
    # teardown, hours later: the buckets start when the stating node began training.
    from l4_plugin.analysis.recipe import _bucket_times

    its = [0, 10, 20]
    stated = dict.fromkeys(its, 4.0)
    data = _stated_job(stated, dict.fromkeys(its, 500.0), {"a": 1000.0, "b": 9000.0, "c": 9000.0})
    assert _bucket_times(data, its, [4.0] * 3) == {0: 1000.0, 10: 1040.0, 20: 1080.0}


def test_a_rate_averaged_since_the_start_with_stalls_is_no_slowdown() -> None:
    # A Ray/HF bar's s/it averaged since the start, read once per step, no timestamps: a
    # checkpoint save at steps 11 and 21 lifts it, and it falls back step after step. The steps'
    # own durations (taken back out of the average) show two stalls, no slowdown; a real one
    # (every step from 11 on twice as long) stays one read either way.
    from l4_plugin.analysis.recipe import _averaged_away

    def averaged(durations: list[float]) -> list[float]:
        total, out = 0.0, []
        for n, d in enumerate(durations, 1):
            total += d
            out.append(total / n)
        return out

    its = list(range(1, 31))
    stalls = [10.0 if n not in (11, 21) else 100.0 for n in its]
    slower = [10.0 if n < 11 else 20.0 for n in its]
    assert _averaged_away(its, averaged(stalls))
    assert not _averaged_away(its, averaged(slower))
    # per-step durations as stated (Megatron's elapsed time per iteration) are no average
    assert not _averaged_away(its, slower)


def test_a_rounded_average_over_a_long_run_read_from_step_0_is_no_slowdown() -> None:
    # An HF bar over 280 steps of 2.86 s with a 70 s save every 40 steps, its s/it averaged
    # since the start and printed with two decimals, read in buckets numbered from 0: the
    # reading of bucket 0 gives no duration, and late in the run one step's duration taken
    # back out of two neighbouring readings is mostly their rounding (± 1.4 s on 2.86 s).
    from l4_plugin.analysis.recipe import _averaged_away

    its = list(range(0, 281))
    total, rates = 0.0, []
    for n in its:
        total += 0.0 if n == 0 else 2.86 + (70.0 if n % 40 == 1 and n > 1 else 0.0)
        rates.append(round(total / max(n, 1), 2))
    assert _averaged_away(its, rates)
    # the same run slowed down for good from step 150 on is still a slowdown
    total, slowed = 0.0, []
    for n in its:
        total += 0.0 if n == 0 else (2.86 if n < 150 else 5.0)
        slowed.append(round(total / max(n, 1), 2))
    assert not _averaged_away(its, slowed)


def test_a_save_another_node_trained_after_is_over() -> None:
    # Ray workers print DeepSpeed's "zero checkpoint saved" and then nothing of their own; the
    # rank that prints progress trained on for an hour after the save: the save was over, the
    # job failed in training, though most nodes' last stage line is the save's.
    from l4_plugin.analysis.recipe import _stage

    def spans(resumed: bool) -> dict[tuple[str, str], tuple[float, float, float, float]]:
        out = {("a", "training"): (0.0, 3700.0 if resumed else 100.0, 0.0, 0.0)}
        out[("a", "checkpointing")] = (101.0, 110.0, 0.0, 0.0)
        for n in ("b", "c"):
            out[(n, "training")] = (0.0, 100.0, 0.0, 0.0)
            out[(n, "checkpointing")] = (101.0, 108.0, 0.0, 0.0)
        return out

    result = _stage(_spans_only(spans(resumed=True), 3800.0))
    assert result is not None and result.stage == "training"
    # no node trained after its save: the job stopped saving
    result = _stage(_spans_only(spans(resumed=False), 3800.0))
    assert result is not None and result.stage == "checkpointing"


def test_nodes_whose_last_marker_is_start_up_trained_with_the_node_that_printed_progress() -> None:
    # Ray: only the first node's worker draws the bar; the others' last marker is "Loading
    # checkpoint shards" (model loading) at 50. The job trained until 900: so did they. With
    # no node training after their start-up, the job was starting up.
    from l4_plugin.analysis.recipe import _stage

    def data(trained: bool) -> JobData:
        spans = {(n, "model_loading"): (10.0, 50.0, 0.0, 0.0) for n in ("a", "b", "c")}
        if trained:
            spans[("a", "training")] = (60.0, 900.0, 0.0, 0.0)
        return _spans_only(spans, 1000.0)

    result = _stage(data(trained=True))
    assert result is not None and result.stage == "training" and not result.lagging
    result = _stage(data(trained=False))
    assert result is not None and result.stage == "model_loading"


def _spans_only(
    stage_spans: dict[tuple[str, str], tuple[float, float, float, float]], end: float
) -> JobData:
    """A job of nodes a, b and c ending at ``end`` with only its stages' spans."""
    return JobData(
        job=JobDoc("j", "failed", "fp", ("a", "b", "c"), 100, 0.0, end),
        time_unit="ts",
        cells={},
        templates={},
        stage_spans=stage_spans,
        iteration_cells={},
        iteration_spans={},
        node_iteration_start={},
        node_last_iteration={},
    )


def test_a_faulthandler_dump_names_the_stage_by_the_crashed_threads_innermost_frame() -> None:
    from tests.unit.test_stacks import CRASH

    # the current thread crashed in pack_shard under save_checkpoint; another thread waited in
    # a queue's feeder, outermost "run": neither it nor the outer "train" says the stage
    assert failing_stage(_data([("c", CRASH)]), _marked("init"), ["c"], RULES) == "checkpointing"
    # a job in training: the crashed thread's frames move it as a traceback's do
    trained = _data([("c", CRASH)], {("n", "training"): (0.0, 1.0)})
    assert failing_stage(trained, _marked("training"), ["c"], RULES) == "checkpointing"
    # innermost first: a save inside a DataLoader worker's fetch is no data loading
    fetch = CRASH.replace("line 279 in train", "line 279 in _next_data")
    assert failing_stage(_data([("c", fetch)]), _marked("init"), ["c"], RULES) == "checkpointing"


@pytest.mark.parametrize(
    ("tail", "stage"),
    [
        # databrickslabs/dolly#139: torch.save writing a checkpoint to a full disk
        (
            '  File "/opt/conda/lib/python3.7/site-packages/torch/serialization.py", line 379, in'
            " save\n    _save(obj, opened_zipfile, pickle_module, pickle_protocol)\n"
            '  File "/opt/conda/lib/python3.7/site-packages/torch/serialization.py", line 604, in'
            " _save\n    zip_file.write_record(name, storage.data_ptr(), num_bytes)\n"
            "OSError: [Errno 28] No space left on device",
            "checkpointing",
        ),
        # NVIDIA/Megatron-LM#296: the checkpoint's arguments checked against the run's on load
        (
            '  File "/mnt/ws/megatron/checkpointing.py", line 58, in _compare\n'
            "    assert checkpoint_value == args_value, error_message\n"
            "AssertionError: tensor_model_parallel_size value from checkpoint (1) is not equal to"
            " the input argument value (2).",
            "model_loading",
        ),
        # InternLM/xtuner#251: a worker node without the main node's datasets cache
        (
            "FileNotFoundError: [Errno 2] Failed to open local file '/home/u/.cache/huggingface/"
            "datasets/json/finetune-3d2c/0.0.0/e347/cache-66a5_00000_of_00032.arrow'. Detail: "
            "[errno 2] No such file or directory",
            "data_loading",
        ),
        # deepspeedai/DeepSpeed#1077: the CPU Adam's op built when the optimizer is made
        (
            "    self.optimizer = deepspeed.ops.adam.DeepSpeedCPUAdam(self.model.parameters())\n"
            '  File "/usr/lib/dist-packages/deepspeed/ops/adam/cpu_adam.py", line 78, in __init__\n'
            "    self.ds_opt_adam = CPUAdamBuilder().load()\n"
            "Exception: Installed CUDA version 11.0 does not match the version torch was "
            "compiled with 10.1",
            "model_loading",
        ),
        # the same, pasted from the optimizer's constructor on: the line that built it is cut off
        (
            '  File "/usr/lib/dist-packages/deepspeed/ops/adam/cpu_adam.py", line 78, in __init__\n'
            "    self.ds_opt_adam = CPUAdamBuilder().load()\n"
            '  File "/usr/lib/deepspeed/ops/op_builder/builder.py", line 215, in load\n'
            "    return self.jit_load(verbose)\n"
            "Exception: Installed CUDA version 11.0 does not match the version torch was "
            "compiled with 10.1",
            "model_loading",
        ),
        (
            "│ /env/lib/python3.10/site-packages/torch/optim/adamw.py:45 in __init__ │\n"
            "ValueError: Invalid learning rate: -0.1",
            "model_loading",
        ),
        # pytorch/torchtitan#2184: torchtitan applying its parallelisms to the built model
        (
            '  File "/home/u/torchtitan/torchtitan/models/llama4/infra/parallelize.py", line 138, '
            "in parallelize_llama\n"
            "    tp_mesh = parallel_dims.get_mesh('tp')\n"
            "ValueError: Mesh 'tp' is not available.",
            "model_loading",
        ),
        # NVIDIA-NeMo/Automodel#367: a DeviceMesh sliced by names (its __getitem__ is no
        # dataset's); a dataset's item is still data loading
        (
            '[rank0]:   File "/opt/venv/lib/python3.12/site-packages/torch/distributed/'
            'device_mesh.py", line 718, in __getitem__\n'
            "[rank0]: KeyError: \"Invalid mesh_dim_names ('dp', 'cp') specified.\"",
            "init",
        ),
        (
            "  File \"/work/data/shards.py\", line 41, in __getitem__\nKeyError: 'input_ids'",
            "data_loading",
        ),
        # hpcaitech/ColossalAI#3043: a layer's forward in the first step (a module's forward
        # frame, not the word in a message)
        (
            'File "/opt/conda/site-packages/titans/layer/attention/gpt_attention.py", line 49, in'
            " forward\n"
            "    num_attention_heads = divide(all_head_size, self.attention_head_size)\n"
            "AssertionError: 96 is not divisible by 64",
            "training",
        ),
        (
            "ValueError: the model has no layer to run in forward",
            "init",
        ),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'config.json'", "init"),
        # deepspeedai/DeepSpeed#3647 (ZeRO-3 fetching a module's parameters for its call),
        # Lightning-AI/lit-llama#62 (Dynamo compiling at the first call)
        (
            '  File "/env/deepspeed/runtime/zero/partitioned_param_coordinator.py", line 282, in '
            "fetch_sub_module\n    assert param.ds_status == ZeroParamStatus.AVAILABLE\n"
            "AssertionError: {'id': 419, 'status': 'INFLIGHT'}",
            "training",
        ),
        (
            '  File ".../site-packages/torch/_dynamo/variables/builder.py", line 345, in _wrap\n'
            "    assert getattr(\n"
            "AssertionError: Dynamo only supports FSDP with use_orig_params=True",
            "training",
        ),
        # deepspeedai/DeepSpeed#1372: zero_to_fp32 gathering a ZeRO-2 checkpoint's partitions
        (
            'File "/tmp/t/checkpoint-1/zero_to_fp32.py", line 292, in '
            "convert_zero_checkpoint_to_fp32_state_dict\n"
            'File "/tmp/t/checkpoint-1/zero_to_fp32.py", line 222, in '
            "_get_fp32_state_dict_from_zero_checkpoint\n"
            "ValueError: consumed 2160522 numels out of 2160524 - something is wrong",
            "checkpointing",
        ),
        # Lightning-AI/pytorch-lightning#19106: log_dict with keys that differ across ranks
        (
            'File "/env/site-packages/lightning_fabric/utilities/distributed.py", line 220, in '
            "_sync_ddp\n"
            'File "/env/site-packages/torch/distributed/distributed_c10d.py", line 1906, in '
            "broadcast\nRuntimeError: Detected mismatch between collectives on ranks.",
            "training",
        ),
        # hiyouga/LlamaFactory#275: a full system disk while datasets wrote the cache of a split
        (
            'File "/root/miniconda3/lib/python3.8/site-packages/datasets/builder.py", line 1894, '
            "in _prepare_split_single\n    writer.write_table(table)\n"
            'File "/root/miniconda3/lib/python3.8/site-packages/fsspec/implementations/local.py", '
            "line 382, in write\nOSError: [Errno 28] No space left on device",
            "data_loading",
        ),
        # dmlc/dgl#4061 (DGL's dataloading package), meta-pytorch/data#1142 (torchdata's
        # dataloader2 setting up its process group: inside a data loader, not at start-up)
        (
            '  File "/env/site-packages/dgl/dataloading/dataloader.py", line 496, in '
            "_next_threaded\n    exception.reraise()\n"
            '  File "/env/site-packages/dgl/utils/exception.py", line 57, in reraise\n'
            "    raise exception\nRuntimeError: Caught RuntimeError in prefetcher.",
            "data_loading",
        ),
        (
            '  File "/env/site-packages/torchdata/dataloader2/reading_service.py", line 446, in '
            "initialize\n"
            '    self._pg = dist.new_group(backend="gloo", timeout=timedelta(seconds=30))\n'
            '  File "/env/site-packages/torch/distributed/distributed_c10d.py", line 3505, in '
            "new_group\nRuntimeError: Connection refused",
            "data_loading",
        ),
        # pytorch/pytorch#13750: a script named for what it does without a data loader
        (
            '  File "/home/u/nccl_hang/main_distributed_dp_nodataloader.py", line 116, in main\n'
            '  File "/env/torch/nn/parallel/distributed.py", line 266, in '
            "_dist_broadcast_coalesced\n"
            "RuntimeError: open(/home/u/new_store_test.txt): No such file or directory",
            "init",
        ),
        # open-mmlab/mmaction2#313: mmcv's runner evaluating in its after-epoch hook;
        # Lightning's fit loop
        (
            '  File "/env/site-packages/mmcv/runner/epoch_based_runner.py", line 54, in train\n'
            "    self.call_hook('after_train_epoch')\n"
            '  File "/w/mmaction/core/evaluation/eval_hooks.py", line 265, in after_train_epoch\n'
            "RuntimeError: replicas_[0].size() == rebuilt_param_indices_.size() INTERNAL ASSERT",
            "training",
        ),
        (
            '  File "/env/site-packages/pytorch_lightning/loops/fit_loop.py", line 266, in '
            "advance\n    self._outputs = self.epoch_loop.run(self._data_fetcher)\n"
            "KeyError: 'loss'",
            "training",
        ),
        # haotian-liu/LLaVA#1496: HF Trainer resuming from a checkpoint without its state
        (
            '  File "/transformers/trainer.py", line 1850, in train\n'
            "    state = TrainerState.load_from_json(os.path.join(resume_from_checkpoint, NAME))\n"
            '  File "/transformers/trainer_callback.py", line 148, in load_from_json\n'
            '    with open(json_path, "r", encoding="utf-8") as f:\n'
            "FileNotFoundError: [Errno 2] No such file or directory: './ckpt/trainer_state.json'",
            "model_loading",
        ),
        # NVIDIA-NeMo/Speech#7948: NeMo's exp_manager resuming a run; a script that passes
        # resume_from_checkpoint on to HF Trainer's train is no resume by that alone
        (
            '  File "/opt/NeMo/nemo/utils/exp_manager.py", line 622, in check_resume\n'
            '    raise ValueError(f"Multiple checkpoints {last_checkpoints} that matches '
            '*last.ckpt.")\nValueError: Multiple checkpoints [] that matches *last.ckpt.',
            "model_loading",
        ),
        (
            '  File "run_clm.py", line 590, in main\n'
            "    train_result = trainer.train(resume_from_checkpoint=checkpoint)\n"
            '  File "/env/site-packages/transformers/trainer.py", line 1645, in on_log\n'
            "KeyError: 'loss'",
            "init",
        ),
        # EleutherAI/gpt-neox#835: torch's collate stacking a sample of the wrong size;
        # Lightning-AI/lit-llama#465: a packed dataset's iterator out of chunks
        (
            '  File "torch/utils/data/_utils/collate.py", line 141, in default_collate\n'
            "    return torch.stack(batch, 0, out=out)\n"
            "RuntimeError: stack expects each tensor to be equal size",
            "data_loading",
        ),
        (
            '  File "/root/lit-llama/lit_llama/packed_dataset.py", line 188, in _load_n_chunks\n'
            "    raise StopIteration\nStopIteration",
            "data_loading",
        ),
    ],
)
def test_a_saves_writer_a_loads_argument_check_and_a_datasets_files(tail: str, stage: str) -> None:
    assert failing_stage(_data([("e", tail)]), _marked("init"), ["e"], RULES) == stage


@pytest.mark.parametrize(
    ("frame", "error", "stage"),
    [
        # axolotl-ai-cloud/axolotl#1698: ZeRO-3 clipping the gradients in the engine's step
        (
            'File "/env/site-packages/deepspeed/runtime/zero/stage3.py", line 2117, in '
            "unscale_and_clip_grads",
            "RuntimeError: Expected all tensors to be on the same device, but found at least two "
            "devices, cuda:1 and cpu!",
            "training",
        ),
        # om-ai-lab/VLM-R1#331: flash-attn's rotary kernel in a forward
        (
            'File "/env/dist-packages/flash_attn/ops/triton/rotary.py", line 176, in apply_rotary',
            "AssertionError: Input and cos/sin must have the same dtype, got torch.float32 and "
            "torch.bfloat16",
            "training",
        ),
        # declare-lab/flan-alpaca#10: FSDP flattening the parameters of the model it wraps
        (
            'File "/env/site-packages/torch/distributed/fsdp/flat_param.py", line 440, in '
            "_init_flat_param",
            "ValueError: `FlatParameter` requires uniform `requires_grad`",
            "model_loading",
        ),
        # pytorch/torchtitan#1465: the checkpointer purging old saves inside its save
        (
            'File "~/torchtitan/torchtitan/components/checkpoint.py", line 795, in '
            "_purge_stale_checkpoints",
            "AttributeError: 'NoneType' object has no attribute 'group'",
            "checkpointing",
        ),
        (
            'File "~/forge/apps/sft/main.py", line 233, in train\n    self.checkpointer.save(',
            "AttributeError: 'NoneType' object has no attribute 'group'",
            "checkpointing",
        ),
        # NovaSky-AI/SkyRL#357: Megatron-Core's async save forking its writer; DeepSpeed#7585:
        # the conversion to a universal checkpoint
        (
            'File "/env/site-packages/megatron/core/dist_checkpointing/strategies/async_utils.py",'
            " line 204, in schedule_async_call",
            "OSError: [Errno 12] Cannot allocate memory",
            "checkpointing",
        ),
        (
            'File "/env/site-packages/deepspeed/checkpoint/ds_to_universal.py", line 194, in '
            "dump_param_fragment",
            "RuntimeError: start (0) + length (155582464) exceeds dimension size (74499072).",
            "checkpointing",
        ),
        # deepspeedai/DeepSpeed#5767: Megatron-DeepSpeed's training_log reading the optimizer
        (
            'File "/yahao/Megatron-DeepSpeed/megatron/training.py", line 999, in training_log',
            "AttributeError: 'BF16_Optimizer' object has no attribute 'state'",
            "training",
        ),
        # triton-lang/triton#2688: Triton compiling a kernel at its first launch
        (
            'File "/env/site-packages/triton/runtime/cache.py", line 109, in put',
            "FileNotFoundError: [Errno 2] No such file or directory: '/u/.triton/cache/x.tmp'",
            "training",
        ),
        # 2U1/Qwen-VL-Series-Finetune#36: a fine-tune's data collator
        (
            'File "/ws/Qwen2-VL-Finetune/src/training/data.py", line 311, in __call__',
            "TypeError: expected Tensor as element 0 in argument 0, but got list",
            "data_loading",
        ),
    ],
)
def test_a_step_a_kernels_op_a_wrap_and_a_collator_name_their_stage(
    frame: str, error: str, stage: str
) -> None:
    tb = f"{frame}\n    x = y\n{error}"
    assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == stage


def test_a_source_line_importing_a_name_calls_nothing() -> None:
    # pytorch/torchtitan#2888: an import chain whose source lines name a parallelize function
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/venv/site-packages/torchtitan/models/qwen3/__init__.py", line 27, in <module>\n'
        "    from .parallelize import parallelize_qwen3\n"
        '  File "/venv/site-packages/torchtitan/models/llama4/__init__.py", line 24, in <module>\n'
        "[rank0]:     from .parallelize import parallelize_llama\n"
        "ImportError: cannot import name 'ShardPlacementResult' from 'torch.distributed.fsdp'"
    )
    assert RULES.stage_of_stack(tb) is None
    assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == "init"
    # the call itself still names its stage
    called = tb.replace("from .parallelize import parallelize_qwen3", "parallelize_qwen3(model)")
    assert RULES.stage_of_stack(called) == "model_loading"


def test_importing_a_kernel_library_or_running_data_parallel_is_neither() -> None:
    # a kernel library imported (its module's frame) is no op at work; DataParallel's module is
    # no data's
    for frame in (
        'File "/env/site-packages/flash_attn/__init__.py", line 3, in <module>',
        'File "/env/site-packages/torch/nn/parallel/data_parallel.py", line 171, in replicate',
        'File "/env/site-packages/torch/nn/parallel/distributed_data_parallel.py", line 9, in g',
    ):
        assert RULES.stage_of_stack(f"{frame}\n    x = y\nRuntimeError: boom") is None, frame


def test_a_chain_cut_in_its_handlers_frames_names_the_stage_where_its_exception_was_raised() -> (
    None
):
    # FanqingM/MM-Eureka-V0#8: the save's OSError, then "During handling…" and the trainer's
    # loop again, the paste cut inside it: the save is where it failed, not the loop.
    tb = (
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/env/site-packages/transformers/trainer.py", line 3157, in '
        "_save_checkpoint\n"
        "[rank2]:     os.renames(output_dir, checkpoint_dir)\n"
        "[rank2]: OSError: [Errno 39] Directory not empty: '/r/tmp-checkpoint-s0' -> "
        "'/r/checkpoint-50'\n"
        "[rank2]: During handling of the above exception, another exception occurred:\n"
        "[rank2]: Traceback (most recent call last):\n"
        '[rank2]:   File "/env/site-packages/transformers/trainer.py", line 2555, in '
        "_inner_training_loop\n"
        "[rank2]:     self._maybe_log_save_evaluate("
    )
    assert failing_stage(_data([("tb", tb)]), _marked("init"), ["tb"], RULES) == "checkpointing"
    # verl-project/verl#6773, cut in Ray's re-raise: where the printed exception was raised
    # names no stage, the task's header after it does
    ray = (
        '  File "/pkg/verl/utils/device.py", line 197, in get_npu_versions\n'
        "    result = subprocess.run(cmd, check=True)\n"
        "subprocess.CalledProcessError: Command '['npu-smi']' returned non-zero exit status 215.\n"
        "The above exception was the direct cause of the following exception:\n"
        "ray::WorkerDict.actor_rollout_init_model() (pid=4591, ip=172.36.2.44)\n"
        '  File "/usr/lib/python3.11/concurrent/futures/_base.py", line 456, in result'
    )
    assert failing_stage(_data([("tb", ray)]), _marked("init"), ["tb"], RULES) == "model_loading"
    # finished, the chain's last exception says where: the record as a whole
    done = f"{tb}\n[rank2]: RuntimeError: boom"
    assert failing_stage(_data([("tb", done)]), _marked("init"), ["tb"], RULES) == "training"
