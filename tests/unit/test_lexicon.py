"""The failure lexicon (``rules/lexicon.yaml``) on real messages, and whose code raised an error.

Every entry is tested with a line people posted from a failed run (the thread is cited beside
it) or that the emitter's source prints; each also has a near miss that must not match it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.analysis.lexicon import Lexicon, default_lexicon, last_line
from l4_plugin.analysis.origin import STDLIB, USER, frames_of, package_of, refine
from l4_plugin.errors import ConfigError

LEX = default_lexicon()

# (line, category it names as a cause)
CAUSES = [
    # rwth-i6/returnn#1500: a GPU lost to a fatal PCIe error its driver could not recover from
    (
        "[  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
        "hardware/accelerator",
    ),
    # the same dmesg: the root port's report ("PCIe Bus Error", not a SIGBUS "Bus error")
    (
        "[  +0.000004] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Transaction Layer, (Requester ID)",
        "hardware/node",
    ),
    (
        "pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0",
        "hardware/node",
    ),
    # NVIDIA/nccl#1837: NCCL_SOCKET_IFNAME=eth2 on hosts without eth2
    (
        "ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor "
        "AF_INET6(10)",
        "user/config",
    ),
    # salesforce/LAVIS#396: torch's env:// rendezvous in a job started without a launcher's
    # variables; OpenLMLab/LOMO#31: a script reading the rank a launcher would have set
    (
        "ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
        "variable MASTER_ADDR expected, but not set",
        "user/config",
    ),
    ("KeyError: 'LOCAL_RANK'", "user/config"),
    # mbzuai-oryx/LLaVA-pp#24: weights loaded into ZeRO-3's partitions of a projector; a model
    # of another shape stays the configuration's (below)
    (
        "Error(s) in loading state_dict for Sequential : size mismatch for 0.weight: copying a "
        "param with shape torch.Size([4096, 3072]) from checkpoint, the shape in current model "
        "is torch.Size([0]).",
        "framework",
    ),
    (
        "size mismatch for 2.0.weight: copying a param with shape torch.Size([256, 256, 11]) from "
        "checkpoint, the shape in current model is torch.Size([384, 256, 13]).",
        "user/config",
    ),
    # declare-lab/flan-alpaca#10 and huggingface/peft#1702: FSDP over a LoRA model
    ("ValueError: `FlatParameter` requires uniform `requires_grad`", "user/config"),
    (
        "ValueError: Must flatten tensors with uniform `requires_grad` when "
        "`use_orig_params=False`",
        "user/config",
    ),
    # deepspeedai/DeepSpeed#2870: MoE layers under ZeRO-3
    ("AssertionError: MoE not supported with Stage 3", "user/config"),
    # hiyouga/LlamaFactory#4984: Llama 3.1's config read by transformers 4.42; the same check's
    # other wording (StartHua/Comfyui_CXH_joy_caption#35), and a model type it does not know
    (
        "[rank1]: ValueError: `rope_scaling` must be a dictionary with two fields, `type` and "
        "`factor`, got {'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, "
        "'original_max_position_embeddings': 8192, 'rope_type': 'llama3'}",
        "user/software-incompatibility",
    ),
    (
        "`rope_scaling` must be a dictionary with with two fields, `type` and `factor`, got "
        "{'factor': 8.0, 'rope_type': 'llama3'}",
        "user/software-incompatibility",
    ),
    (
        "ValueError: The checkpoint you are trying to load has model type `qwen2_vl` but "
        "Transformers does not recognize this architecture.",
        "user/software-incompatibility",
    ),
    # modelscope/ms-swift#5808: torch 2.6's torch.load and DeepSpeed's pickled LossScaler
    (
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do "
        "so you have two options, do those steps only if you trust the source of the checkpoint.",
        "user/software-incompatibility",
    ),
    # h2oai/h2o-llmstudio#214: torch.save onto a full volume
    (
        "RuntimeError: [enforce fail at inline_container.cc:471] . PytorchStreamWriter failed "
        "writing file data/228: file write failed",
        "hardware/storage",
    ),
    (
        "RuntimeError: [enforce fail at inline_container.cc:337] . unexpected pos 1580172082 vs "
        "3189773315",
        "hardware/storage",
    ),
    # NVIDIA/Megatron-LM#296: a checkpoint saved with TP 1 loaded by a run launched with TP 2
    (
        '  File "/mnt/ws/megatron/checkpointing.py", line 58, in _compare\n'
        "    assert checkpoint_value == args_value, error_message\n"
        "AssertionError: tensor_model_parallel_size value from checkpoint (1) is not equal to the "
        "input argument value (2).",
        "user/config",
    ),
    # deepspeedai/DeepSpeed#1077: DeepSpeed's op builder on a system CUDA other than torch's
    (
        "Exception: Installed CUDA version 11.0 does not match the version torch was compiled "
        "with 10.1, unable to compile cuda/cpp extensions without a matching cuda version.",
        "user/software-incompatibility",
    ),
    # torch.utils.cpp_extension._check_cuda_version, the same for torch's own extension build
    (
        "RuntimeError: The detected CUDA version (12.1) mismatches the version that was used to "
        "compile PyTorch (11.8). Please make sure to use the same CUDA versions.",
        "user/software-incompatibility",
    ),
    # NVIDIA/TransformerEngine#1123: Transformer Engine's bound on the flash-attn it finds
    (
        "AssertionError: FlashAttention maximum version 2.5.8 is supported.",
        "user/software-incompatibility",
    ),
    # facebookresearch/maskrcnn-benchmark#688: a CUDA 9 build of cuDNN on a Turing card
    ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "user/software-incompatibility"),
    # HRNet/HRNet-Semantic-Segmentation#171: --nproc_per_node above the GPUs the host has
    (
        "RuntimeError: cuda runtime error (10) : invalid device ordinal at "
        "/pytorch/torch/csrc/cuda/Module.cpp:33",
        "user/config",
    ),
    # CASIA-LMC-Lab/AnomalyGPT#43: DeepSpeed's launcher after the kernel's OOM killer
    (
        "[2023-11-13 16:59:55,650] [ERROR] [launch.py:320:sigkill_handler] ['/opt/conda/bin/"
        "python', '-u', 'train_mvtec.py', '--local_rank=1'] exits with return code = -9",
        "user/config",
    ),
    # pytorch/pytorch#37004: NCCL denied its segment in /dev/shm (chmod 777 /dev/shm fixed it)
    (
        "node08:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission "
        "denied",
        "platform",
    ),
    # NVIDIA/nccl#697: sockets over a dozen Docker bridges between two nodes (NCCL_SOCKET_IFNAME
    # set to the bond fixed it)
    (
        "mars:1034:1034 [0] NCCL INFO NET/Socket : Using [0]bond0:192.168.1.161<0> "
        "[1]br-05ab815fa14e:172.19.0.1<0> [2]br-d5d80d7dbbad:172.21.0.1<0>",
        "user/config",
    ),
    # EvolvingLMMs-Lab/open-r1-multimodal#7: NCCL_SOCKET_IFNAME=eth0 on a host without eth0
    ("[rank0]: Bootstrap : no socket interface found", "user/config"),
    # dhcode-cpp/X-R1#45: FlashAttention on V100s
    ("[rank0]: RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "user/config"),
    # shibing624/MedicalGPT#23: a pad token id past the embedding table (ATen's kernel assert)
    (
        " ../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [420,0,0],"
        " thread: [29,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
        "user/code",
    ),
    # IBM/FfDL#127: the learner's shell on its SIGKILLed child (the pod's memory limit), and
    # the exit status it left
    (
        "/usr/local/bin/train.sh: line 18:    36 Killed                  python3 "
        "convolutional_network.py --trainImagesFile ${DATA_DIR}/train-images-idx3-ubyte.gz",
        "user/config",
    ),
    ("Job exited with error code 137", "user/config"),
    # NVIDIA-NeMo/Run#266: NCCL 2.25's failed internal check, nothing after it
    (
        "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/"
        "distributed/c10d/ProcessGroupNCCL.cpp:3376, internal error - please report this issue "
        "to the NCCL developers, NCCL version 2.25.1",
        "framework",
    ),
    # pytorch/pytorch#15592: two gloo nodes whose host names resolve to 127.0.1.1
    (
        "  what():  [/opt/conda/conda-bld/pytorch/work/third_party/gloo/gloo/transport/tcp/"
        "pair.cc:724] connect [127.0.1.1]:3210: Connection refused",
        "user/config",
    ),
    # torch's CPU allocator out of host memory (c10/core/impl/alloc_cpu.cpp), old and new words
    (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: not enough"
        " memory: you tried to allocate 37984010240 bytes.",
        "user/config",
    ),
    (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate"
        " memory)",
        "user/config",
    ),
    # a DataLoader worker killed from outside (a real torchrun run: kill -9 of the worker)
    (
        "[rank3]: RuntimeError: DataLoader worker (pid 11510) is killed by signal: Killed. ",
        "platform",
    ),
    # huggingface/transformers#27925: the Trainer's staging checkpoint renamed by every rank
    (
        "[rank8]: FileNotFoundError: [Errno 2] No such file or directory: "
        "'model/tmp-checkpoint-49' -> 'model/checkpoint-49'",
        "framework",
    ),
    # NVIDIA/nccl#290 (Horovod in a container): NCCL's shared-memory segment in a full /dev/shm
    (
        "gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : "
        "No space left on device",
        "platform",
    ),
    # NVIDIA/nccl-tests#166: the same in NCCL 2.12+ (misc/shmutils.cc)
    (
        "ubuntu:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend "
        "/dev/shm/nccl-fjwOOB to 5967876 bytes",
        "platform",
    ),
    # pytorch/ci-infra#490: the segment's ENOSPC is the pod's /dev/shm, not a disk
    (
        "misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-WU88OE (size 9637888), error: No space left on device (28)",
        "platform",
    ),
    # msr-fiddle/pipedream#28: a DataLoader worker's SIGBUS in a container
    (
        "RuntimeError: DataLoader worker (pid 325) is killed by signal: Bus error.",
        "platform",
    ),
    (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).",
        "platform",
    ),
    # pytorch/pytorch#85604: a second torchrun on the same port
    (
        "[W socket.cpp:401] [c10d] The server socket has failed to bind to 0.0.0.0:47531 "
        "(errno: 98 - Address already in use).",
        "user/config",
    ),
    # meta-llama/llama-models#210: the libuv store's wording
    (
        "RuntimeError: The server socket has failed to listen on any local network address. "
        "useIpv6: 0, code: -48, name: EADDRINUSE, message: address already in use",
        "user/config",
    ),
    # pytorch/examples#540: MASTER_ADDR that does not resolve
    ("ValueError: host not found: Name or service not known", "platform"),
    # hpcaitech/ColossalAI#2841
    (
        "[W socket.cpp:601] [c10d] The IPv6 network addresses of (i-7840df31, 37340) cannot be "
        "retrieved (gai error: -2 - Name or service not known).",
        "platform",
    ),
    # deepspeedai/DeepSpeed#3299: DeepSpeed's launcher without a hostfile
    (
        "[2023-04-19 10:49:12,862] [WARNING] [runner.py:190:fetch_hostfile] Unable to find "
        "hostfile, will proceed with training with local resources only.",
        "user/config",
    ),
    # c10's CUDA check with cudaGetErrorString(cudaErrorUnknown): a rank's view of a GPU that
    # fell off the bus (Xid 79)
    ("RuntimeError: CUDA error: unknown error", "hardware/accelerator"),
    # SystemsGenetics/GEMmaker#233: Slurm preemption
    (
        "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO "
        "PREEMPTION ***",
        "platform",
    ),
    # NVIDIA/nccl#1273: ranks with different NCCL builds fail in the bootstrap
    (
        "bootstrap.cc:77 NCCL WARN Message truncated : received 1024 bytes instead of 256",
        "user/software-incompatibility",
    ),
    # NVIDIA/nccl#626 (sjeaugey: ranks not calling NCCL consistently): a collective mismatch
    (
        "transport/net_socket.cc:424 NCCL WARN NET/Socket : peer 192.168.161.30<59210> message "
        "truncated : receiving 1048576 bytes instead of 65536",
        "user/code",
    ),
    # erpalma/throttled#239: the CPU package's thermal interrupt (a node's cooling)
    (
        "mce: CPU1: Package temperature above threshold, cpu clock throttled "
        "(total events = 12705)",
        "hardware/node",
    ),
    # whamcloud/integrated-manager-for-lustre#230
    ("mount.lustre failed: Cannot send after transport endpoint shutdown", "hardware/storage"),
    # vllm-project/vllm#3249 (a version mismatch; without frames the error type says user/code)
    (
        "TypeError: EngineArgs.__init__() got an unexpected keyword argument "
        "'ray_workers_use_nsight'",
        "user/code",
    ),
    # NVIDIA/nccl-tests#264, NVIDIA/nccl#1488, pytorch/pytorch#177472: the Fabric Manager of an
    # NVSwitch machine not running, or restarted under live GPUs
    ("test: Test CUDA failure common.cu:941 'system not yet initialized'", "platform"),
    (
        "node23:12098:12141 [2] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'",
        "platform",
    ),
    (
        "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 "
        "'the operation cannot be performed in the present state'. ",
        "platform",
    ),
    # NVIDIA/Megatron-LM#5, Lightning-AI/lit-llama#465: a data iterator run dry
    ("StopIteration", "user/config"),
    ("RuntimeError: generator raised StopIteration", "user/config"),
    # vllm-project/vllm#6295: a limit of 4096 threads per user
    (
        "E0710 15:24:06.605366961 2474524 thd.cc:157]                           pthread_create "
        "failed: Resource temporarily unavailable",
        "platform",
    ),
    ("RuntimeError: can't start new thread", "platform"),
    # deepspeedai/DeepSpeed#2612: the first host's address looked up as nothing in a pod
    (
        "[2022-12-15 21:00:19,543] [INFO] [runner.py:417:main] Using IP address of  for node "
        "ddp-0.ddp.ml-dev.svc.cluster.local",
        "platform",
    ),
    (
        "cmd = pdsh -S -f 1024 -w a,b export X=1; cd /w; launch.py --master_addr= "
        "--master_port=29500",
        "platform",
    ),
    # huggingface/accelerate#1192
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "hardware/accelerator"),
    # pytorch/pytorch#113128's shape: the watchdog thread names the CUDA error that ended it
    (
        "[PG 0 (default_pg) Rank 12] Process group watchdog thread terminated with exception: "
        "CUDA error: uncorrectable ECC error encountered",
        "hardware/accelerator",
    ),
    # hiyouga/LlamaFactory#6268: a framework refusing a launch
    ("ValueError: Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.", "user/config"),
    # ray-project/ray#31828: a Ray Train worker killed for its container's memory
    (
        "2023-01-17 17:21:35,472\tWARNING worker.py:1829 -- A worker died or was killed while "
        "executing a task by an unexpected system error. To troubleshoot the problem, check the "
        "logs for the dead worker.",
        "user/config",
    ),
    # huggingface/pytorch-image-models#1724: torch 2.0's launcher and a script parsing
    # --local_rank
    ("train.py: error: unrecognized arguments: --local-rank=0", "user/software-incompatibility"),
    ("train.py: error: unrecognized arguments: --lr-warmup 5", "user/config"),
    # skypilot-org/skypilot#5181: a PATH without the virtualenv's torchrun
    ("(head, rank=0, pid=1113) bash: torchrun: command not found", "user/config"),
    ("srun: error: Node failure on jean-zay-iam49", "hardware/node"),
    (
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
        "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
        "platform",
    ),
    ("RuntimeError: No CUDA GPUs are available", "platform"),
    ("RuntimeError: received 0 items of ancdata", "user/config"),
    ("OSError: [Errno 24] Too many open files: '/dev/shm/torch_2231_3387'", "user/config"),
    (
        "AssertionError: AnnealingLR: class input value 1e-06 and checkpointvalue 1e-05 for "
        "minimum learning rate do not match",
        "user/config",
    ),
    (
        "ValueError: The port number of the rendezvous endpoint 'None:None' must be an integer "
        "between 0 and 65536.",
        "user/config",
    ),
    (
        "(LLMRayActor pid=146238) ValueError: The number of required GPUs exceeds the total "
        "number of available GPUs in the placement group.",
        "user/config",
    ),
    ("/bin/sh: 1: deepspeed: not found", "user/config"),
    # hiyouga/LlamaFactory#4359: torchrun with NCCL on Windows
    ("RuntimeError: Distributed package doesn't have NCCL built in", "user/config"),
    # rasbt/LLMs-from-scratch#375: torch 2.4's TCPStore on a Windows build
    (
        "RuntimeError: use_libuv was requested but PyTorch was build without libuv support",
        "user/software-incompatibility",
    ),
    # mosaicml/streaming#306: two runs started on one local cache directory
    (
        "ValueError: Reused local directory: ['/nvme/c4/train_small'] vs ['/nvme/c4/train_small']."
        " Provide a different one.",
        "user/config",
    ),
    # pytorch/pytorch#38079 shape (a resumed run whose model changed)
    (
        "size mismatch for model.embed_tokens.weight: copying a param with shape "
        "torch.Size([32000, 4096]) from checkpoint, the shape in current model is "
        "torch.Size([32001, 4096]).",
        "user/config",
    ),
    # Ultralytics, OLMo: Slurm's cgroup OOM killer
    (
        "slurmstepd: error: Detected 1 oom_kill event in StepId=9178265.0. Some of the step "
        "tasks have been OOM Killed.",
        "user/config",
    ),
    # QwenLM/Qwen#1125: a CUDA 11.7 image's nvcc building DeepSpeed's fused_adam for an Ada GPU
    ("nvcc fatal   : Unsupported gpu architecture 'compute_89'", "user/software-incompatibility"),
    # mlcommons/training#826: Triton's bundled ptxas compiling a kernel for a B200
    (
        "[default6]:[rank6]: ptxas fatal   : Value 'sm_100' is not defined for option 'gpu-name'",
        "user/software-incompatibility",
    ),
    # horovod/horovod#1197: Open MPI's handler on a rank that crashed in Horovod's mpi_lib.so
    ("[1,2]<stderr>:[XXX:40705] Signal: Segmentation fault (11)", "framework"),
    # open-mmlab/mmpretrain#603: gdb on the core of a crash in torch's cuBLAS handle
    ("Program terminated with signal SIGSEGV, Segmentation fault.", "framework"),
    # horovod/horovod#1824: DataLoader workers forked under an InfiniBand MPI stack
    ("ERROR: Unexpected segmentation fault encountered in worker.", "framework"),
    (
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Segmentation fault.",
        "framework",
    ),
    # Megvii-BaseDetection/YOLOX#76: mp.spawn's rank killed by the OOM killer (host RAM)
    (
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
        "SIGKILL",
        "user/config",
    ),
    # horovod/horovod#2619: Horovod built against TF 2.3.0 under TF 2.4.1
    (
        "[1,1]<stderr>:horovod.common.exceptions.HorovodVersionMismatchError: Framework "
        "tensorflow installed with version 2.3.0 but found version 2.4.1.",
        "user/software-incompatibility",
    ),
    # pytorch/torchtitan#2239: 48 nodes' ranks streaming a dataset from the Hub
    (
        "HTTP Error 429 thrown while requesting GET https://huggingface.co/api/datasets/allenai/"
        "c4/tree/1588ec45/en?expand=false",
        "user/config",
    ),
    # ashkamath/mdetr#101: LSF ended an 8-GPU job for its threads (2,482 of them)
    ("TERM_THREADLIMIT: job killed after reaching LSF thread limit.", "platform"),
    # LSF's memory limit and its preemption (IBM's list of termination reasons)
    ("TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.", "user/config"),
    ("TERM_PREEMPT: job killed after preemption.", "platform"),
    # kubeflow/trainer#301: the kubelet evicted a TFJob's pod under memory pressure
    ("Message:        The node was low on resource: memory.", "user/config"),
    # ultralytics/ultralytics#918: the SSH session closed under torchrun (nohup without disown);
    # torch 1.13's agent names the signal by its number
    (
        "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting "
        "down workers",
        "user/config",
    ),
    (
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4193 closing "
        "signal SIGHUP",
        "user/config",
    ),
    # bigscience-workshop/bigscience jz/slurm/README.md: a Jean Zay node's broken network
    (
        "r11i6n2:486514:486651 [1] include/socket.h:403 NCCL WARN Connect to "
        "10.148.3.247<56821> failed : Connection refused",
        "hardware/network",
    ),
    # NCCL 2.19's socket.cc names the function
    (
        "node1:77:90 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        "10.0.0.2<43917> failed : Software caused connection abort",
        "hardware/network",
    ),
    # DeepSpeed's config check (runtime/config.py _batch_assertion) and Megatron-LM's
    # microbatch calculator: sizes that do not fit together
    (
        "AssertionError: Check batch related parameters. train_batch_size is not equal to "
        "micro_batch_per_gpu * gradient_acc_step * world_size 16 != 2 * 1 * 4",
        "user/config",
    ),
    (
        "AssertionError: global batch size (512) is not divisible by micro batch size (3) times "
        "data parallel size (8)",
        "user/config",
    ),
    ("AssertionError: Micro batch size per gpu: 0 has to be greater than 0", "user/config"),
    ("ValueError: Invalid batch size 0", "user/config"),
    # NVIDIA/nccl#473: nccl-tests in a Docker container without --ipc=host; torch 1.x's bare
    # ncclSystemError
    ("fastmoe: Test NCCL failure common.cu:777 'unhandled system error'", "platform"),
    (
        "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514, "
        "unhandled system error, NCCL version 2.4.8",
        "platform",
    ),
    # Azure/AML-Kubernetes#15: the rank's variable empty on the command line; argparse's others
    ("pytorch_mnist.py: error: argument --rank: invalid int value: ''", "user/config"),
    ("train.py: error: the following arguments are required: --data_path", "user/config"),
    ("train.py: error: argument --nproc_per_node: expected one argument", "user/config"),
    # determined-ai/determined#7869: the shared checkpoint path not writable by the trial's user
    (
        "[a5884739] [36] root: Checkpoint storage validation failed: [Errno 13] Permission "
        "denied: '/determined_shared_fs/261390dd-c308-4ce3-ac99-77d52f744f8b' <error>",
        "user/config",
    ),
    ("PermissionError: [Errno 13] Permission denied: '/checkpoints/run1'", "user/config"),
    ("root@10.0.0.2: Permission denied (publickey).", "user/config"),
    # pytorch/torchtitan#816: a resume with another data-parallel degree; DeepSpeed ZeRO's
    # check of the same (runtime/zero/stage_1_and_2.py)
    (
        "AssertionError: dp_degree is inconsistent before and after checkpoint, DataLoader "
        "resharding is not supported yet.",
        "user/config",
    ),
    (
        "ZeRORuntimeException: The checkpoint being loaded used a DP world size of 8 but the "
        "current world size is 16. Automatic adjustment of ZeRO's optimizer state partitioning "
        "with a new world size is not currently supported.",
        "user/config",
    ),
    # pytorch/torchtitan#1408: a feature not compatible with another the run asked for; a
    # library not compatible with the installed torch is a version mismatch
    (
        "ValueError: FlexAttention is not compatible with selective AC yet. See "
        "https://github.com/pytorch/pytorch/issues/147879",
        "user/config",
    ),
    (
        "RuntimeError: bitsandbytes 0.41.1 is not compatible with torch 2.3.0",
        "user/software-incompatibility",
    ),
    (
        "UserWarning: xformers is not compatible with this version of PyTorch",
        "user/software-incompatibility",
    ),
    # horovod/horovod#978: horovodrun -np 2 -H localhost (one slot); Open MPI's mapper
    ("There are not enough slots available in the system to satisfy the 2 slots ", "user/config"),
    # Open MPI's users list (2015-05): more processes than the allocation's nodes hold
    (
        "Error: All nodes which are allocated for this job are already filled.",
        "user/config",
    ),
    # PRRTE's help-dash-host [not-all-mapped-alloc]
    (
        "At least one of the requested hosts is not included in the current allocation.",
        "user/config",
    ),
]

CONSEQUENCES = [
    # torchrun tearing its workers down after one failed, and LSF's kill on its owner's word
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4194 closing signal "
    "SIGTERM",
    "TERM_OWNER: job killed by owner.",
    # torch's agent closing its rendezvous at exit after the store's host had gone (a real run
    # of ours as pod logs: the pod's name, "lr-blowup-nan-worker-0", is no NaN)
    "W1129 19:53:36.688000 27581 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1298] "
    "The node 'lr-blowup-nan-worker-0_27581_0' has failed to shutdown the rendezvous 'job1' due "
    "to an error of type RendezvousConnectionError.",
    # torch's agent logs "Received %s death signal" of a signal.Signals: under Python 3.11+ its
    # "%s" is the number (a real run of ours stopped by its wall-clock limit), before "Signals.…"
    "W1127 16:02:54.819000 7186 torch/distributed/elastic/agent/server/api.py:753] Received 15 "
    "death signal, shutting down workers",
    "WARNING:torch.distributed.elastic.agent.server.api:Received Signals.SIGTERM death signal, "
    "shutting down workers",
    # deepspeedai/DeepSpeed#7174: ninja's failed step and the linker driver's summary around
    # the linker's own "cannot find -lcurand", then torch's RuntimeError
    "FAILED: cpu_adam.so",
    "collect2: error: ld returned 1 exit status",
    "ninja: build stopped: subcommand failed.",
    "RuntimeError: Error building extension 'cpu_adam'",
    # c10d's TCPStore client when the store's server went away (the same run's teardown)
    "[W1127 15:57:56.446267395 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on "
    "SocketImpl(fd=4, addr=[1063:3bf6:ed7f:0]:8984, remote=[d4:5286:c055:0]:34385): Failed to "
    "recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
    # gloo's pair.cc on a reset connection: the remote worker's end, whatever ended it (a real
    # torchrun run whose other rank was killed)
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read "
    "error [10.77.0.12]:60819: Connection reset by peer. This is typically caused by a remote "
    "worker hanging or bugs in the application. Check the logs of the remote worker before "
    "reporting an error.",
    # the teardown stopping a DataLoader's workers
    "RuntimeError: DataLoader worker (pid 2077) is killed by signal: Terminated. ",
    # Python's unraisable hook at teardown (tests/realruns/cases/dataloader-worker-killed, a
    # peer node whose DataLoader workers the agent's SIGTERM stopped)
    "[default1]:Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at "
    "0x7f6dbb7b3f60>",
    # ray-project/ray#39380: Ray's driver after a worker failed (it mentions OOM as an example)
    "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the "
    "previous error messages for a cause. After fixing the issue (assuming that the error is not "
    "caused by your own application logic, but rather an error such as OOM), you can restart the "
    "run from scratch or continue this run.",
    # ray-project/ray#31828: Ray 2.2's trial runner on the same
    "2023-01-17 17:21:35,509\tERROR trial_runner.py:980 -- Trial TorchTrainer_b13e7_00000: Error "
    "processing event.",
    # ray-project/ray#36537
    "2023-06-17 02:16:38,194 ERROR tune_controller.py:905 -- Trial task failed for trial "
    "TransformersTrainer_31d61_00000",
    # Ray Train's driver after a trial failed (train/base_trainer.py, tune's progress reporter)
    "To start a new run that will retry on training failures, set `train.RunConfig("
    "failure_config=train.FailureConfig(max_failures))` in the Trainer's `run_config` with "
    "`max_failures > 0`, or `max_failures = -1` for unlimited retries.",
    "Training errored after 1 iterations at 2025-07-06 18:11:38. Total running time: 98min 32s",
    # torchrun's agent told to stop (torch/distributed/elastic/multiprocessing/api.py)
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 124198 got signal: 15",
    # torch's desync report (ProcessGroupNCCL::retrieveDesyncReport) on the rank that timed out
    "[rank0]:[E627 10:58:46.124620437 ProcessGroupNCCL.cpp:1330] [PG ID 0 PG GUID 0(default_pg) "
    "Rank 0] \n\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the "
    "desync are:\n\t   - [8, 9] joined but didn't finish collective #2781 (count from 1)",
    # kubectl get pods after the job failed
    "sft-14b-5zsfh-worker-0    0/1     Error    0          77m   10.78.13.227   gpu-node-nnjj5",
    # abseil's signal handler in a Ray worker the teardown stopped
    "*** SIGTERM received at time=1751821897 on cpu 24 ***",
    # desihub/desitarget#628: srun after the step was killed
    "srun: error: nid01934: tasks 2,4-5,7: Terminated",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    # tonyyxliu/CUHKSZ-CSC4005#51
    "srun: error: node25: task 11: Killed",
    # banyan-team/banyan-julia#6: a cancel with no reason
    "slurmstepd: error: *** JOB 3737 ON compute-dy-t3large-2 CANCELLED AT 2021-08-03T16:28:28 ***",
    # pytorch/pytorch#126544: the watchdog's own stack
    "frame #5: c10d::ProcessGroupNCCL::watchdogHandler() + 0x77c (0x7fc91a8545ac in "
    "/tmp/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)\n"
    "frame #6: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7fc91a85531c in "
    "/tmp/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
    # A SIGTERM handler saving a rank's Flight Recorder trace before it exits (torch's
    # _dump_fr_trace): the error type it names is why it dumped, not what failed.
    "[rank3] RuntimeError: flight recorder trace written to /tmp/run/fr/attempt_0/fr_trace_rank_3",
    "[rank0] SIGTERM: stack dump written to /tmp/job/stacks/rank0.txt",
    # Lustre's ptlrpc when a request to a server failed (the client was evicted or cut off)
    "LustreError: 11-0: proj-OST0025-osc-ffff0bc226b72278: operation ost_write to node "
    "10.233.0.2@o2ib failed: rc = -107",
    # gloo's tcp/pair.cc when the other end closed its socket (its process exited)
    "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
    "by peer [10.77.0.12]:5517. This is typically caused by a remote worker crashing. Check the "
    "logs of the remote worker before reporting an error.",
    # a chained traceback's header, and a traceback's frames with nothing after them, left as
    # records of their own (meta-pytorch/torchx#540, pasted with its quotes escaped)
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
    "Traceback (most recent call last):\n"
    '  File \\"/home/ray/anaconda3/lib/python3.9/site-packages/torch/distributed/elastic/'
    'metrics/api.py\\", line 125, in wrapper\n'
    "    result = f(*args, **kwargs)",
    # kohya-ss/sd-scripts#971: a traceback's header glued to a bar's frame, the paste ending there
    " 87%|█████████████████████████████████▉     | 1583/1818 [30:03<04:26,  1.13s/it]Traceback "
    "(most recent call last):",
    # pytorch/pytorch#150916: torchrun's own frames under Python 3.12, carets under each call,
    # the paste cut before the exception
    "Traceback (most recent call last):\n"
    '  File "/venv/bin/torchrun", line 8, in <module>\n'
    "    sys.exit(main())\n"
    "             ^^^^^^\n"
    '  File "/venv/lib/python3.12/site-packages/torch/distributed/run.py", line 918, in main\n'
    "    run(args)",
    # meta-pytorch/torchx#540: c10d's rendezvous store writing to a socket whose end is gone
    "RuntimeError: Broken pipe",
    # hiyouga/LlamaFactory#2424: torch 2.0's watchdog thread ending, its exception cut off
    "[E ProcessGroupNCCL.cpp:916] [Rank 2] NCCL watchdog thread terminated with",
    # hiyouga/LlamaFactory#1845 (ZeRO-3 Mixtral, the paste's last line): the sentence after "Some
    # NCCL operations have failed", cut off where the process died
    "[E ProcessGroupNCCL.cpp:460] To avoid data inconsistency, we are taking the",
    # PaddlePaddle/Paddle#1451: glog's abort after a failed CHECK, the check's stack header
    'Fri Feb 24 15:19:45 2017[1,21]<stderr>:*** Aborted at 1487920785 (unix time) try "date -d '
    '@1487920785" if you are using GNU date ***',
    "*** Check failure stack trace: ***",
    "*** SIGABRT (@0x3e800007335) received by PID 29493 (TID 0x7f6b1c) from PID 29493; stack "
    "trace: ***",
    # DeepSpeed's launcher tearing the job down after a rank failed
    "[2023-01-05 10:12:31,114] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python', "
    "'train.py', '--local_rank=3'] exits with return code = 1",
    # huggingface/transformers#17106: a rank waiting for rank 0's NCCL id
    "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
    "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",
]


@pytest.mark.parametrize(("line", "category"), CAUSES)
def test_real_failure_lines_name_their_category(line: str, category: str) -> None:
    term = LEX.cause_of_record(line)
    assert term is not None and term.says_cause, line
    assert term.category == category


@pytest.mark.parametrize("line", CONSEQUENCES)
def test_consequences_never_name_a_category(line: str) -> None:
    term = LEX.cause_of_record(line)
    assert term is not None and term.cascade and not term.says_cause, line


def test_near_misses_are_not_failures() -> None:
    # A port's normal use, a DataLoader starting, a Slurm step ending, a tidy checkpoint: none of
    # them names a failure.
    for line in (
        "INFO torch.distributed: store listening on 0.0.0.0:29500",
        "INFO DataLoader started 8 workers",
        "NCCL INFO Channel 00/02 :    0   1 via direct shared memory",
        "slurmstepd: info: job 3737 completed",
        "Saved checkpoint to /ckpt/step_100",
        "Segmentation fault (core dumped)",
        "sft-14b-5zsfh-worker-3    1/1     Running    0          77m   10.78.13.2   gpu-node-a",
        # a file system's name in a path is no storage failure
        "saving to /lustre/proj/llm/ckpt/14b/checkpoint-920 and /gpfs/home/u/run",
        # NCCL's banners: the devices it found, the transport it chose, a channel's route
        "mars:1034:1034 [0] NCCL INFO NET/IB : No device found.",
        "gpu-a1:77:77 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "gpu-a1:77:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0",
        "gpu-a1:77:77 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        # NVIDIA-NeMo/Run#266: NCCL's topology search settling for a plainer ring, and going on
        "graph/search.cc:1135 NCCL WARN Could not find a path for pattern 1, falling back to "
        "simple order",
        # NVIDIA/nccl#1240 and NCCL 2.20's wording: no optional plugin, NCCL's own transports
        "Spotllm:73025:73025 [0] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open "
        "shared object file: No such file or directory No plugin found (libnccl-net.so), using "
        "internal implementation",
        "gpu-a1:77:77 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal "
        "network plugin.",
        "gpu-a1:77:77 [0] NCCL INFO TUNER/Plugin: Could not find: libnccl-tuner.so. Using "
        "internal tuner plugin.",
        # a resume that found its checkpoint as saved
        "Loaded the checkpoint from /ckpt/step_100, which matches the saved world size",
        # a DeepSpeed configuration's print and a progress line: sizes, nothing wrong
        "[INFO] [config.py:1000:print]   train_micro_batch_size_per_gpu  4",
        "iteration 10/ 100 | global batch size:  2048 | lm loss: 2.1E+00 | skipped: 0",
        # bigscience-workshop/bigscience tr11-176B-ml: Megatron's progress line counts NaN
        # iterations, none
        " iteration    45000/  115311 | lm loss: 2.113567E+00 | grad norm: 0.139 | number of "
        "skipped iterations:   0 | number of nan iterations:   0 | samples per second: 18.451 |",
        # ... and one cut off before its count (bigscience tr11-176B-ml, a throughput drop)
        " rate: 4.475E-05 | global batch size: 2048 | lm loss: 2.117073E+00 | grad norm: 0.150 | "
        "num zeros: 0.0 | number of skipped iterations:  0 | number of nan",
        # an exit status that merely contains 137, a GPU named by its architecture
        "Job exited with error code 1370",
        "Found 8 Ampere GPUs",
        # a corrected PCIe error is handled; a zip reader's position is no write that failed
        "pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0",
        "pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Physical Layer",
        "PytorchStreamReader reading file data/228",
        # an address that is there
        "[INFO] [runner.py:417:main] Using IP address of 10.0.0.4 for node ddp-0",
        "launch.py --master_addr=10.0.0.4 --master_port=29500",
        # the machine's own loopback is no misconfigured peer address
        "INFO torch.distributed: connected to store at 127.0.1.1:29500",
    ):
        term = LEX.cause_of_record(line)
        assert term is None or not term.says_cause, line


def test_a_record_says_its_cause_past_a_consequence() -> None:
    # A barrier timeout is how rank 1 saw it; main_process_first in its stack says rank 0 was
    # still preparing the data (huggingface/trl#1519, hiyouga/LlamaFactory#2424).
    record = (
        'File "/env/site-packages/transformers/training_args.py", line 1891, in '
        "main_process_first\n    torch.distributed.barrier()\n"
        "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
        "via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"
    )
    term = LEX.cause_of_record(record)
    assert term is not None and term.category == "user/config"
    # The ordering of events still reads the record as a consequence (its last line).
    assert LEX.classify_record(record).cascade  # type: ignore[union-attr]


def test_the_causes_an_emitter_guesses_at_are_not_the_records_words() -> None:
    # Ray's raylet (node_manager.cc, HandleClientConnectionError) on any worker whose
    # connection dropped; here the GPU had fallen off the bus: no OOM, whatever the hint says.
    record = (
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: RayTrainWorker\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
        "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
        "file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM "
        "killer due to high memory usage. (2) ray stop --force is called. (3) The worker is "
        "crashed unexpectedly due to SIGSEGV or other unexpected errors."
    )
    for term in (LEX.classify_record(record), LEX.cause_of_record(record)):
        assert term is not None and term.cascade and not term.says_cause, term


def test_the_kernels_hung_task_report_is_read_past_its_boilerplate() -> None:
    record = (
        "[230217.692693] INFO: task pt_autograd_0:223324 blocked for more than 120 seconds.\n"
        "[230217.692792]       Tainted: P           OE      5.15.0-124-generic #1\n"
        '[230217.692893] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.'
    )

    assert "blocked for more than 120 seconds" in last_line(record)


def test_torchelastics_copy_of_a_childs_error_is_a_consequence() -> None:
    # torch/distributed/elastic/multiprocessing/errors/error_handler.py, after a worker failed
    term = LEX.cause_of_record(
        "E1127 15:53:18.788000 32421 torch/distributed/elastic/multiprocessing/errors/"
        "error_handler.py:145] no error file defined for parent, to copy child error file "
        "(/tmp/torchelastic_x/attempt_0/1/error.json)"
    )
    assert term is not None and term.cascade and not term.says_cause


def test_std_terminate_is_a_consequence_its_what_the_cause() -> None:
    # libstdc++ on an uncaught C++ exception: every rank whose watchdog threw prints the first
    # line; the what() line after it says which exception.
    alone = LEX.cause_of_record(
        "[rank3]:terminate called after throwing an instance of 'c10::DistBackendError'"
    )
    assert alone is not None and alone.cascade and not alone.says_cause
    record = (
        "terminate called after throwing an instance of 'c10::CUDAError'\n"
        "  what():  CUDA error: uncorrectable ECC error encountered"
    )
    term = LEX.classify_record(record)
    assert term is not None and term.category == "hardware/accelerator"


def test_a_cuda_error_found_by_the_watchdog_is_the_cuda_error() -> None:
    # torch's NCCL watchdog polls the work's CUDA event; a CUDA error surfaces there, with the
    # watchdog thread's C++ stack appended: the error is the record's words, not the stack's
    # function names (ncclCommWatchdog is no collective timeout), behind any label prefix.
    prefix = "2025-08-23T22:49:37.844205617Z [default6]:"
    record = "\n".join(
        prefix + line
        for line in (
            "  what():  CUDA error: uncorrectable ECC error encountered",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
            "Exception raised from c10_cuda_check_implementation at "
            "../c10/cuda/CUDAException.cpp:43 (most recent call first):",
            "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f in "
            "libc10.so)",
            "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const "
            "+ 0x56 (0x7f in libtorch_cuda.so)",
            "frame #5: c10d::ProcessGroupNCCL::watchdogHandler() + 0x1f0 (0x7f in "
            "libtorch_cuda.so)",
            "frame #6: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f in "
            "libtorch_cuda.so)",
            "frame #9: clone + 0x44 (0x7f in libc.so.6)",
        )
    )
    lexicon = default_lexicon()
    for term in (lexicon.classify_record(record), lexicon.cause_of_record(record)):
        assert term is not None and term.category == "hardware/accelerator", term


def test_consequences_that_mean_something_alone() -> None:
    watchdog = LEX.cause_of_record(
        "[E ProcessGroupNCCL.cpp:821] [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=10646, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1808898 "
        "milliseconds before timing out."
    )
    assert watchdog is not None and watchdog.alone == "user/code"
    assert watchdog.preparing == "user/config"
    cancel = LEX.cause_of_record(next(c for c in CONSEQUENCES if "CANCELLED AT" in c))
    assert cancel is not None and cancel.alone == "user/config"
    # pytorch/pytorch#69746: Megatron-DeepSpeed's fused kernels failing to build, the
    # compiler's error not in the paste: the build's own failure
    build = LEX.cause_of_record(
        "RuntimeError: Error building extension 'fused_mix_prec_layer_norm_cuda'"
    )
    assert build is not None and build.cascade and build.alone == "framework"
    # axolotl-ai-cloud/axolotl#2684: rank 1's store client gave up while rank 0 tokenized; the
    # template of the same line (digits zeroed: "c00d") is the same consequence, not a cause.
    waited = LEX.cause_of_record(
        "[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket "
        "SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) timed out after "
        "1800000ms"
    )
    assert waited is not None and waited.alone == "user/config"
    record = (
        "RuntimeError: [<NUM>] is setting up NCCL communicator and retrieving ncclUniqueId from "
        "[<NUM>] via c00d key-value store by key '<NUM>', but store->get('<NUM>') got error\n"
        + CONSEQUENCES[-1]
    )
    nccl_id = LEX.cause_of_record(record)
    assert nccl_id is not None and nccl_id.cascade and nccl_id.alone == "user/config"
    # A stack that ends inside a collective, with no error of its own (OpenMOSS/MOSS#275 shape).
    stuck = LEX.cause_of_record(
        'File "/env/dist-packages/deepspeed/comm/comm.py", line 526, in all_reduce\n'
        "    return cdb.all_reduce(tensor, op, group, async_op)"
    )
    assert stuck is not None and stuck.alone == "user/code"


def test_a_lustre_request_that_failed_is_how_the_storage_failed() -> None:
    # jade-hpc-gpu/jade-hpc-gpu.github.io#14: a Lustre client losing its servers. The failed
    # request is how it showed (an eviction, when the kernel says so, is what happened); alone,
    # it still names the storage.
    term = LEX.cause_of_record(
        "[Mon Oct 16 10:06:17 2017] LustreError: 11-0: jmain01-MDT0000-mdc-ffff88203810d800: "
        "operation obd_ping to node 172.31.126.88@o2ib failed: rc = -107"
    )
    assert term is not None and term.cascade and term.alone == "hardware/storage"


def test_a_time_limit_is_how_a_job_ended_and_alone_its_configuration() -> None:
    # desihub/desitarget#628 (Slurm), GNU timeout --verbose around torchrun: a job that slowed
    # down or hung reaches its limit too, so the limit is a consequence; alone, too short.
    for line in (
        "slurmstepd: error: *** STEP 32233190.0 ON nid01934 CANCELLED AT 2020-07-03T02:59:56 "
        "DUE TO TIME LIMIT ***",
        "timeout: sending signal TERM to command 'torchrun'",
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
    ):
        term = LEX.cause_of_record(line)
        assert term is not None and term.cascade and term.alone == "user/config", line


def test_local_categories() -> None:
    port = LEX.cause_of_record("errno: 98 - Address already in use")
    assert port is not None and port.local == "platform"
    oom = LEX.cause_of_record("torch.OutOfMemoryError: CUDA out of memory.")
    assert oom is not None and oom.local is None
    # c10d's client socket with no route to its peer (a real torchrun run: a node whose link
    # was taken down; another given an address no host had): one node's link, or the address
    unreachable = LEX.cause_of_record(
        "torch.distributed.DistNetworkError: The client socket has failed to connect to any "
        "network address of (cn-e11, 37985). The client socket has failed to connect to "
        "39.86.0.0:8346 (errno: 113 - No route to host)."
    )
    assert unreachable is not None
    assert (unreachable.category, unreachable.local) == ("user/config", "hardware/network")
    # NVIDIA/DeepLearningExamples#549: BERT pre-training with a learning rate meant for a 64K
    # batch diverges on every rank; Megatron's check of one rank's own gradients, when only a
    # few nodes' fail it, is their GPUs
    diverged = LEX.cause_of_record("ERROR:tensorflow:Model diverged with loss = NaN.")
    assert diverged is not None and (diverged.category, diverged.local) == ("user/config", None)
    # iterations that were NaN, some: a failure; a count of NaNs that is zero is none
    counted = LEX.cause_of_record(" iteration 9/ 100 | number of nan iterations:   3 |")
    assert counted is not None and counted.category == "user/config"
    assert LEX.cause_of_record("nan_count = 0.0 | NaN steps: 0") is None
    local_norm = LEX.cause_of_record(
        "RuntimeError: Rank 49, node nid005367, device 1, iteration 40: Unexpected result "
        "tensor(nan, device='cuda:1') (message='found NaN in local grad norm for bucket #0 in "
        "backward pass before data-parallel communication collective')"
    )
    assert local_norm is not None
    assert (local_norm.category, local_norm.local) == ("user/config", "hardware/accelerator")


# --- whose code raised it --------------------------------------------------------------------

LIBS = LEX.libraries


def test_paths_are_read_as_user_library_or_stdlib() -> None:
    assert package_of("/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", LIBS) == (
        "torch"
    )
    assert package_of("/mnt/x/Megatron-LM-fix/megatron/core/schedules.py", LIBS) == "megatron"
    assert package_of("openrlhf/trainer/ray/vllm_engine.py", LIBS) == "openrlhf"
    assert package_of("<frozen os>", LIBS) == STDLIB
    assert package_of("/opt/conda/lib/python3.9/contextlib.py", LIBS) == STDLIB
    assert package_of("/mnt/x/Megatron-LM-fix/pretrain_gpt.py", LIBS) == USER
    assert package_of("/workspace/train/loop.py", LIBS) == USER
    # deepspeedai/DeepSpeed#1372: DeepSpeed's script, copied into the checkpoint it converts
    assert package_of("/tmp/tmp1t67ww0e/checkpoint-1/zero_to_fp32.py", LIBS) == "deepspeed"


def test_frames_in_both_shapes() -> None:
    text = (
        '  File "/workspace/train.py", line 3, in main\n'
        "│ /usr/local/lib/python3.9/dist-packages/accelerate/accelerator.py:1161 in prepare_model │"
    )
    frames = frames_of(text, LIBS)
    assert [(f.function, f.package) for f in frames] == [
        ("main", USER),
        ("prepare_model", "accelerate"),
    ]


def _tb(*frames: tuple[str, str], last: str) -> str:
    lines = ["Traceback (most recent call last):"]
    lines += [f'  File "{p}", line 1, in {f}\n    x()' for p, f in frames]
    return "\n".join([*lines, last])


SITE = "/usr/local/lib/python3.10/dist-packages"


def test_an_error_raised_in_a_library_is_the_frameworks() -> None:
    # NVIDIA/Megatron-LM#700: loss used on a pipeline stage that never assigns it.
    text = _tb(
        ("/data/Megatron-LM/pretrain_gpt.py", "<module>"),
        ("/data/Megatron-LM/megatron/core/pipeline_parallel/schedules.py", "forward_step"),
        last="UnboundLocalError: local variable 'loss' referenced before assignment",
    )
    assert refine("user/code", text, LEX) == "framework"
    # NVIDIA-NeMo/Automodel#3686: makedirs raced on a shared file system (os is transparent).
    race = _tb(
        ("nemo_automodel/components/checkpoint/checkpointing.py", "_create_dirs"),
        ("<frozen os>", "makedirs"),
        last="FileExistsError: [Errno 17] File exists: '/ckpt/step_297'",
    )
    assert refine("user/code", race, LEX) == "framework"


def test_an_error_raised_in_the_users_code_is_theirs() -> None:
    # The user's loop calls its model through nn.Module.__call__ (a dispatch, not the blame).
    text = _tb(
        ("/workspace/train/loop.py", "evaluate"),
        (f"{SITE}/torch/nn/modules/module.py", "_call_impl"),
        last="TypeError: GPTModel.forward() got an unexpected keyword argument 'position_ids'",
    )
    assert refine("user/code", text, LEX) == "user/code"
    assert refine("user/code", "ZeroDivisionError: division by zero", LEX) == "user/code"


def test_a_failed_subprocess_is_whoever_ran_it() -> None:
    # verl-project/verl#6773: verl ran npu-smi with a device id the machine lacked
    text = _tb(
        (
            "/tmp/ray/session_1/runtime_resources/_ray_pkg_06/verl/utils/device.py",
            "get_npu_versions",
        ),
        ("/usr/local/python3.11.14/lib/python3.11/subprocess.py", "run"),
        last="subprocess.CalledProcessError: Command '['npu-smi', 'info']' returned non-zero "
        "exit status 215.",
    )
    term = LEX.cause_of_record(text)
    assert term is not None and term.origin
    assert refine(term.category, text, LEX) == "framework"
    mine = text.replace("/tmp/ray/session_1/runtime_resources/_ray_pkg_06/verl/utils", "/home/u")
    assert refine(term.category, mine, LEX) == "user/code"


def test_a_device_asked_of_cuda_is_the_callers_choice() -> None:
    # KellerJordan/modded-nanogpt#61: --nproc_per_node=8 on a host of 4 GPUs; torch.cuda's
    # set_device only handed the script's index to the runtime.
    text = _tb(
        ("/home/u/modded-nanogpt/train_gpt.py", "<module>"),
        (f"{SITE}/torch/cuda/__init__.py", "set_device"),
        last="RuntimeError: CUDA error: invalid device ordinal",
    )
    assert refine("user/config", text, LEX) == "user/config"
    # ... and a library's own choice of device stays the library's.
    chosen = _tb(
        ("/home/u/train.py", "<module>"),
        (f"{SITE}/accelerate/state.py", "__init__"),
        (f"{SITE}/torch/cuda/__init__.py", "set_device"),
        last="RuntimeError: CUDA error: invalid device ordinal",
    )
    assert refine("user/config", chosen, LEX) == "framework"


def test_a_library_calling_with_an_argument_its_callee_lacks_is_a_version_mismatch() -> None:
    # vllm-project/vllm#548: a script from vllm's main against an older vllm release.
    text = _tb(
        ("benchmark_latency.py", "main"),
        (f"{SITE}/vllm/entrypoints/llm.py", "__init__"),
        last="TypeError: __init__() got an unexpected keyword argument 'trust_remote_code'",
    )
    assert refine("user/code", text, LEX) == "user/software-incompatibility"


def test_a_views_shape_is_no_version_nor_setting() -> None:
    # pytorch/torchtitan#1513: torch's view refusing a tensor's strides, raised in torchtitan's
    # model code: the generic RuntimeError whose frames decide, not a version mismatch
    term = LEX.cause_of_record(
        "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
        "one dimension spans across two contiguous subspaces). Use .reshape(...) instead."
    )
    assert term is not None and term.origin and term.category == "user/code"


def test_a_librarys_own_module_lacking_what_its_code_asks_is_the_library() -> None:
    from l4_plugin.analysis.origin import own_module

    # deepspeedai/DeepSpeed#7649: DeepSpeed's engine asks its own sequence-parallel module for
    # the model-parallel rank (fixed in DeepSpeed): its bug, not two versions
    lacks = (
        "AttributeError: module 'deepspeed.runtime.sequence_parallel.parallel_state_sp' has no "
        "attribute 'get_model_parallel_rank'. Did you mean: 'get_sequence_parallel_rank'?"
    )
    text = _tb(
        ("train.py", "main"),
        ("/src/DeepSpeed/deepspeed/runtime/engine.py", "_get_ckpt_name"),
        last=lacks,
    )
    assert own_module(text, LEX)
    # transformers asking torch for a dtype the installed torch lacks: two versions
    other = _tb(
        ("train.py", "main"),
        (f"{SITE}/transformers/modeling_utils.py", "_load"),
        last="AttributeError: module 'torch' has no attribute 'float8_e4m3fn'",
    )
    assert not own_module(other, LEX)
    # NovaSky-AI/SkyRL#1178: Megatron-Core calls np.product, which NumPy 2 removed; NumPy's
    # module __getattr__ raises it, Megatron asked
    numpy2 = _tb(
        (f"{SITE}/megatron/core/dist_checkpointing/validation.py", "_validate_sharding"),
        (f"{SITE}/numpy/__init__.py", "__getattr__"),
        last="AttributeError: module 'numpy' has no attribute 'product'",
    )
    assert not own_module(numpy2, LEX)
    # the user's script asking a module: no library's own
    mine = _tb(("train.py", "main"), last="AttributeError: module 'deepspeed' has no attribute 'x'")
    assert not own_module(mine, LEX)
    assert not own_module("AttributeError: module 'deepspeed' has no attribute 'x'", LEX)
    # deepspeedai/DeepSpeed#7591: DeepSpeed's engine imports a subpackage its release left out
    left_out = _tb(
        (f"{SITE}/deepspeed/runtime/engine.py", "_configure_zero_optimizer"),
        last="ModuleNotFoundError: No module named 'deepspeed.runtime.superoffload'",
    )
    assert own_module(left_out, LEX)
    # ... but a compiled extension the install did not build is the user's build
    unbuilt = _tb(
        (f"{SITE}/apex/optimizers/fused_adam.py", "__init__"),
        last="ModuleNotFoundError: No module named 'apex.amp_C'",
    )
    assert not own_module(unbuilt, LEX)


def test_a_check_of_what_a_library_passed_is_no_check_of_the_settings() -> None:
    # deepspeedai/DeepSpeed#5477: DeepSpeed's pipeline engine all-reduces a tied weight's
    # gradient that is None; torch's argument check refuses it (fixed in DeepSpeed)
    text = _tb(
        ("train_pipeline.py", "main"),
        (f"{SITE}/deepspeed/runtime/pipe/engine.py", "_exec_reduce_tied_grads"),
        (f"{SITE}/torch/distributed/distributed_c10d.py", "_check_single_tensor"),
        last="RuntimeError: Invalid function argument. Expected parameter `tensor` to be of "
        "type torch.Tensor.",
    )
    assert refine("user/code", text, LEX) == "framework"
    # a check named for the settings it checks is the configuration's
    args = _tb(
        ("pretrain_gpt.py", "main"),
        ("/data/Megatron-LM/megatron/training/arguments.py", "_check_arg_is_not_none"),
        last="AssertionError: tokenizer_type must not be None",
    )
    assert refine("user/code", args, LEX) == "user/config"


def test_an_assertion_on_the_runs_settings_is_the_configuration() -> None:
    # maszhongming/MatchSum#11: the script checks the batch size against the GPUs it was given
    text = (
        "Traceback (most recent call last):\n"
        '  File "train_matching.py", line 150, in <module>\n'
        "    train_model(args)\n"
        '  File "train_matching.py", line 70, in train_model\n'
        "    assert args.batch_size % len(devices) == 0\n"
        "AssertionError"
    )
    assert refine("user/code", text, LEX) == "user/config"
    # the same under ranks' labels, a library's check of its config, with a message and carets
    megatron = (
        '[rank0]:   File "/opt/Megatron-LM/megatron/training/arguments.py", line 90, in fn\n'
        "[rank0]:     assert args.num_layers % args.transformer_pipeline_model_parallel_size == 0\n"
        "[rank0]:            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "[rank0]: AssertionError: number of layers should be divisible by the pipeline size"
    )
    assert refine("user/code", megatron, LEX) == "user/config"
    # an assert on the data or the model's state is the code's own check
    state = text.replace("assert args.batch_size % len(devices) == 0", "assert loss.isfinite()")
    assert refine("user/code", state, LEX) == "user/code"


def test_an_error_raised_while_parsing_arguments_is_the_configuration() -> None:
    # hiyouga/LlamaFactory#6268: the framework's argument parser refuses the launch.
    text = _tb(
        ("/home/u/LLaMA-Factory/src/llamafactory/train/tuner.py", "run_exp"),
        ("/home/u/LLaMA-Factory/src/llamafactory/hparams/parser.py", "get_train_args"),
        last="ValueError: DeepSpeed training needs a distributed launch.",
    )
    assert refine("user/code", text, LEX) == "user/config"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("libraries: [torch, 'not a name']\nentries: []\n", "libraries: expected a list"),
        ("config_functions: '('\nentries: []\n", "config_functions: invalid regex"),
        ("entries:\n  - {pattern: x, category: platform, alone: user/code}\n", "alone: only a"),
        (
            "entries:\n  - {pattern: x, category: platform, preparing: user/code}\n",
            "preparing: only a consequence",
        ),
        (
            "entries:\n  - {pattern: x, category: platform, cascade: true, preparing: soon}\n",
            "preparing: expected one",
        ),
        ("entries:\n  - {pattern: x, category: platform, local: cloud}\n", "local: expected one"),
        ("entries:\n  - {pattern: x, category: platform, origin: maybe}\n", "origin: expected"),
    ],
)
def test_bad_lexicon_keys_are_located_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "lexicon.yaml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError, match=rf"lexicon\.yaml: .*{message}"):
        Lexicon.load(path)


def test_a_record_cut_off_inside_a_traceback_says_its_last_exception() -> None:
    # NVIDIA/TransformerEngine#1123, as pasted: a chained traceback whose second half was cut
    # off after a frame's source line; its words are the exception it did print.
    text = (
        "Traceback (most recent call last):\n"
        '  File "./Megatron-LM/megatron/core/transformer/spec_utils.py", line 99, in build_module\n'
        "    return module(\n"
        "AssertionError: FlashAttention maximum version 2.5.8 is supported.\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "./Pai-Megatron-Patch/megatron_patch/model/qwen2/transformer/attention.py", '
        "line 359, in __init__\n"
        "    super().__init__("
    )
    assert last_line(text) == "AssertionError: FlashAttention maximum version 2.5.8 is supported."
    assert last_line(text + '\n  File "x.py", line 3, in f') == last_line(text)
    # a frame without a source line right before the exception: the exception ends it
    done = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "<frozen runpy>", line 198, in _run\n'
        "[rank1]: KeyError: x"
    )
    assert last_line(done) == "[rank1]: KeyError: x"
    # a cut traceback after an error line that said it; one with no exception: its last line
    said = (
        'RuntimeError: x\nTraceback (most recent call last):\n  File "a.py", line 3, in f\n    g()'
    )
    assert last_line(said) == "RuntimeError: x"
    assert (
        last_line('Traceback (most recent call last):\n  File "a.py", line 3, in f\n    g()')
        == "    g()"
    )


def test_a_traceback_that_ends_in_an_exception_is_no_mere_frames() -> None:
    # The frames-only consequence is a record of nothing but frames: one that ends with its
    # exception is read by that exception, one chained to another by its own words.
    tb = '  File "train.py", line 9, in main\n    step()\nValueError: bad shape (3, 4)'
    term = LEX.cause_of_record(tb)
    assert term is not None and not term.cascade
    chained = (
        "ValueError: x\n\nThe above exception was the direct cause of the following exception:"
        "\n\nRuntimeError: No space left on device"
    )
    term = LEX.cause_of_record(chained)
    assert term is not None and term.category == "hardware/storage"


def test_a_crash_faulthandler_reports_is_whose_code_the_crashed_thread_ran() -> None:
    from tests.unit.test_stacks import CRASH

    # its words are the line before the dump, not "Extension modules: …" after it
    assert last_line(CRASH) == "Fatal Python error: Segmentation fault"
    # (torchrun's --tee copy labels each line; a record holds no empty line)
    labelled = "\n".join(f"[default0]:{x}" for x in CRASH.splitlines() if x)
    assert last_line(labelled) == "[default0]:Fatal Python error: Segmentation fault"
    term = LEX.classify_record(CRASH)
    assert term is not None and term.category == "user/code" and term.origin
    # the user's pack_shard called ctypes (stdlib): theirs; the other thread's frames and the
    # torch wrapper outside it say nothing
    assert [f.function for f in frames_of(CRASH, LIBS)][-2:] == ["pack_shard", "string_at"]
    assert refine("user/code", CRASH, LEX) == "user/code"
    # the same crash inside a library's code is the framework's
    inside = CRASH.replace(
        '"/work/train.py", line 195 in pack_shard', f'"{SITE}/x/pack.py", line 1 in pack'
    )
    assert refine("user/code", inside, LEX) == "framework"


def test_a_faulthandler_stack_waiting_in_a_collective_is_a_consequence() -> None:
    stack = (
        "Timeout (0:05:00)!\n"
        "Thread 0x00007f16 (most recent call first):\n"
        f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
        '  File "/work/train.py", line 183 in save_checkpoint'
    )
    term = LEX.classify_record(stack)
    assert term is not None and term.cascade and term.category == "framework"


def test_a_long_traceback_ending_in_an_unknown_exception_is_read_in_one_pass() -> None:
    # The frames-only entry is tried on a whole record whose last line names nothing the
    # lexicon knows; a frame's indentation split two ways per frame made that 4^frames steps
    # (a 60-frame traceback never returned). It reads each frame once now.
    frames = "".join(
        f'  File "/env/lib/pkg/mod{i}.py", line {i}, in call{i}\n    inner(a, b)\n        ^^^^^\n'
        for i in range(60)
    )
    record = f"Traceback (most recent call last):\n{frames}pkg.errors.CustomThing: boom"
    assert LEX.classify_record(record) is None
    assert LEX.classify_record(f"Traceback (most recent call last):\n{frames}") is not None


def test_a_launchers_variable_missing_is_the_launch_not_any_missing_key() -> None:
    # A key of the program's own that only starts like a rank's is the program's error.
    term = LEX.cause_of_record("KeyError: 'ranking_score'")
    assert term is not None and term.category == "user/code"
    term = LEX.cause_of_record("KeyError: 'WORLD_SIZE'")
    assert term is not None and term.category == "user/config"


def test_the_watchdogs_timeout_of_a_named_collective_says_more_than_its_boilerplate() -> None:
    # (QwenLM/Qwen-VL#121) both are consequences; the timeout names which collective
    timeout = LEX.classify_record(
        "  what():  [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=923, "
        "OpType=REDUCE, Timeout(ms)=1800000) ran for 1806745 milliseconds before timing out."
    )
    boilerplate = LEX.classify_record(
        "[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data."
    )
    assert timeout is not None and boilerplate is not None
    assert timeout.cascade and boilerplate.cascade and timeout.weight > boilerplate.weight


def test_a_rule_or_box_edge_after_the_words_is_not_what_a_record_says() -> None:
    # Open MPI's help box follows the shell's error (horovod's troubleshooting guide); torchrun's
    # summary and Ascend's error report end with a rule: the words are the line before it.
    record = "bash: orted: command not found\n" + "-" * 74
    assert last_line(record) == "bash: orted: command not found"
    assert last_line("[default0]:x: y\n[default0]:" + "=" * 60) == "[default0]:x: y"
    term = default_lexicon().classify_record(record)
    assert term is not None and term.category == "user/config"


def test_of_one_moments_consequences_a_dumps_note_says_least() -> None:
    # A real run of ours (a rank left its loop early): each peer printed that its Flight Recorder
    # trace was written, then the traceback of its collective's failure; ranked alike, the
    # failure's words come first (fusion orders ties by these weights).
    note = LEX.cause_of_record(
        "[rank2] RuntimeError: flight recorder trace written to /tmp/run/fr/fr_trace_rank_2"
    )
    finalizer = LEX.cause_of_record(
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2a63daff60>"
    )
    said = LEX.cause_of_record(
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
        "peer [10.77.0.12]:6171"
    )
    assert said is not None and said.cascade
    assert note is not None and finalizer is not None
    assert note.weight < said.weight and finalizer.weight < said.weight


@pytest.mark.parametrize(
    "stamp", ["", "2026-11-27T15:55:55.974999808Z ", "2026-11-27T15:55:55+00:00 "]
)
def test_a_summarys_root_cause_row_is_read_under_a_collectors_stamps(stamp: str) -> None:
    # torchrun's failure summary after a rank's quoted traceback (a real run of ours, one rank
    # killed by SIGKILL), as the node's stderr and as a pod log's stamped lines: its table's
    # closing rule says nothing, the root cause's row says what happened.
    tail = [
        '    File "/work/train.py", line 261, in train',
        "      loss.backward()",
        "  RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Read error [10.77.0.12]:60819: Connection reset by peer. This is typically caused by a "
        "remote worker hanging or bugs in the application.",
        "  ",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  exitcode  : -9 (pid: 3319)  (SIGKILL)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 3319",
        "============================================================",
    ]
    term = LEX.classify_record("\n".join(stamp + line for line in tail))
    assert term is not None and not term.cascade and term.says_cause, term
    assert term.pattern.search("Signal 9 (SIGKILL)")
