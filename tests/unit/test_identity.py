"""Which host a file is, or whether it is the job's own, from what its lines say."""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.ingest.identity import facts, short_name, subject
from l4_plugin.ingest.jobdir import scan
from l4_plugin.ingest.reader import read_blocks
from l4_plugin.ingest.sources import file_streams
from l4_plugin.records import JOB_NODE


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def _nccl(host: str, rank: int) -> str:
    return f"{host}:4242:4243 [{rank}] NCCL INFO Bootstrap : Using eth0:10.0.0.{rank + 1}<0>"


def test_a_files_own_host_from_its_nccl_prefix_banner_or_syslog_host() -> None:
    assert facts(["starting", _nccl("gpu-r20-u15", 0), "step 1"]).own == "gpu-r20-u15"
    # srun's task banner (a launch script's), torchrun's failure table (an FQDN), syslog
    assert facts(["[2025-07-26T23:13:09+08:00] task 1 on gpu-r09-u03 (SLURM_LOCALID=1)"]).own == (
        "gpu-r09-u03"
    )
    assert facts(["  host      : worker-0.hpc.example.org"]).own == "worker-0"
    assert facts(["Feb  6 18:16:22 ip-10-8-75-16 kernel: [1.0] x"]).own == "ip-10-8-75-16"
    # behind a launcher's rank prefix and a collector's stamp
    line = "2025-10-20T19:19:41.7Z [default7]:" + _nccl("pod-w-26", 7)
    assert facts([line]).own == "pod-w-26"
    # two hosts' NCCL lines alike: no host of its own (an interleaved stream)
    assert facts([_nccl("a-1", 0), _nccl("b-2", 1)] * 3).own is None
    assert facts(["master_addr=gpu-r01 rdzv_endpoint: gpu-r01:29500"]).own is None


def test_the_addresses_ranks_announce() -> None:
    got = facts([_nccl("hgx-b1-03", 5), _nccl("hgx-b1-03", 6)])
    assert got.addresses == (("10.0.0.6", "hgx-b1-03"), ("10.0.0.7", "hgx-b1-03"))
    # Ray's raylet names its own node by address only: the file's node is it
    raylet = "[2025-04-21 07:36:30,586 I 2293 2293] (raylet) node_manager.cc:525: [state-dump] "
    assert facts([raylet + "Node name: 10.83.41.81"]).addresses == (("10.83.41.81", ""),)


def test_what_a_launcher_or_scheduler_reports_about_a_host() -> None:
    names = {"gpu-r41-u15": "gpu-r41-u15", "w-0": "w-0", "10.36.11.141": "hgx-b17-16"}
    assert subject("srun: error: gpu-r41-u15: tasks 192-199: Terminated", names) == "gpu-r41-u15"
    assert subject("srun: error: Node failure on gpu-r41-u15", names) == "gpu-r41-u15"
    events = "9m30s  Normal  ExitedWithCode  pod/w-0   Pod: default.w-0 exited with code 137"
    assert subject(events, names) == "w-0"
    assert (
        subject("w-0    0/1     OOMKilled   0   54m   10.194.53.77   gpu-node-t7", names) == "w-0"
    )
    ray = "ray::_RayTrainWorker__execute() (pid=1163056, ip=10.36.11.141, actor_id=a7)"
    assert subject(ray, names) == "hgx-b17-16"
    # the batch host a scheduler's cancellation names is no subject; nor is an unknown host
    assert (
        subject("slurmstepd: error: *** JOB 7 ON gpu-r41-u15 CANCELLED AT 2025 ***", names) is None
    )
    assert subject("srun: error: other-host: task 3: Aborted", names) is None
    assert short_name("gpu-3.cluster.local") == "gpu-3" and short_name("10.1.2.3") == "10.1.2.3"


def _slurm_job(job: Path) -> None:
    for task, host in enumerate(["gpu-a1", "gpu-a1", "gpu-b2", "gpu-b2"]):
        _write(
            job / f"train-77-{task}.out",
            [f"[2025-07-26T23:13:09+08:00] task {task} on {host} (SLURM_LOCALID={task % 2})"]
            + [f"step {i} loss 2.0" for i in range(5)],
        )
    _write(
        job / "train-77.out",
        [
            "+ echo 'nodes: gpu-a1,gpu-b2'",
            "nodes: gpu-a1,gpu-b2",
            "srun: error: gpu-b2: task 3: Aborted (core dumped)",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        ],
    )
    _write(job / "syslog" / "gpu-b2.kern.log", ["Feb  6 18:16:22 gpu-b2 kernel: NVRM: Xid 79"])


def test_a_slurm_jobs_task_files_batch_output_and_kernel_logs(tmp_path: Path) -> None:
    _slurm_job(tmp_path / "job")
    files = scan(tmp_path / "job", workers=1).files
    by_file: dict[str, list[str]] = {}
    for f in files:
        by_file.setdefault(f.relative, []).append(f.node)
    assert by_file["train-77-0.out"] == ["gpu-a1"]
    assert by_file["train-77-3.out"] == ["gpu-b2"]
    assert by_file["syslog/gpu-b2.kern.log"] == ["gpu-b2"]
    # the batch script's output is the job's own; its line about gpu-b2 is gpu-b2's
    assert sorted(by_file["train-77.out"]) == sorted([JOB_NODE, "gpu-b2"])
    assert {f.kind for f in files if f.relative == "train-77.out"} == {"job"}
    streams = {(s.path, s.node): s for s in file_streams(files)}
    about = [line for b in streams[("train-77.out", "gpu-b2")].open() for line in b.lines]
    assert about == ["srun: error: gpu-b2: task 3: Aborted (core dumped)"]
    rest = [line for b in streams[("train-77.out", JOB_NODE)].open() for line in b.lines]
    assert rest[-1].startswith("srun: Job step aborted") and len(rest) == 3


def test_a_file_that_names_no_other_host_stays_its_own_node(tmp_path: Path) -> None:
    # One pasted log: nothing else names hosts, so nothing is the job's.
    _write(tmp_path / "job" / "slurm-123.out", ["srun: error: gpu-b2: task 3: Aborted", "x"])
    [f] = scan(tmp_path / "job", workers=1).files
    assert f.node == "slurm-123"


def test_ray_driver_lines_go_to_the_host_that_announced_the_address(tmp_path: Path) -> None:
    job = tmp_path / "job"
    for host, ip in (("hgx-1", "10.0.0.1"), ("hgx-2", "10.0.0.2")):
        _write(
            job / host / "worker-01.out",
            [f"{host}:1:1 [0] NCCL INFO Bootstrap : Using eth0:{ip}<0>"],
        )
    driver = ["Connected to Ray cluster.", "Training started with configuration:"]
    for i in range(6):
        ip = f"10.0.0.{1 + i % 2}"
        driver.append(f"(RayTrainWorker pid={40 + i}, ip={ip}) step {i} loss 2.0")
    driver += [
        "Traceback (most recent call last):",
        "TrainingFailedError: The Ray Train run failed.",
    ]
    _write(job / "driver.log", driver)
    files = [f for f in scan(job, workers=1).files if f.relative == "driver.log"]
    assert sorted(f.node for f in files) == sorted([JOB_NODE, "hgx-1", "hgx-2"])
    lines = {f.node: [line for b in file_streams([f])[0].open() for line in b.lines] for f in files}
    assert lines["hgx-2"] == ["step 1 loss 2.0", "step 3 loss 2.0", "step 5 loss 2.0"]
    assert lines[JOB_NODE][-1] == "TrainingFailedError: The Ray Train run failed."
    assert not any("step" in line for line in lines[JOB_NODE])


def test_kubernetes_pod_files_and_the_clusters_events(tmp_path: Path) -> None:
    job = tmp_path / "job"
    for pod in ("run-master-0", "run-worker-0"):
        _write(
            job / f"{pod}.log",
            [f"2025-10-20T18:35:32.7Z [entrypoint] 2025-10-20T20:35:32+02:00 host={pod} x"],
        )
    _write(
        job / "events.txt",
        [
            "LAST SEEN   TYPE     REASON       OBJECT              MESSAGE",
            "54m         Normal   Scheduled    pod/run-worker-0    Successfully assigned x",
            "9m          Warning  OOMKilling   node/gpu-node-7     Memory cgroup out of memory",
        ],
    )
    files = scan(job, workers=1).files
    nodes = sorted({f.node for f in files})
    assert nodes == sorted([JOB_NODE, "run-master-0", "run-worker-0"])
    assert next(b.lines for b in read_blocks(job / "events.txt"))[2].startswith("9m")


def test_a_files_name_that_is_its_hosts_domain_name_stays(tmp_path: Path) -> None:
    # NCCL prints the short host name; the collector named the file by the FQDN: the name wins.
    _write(tmp_path / "job" / "trn03.cluster.local-rank0.log", [_nccl("trn03", 0), "step 1"])
    [f] = scan(tmp_path / "job", workers=1).files
    assert (f.node, f.rank) == ("trn03.cluster.local", 0)


def test_a_launcher_agents_own_log_is_no_ranks() -> None:
    agent = [
        "[entrypoint] 2025-01-19T16:42:24-04:00 host=dgx-h012 torch=2.4.1",
        "W0119 16:42:26.1 384323 torch/distributed/run.py:793] ",
        "I0119 16:42:26.1 384323 torch/distributed/launcher/api.py:188] Starting elastic_operator",
        "  entrypoint       : /workspace/train.py",
        "  min_nodes        : 8",
        "I0119 16:42:29.3 384323 torch/distributed/elastic/agent/server/api.py:869] starting",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "========================================================",
        "train.py FAILED",
        "Failures:",
        "[1]:",
        "  time      : 2025-01-19_19:58:48",
        "Root Cause (first observed failure):",
        "[0]:",
    ]
    assert facts(agent).agent
    raylet = ["[2025-03-06 16:18:15,300 I 1608 1608] (raylet) main.cc:180: Setting cluster ID"] * 4
    assert facts(raylet).agent
    # torchrun --tee: the workers' lines among the agent's make a rank's output
    tee = agent[:3] + ["[default0]:step 1 loss 2.0", "[default1]:step 1 loss 2.1"] * 3
    assert not facts(tee).agent


@pytest.mark.parametrize(
    "line",
    [
        "train.py FAILED",
        "train.py FAILED \u00a0\t",
        "Failures:",
        "Failures:\u2003",
        "[1]:",
        "[12]:  \r",
        "Root Cause (first observed failure):",
        "[2025-03-06 16:18:15,300 I 1608 1608] (raylet) main.cc:180: x",
        "[2025-03-06 16:18:15,300 I 1608 1608] (gcs_server) gcs.cc:1: x",
        "(dashboard_agent) x",
        "I0119 torch/distributed/elastic/agent/server/api.py:869] starting",
        "torch.distributed.launcher.api: x",
        "[rank0]: torch ready:",
        "[rank0]: step 1 | loss 2.0 | time (ms): 12.5 |",
        "[rank0]: step 1 | loss 2.0 | lr:",
        "a FAILED b",
        "",
        " ",
    ],
)
def test_the_agent_lines_prefilter_agrees_with_the_regex(line: str) -> None:
    from l4_plugin.ingest.identity import _AGENT, _agent_line

    assert _agent_line(line) == (_AGENT.search(line) is not None)


def test_blank_and_indented_lines_do_not_count_against_an_agent() -> None:
    # (blank lines counted as seen would make three agent lines in seven no majority)
    agent = ["Failures:", "[1]:", "Root Cause (first observed failure):"]
    assert facts([*agent, "", "  x", "\t", "", "", "-----", ""]).agent


def test_every_test_a_line_takes_treats_all_digits_alike() -> None:
    """``facts`` counts a line of a digit shape it found naming no host as that shape's first
    line counted: every regex on the way must not tell one digit from another."""
    import re

    from l4_plugin.ingest import header, identity
    from l4_plugin.ingest.stages import digit_blind

    patterns = [v for v in vars(identity).values() if isinstance(v, re.Pattern)]
    patterns += [p for p, _ in identity._SUBJECTS]
    patterns += [header._RANK_PREFIX, header._SRUN_PREFIX, header._CRI, header._KUBECTL]
    patterns += [header._RAY]
    assert len(patterns) > 15 and all(digit_blind(p) for p in patterns)


def test_facts_of_lines_of_known_shapes_are_those_of_every_line_read() -> None:
    """The shapes ``facts`` remembers change nothing: the same facts as every line counted
    (``_Tally.add``), on lines where hosts, addresses and subjects differ only in digits."""
    import random

    from l4_plugin.ingest.identity import _ENOUGH, _Tally

    makers = [
        lambda g: (
            f"[rank{g.randrange(9)}]: [2024-07-13 06:15:{g.randrange(60):02d}] iteration "
            f"{g.randrange(999):>6}/ 2000 | loss {g.random():.3f}"
        ),
        lambda g: _nccl(f"gpu-{g.randrange(3)}", g.randrange(8)),
        lambda g: f"srun: error: node-{g.randrange(4)}: task {g.randrange(9)}: Killed",
        lambda g: f"I0713 04:45:53.4 59238 torch/distributed/run.py:779] agent {g.randrange(9)}",
        lambda g: f"Feb  6 18:16:{g.randrange(60):02d} ip-10-8-75-{g.randrange(3)} kernel: x",
        lambda g: f"[{g.randrange(3)}]:",
        lambda g: f"pod/trainer-{g.randrange(3)} Killed",
        lambda g: f"host=node-{g.randrange(2)} starting {g.randrange(99)}",
        lambda g: f"[state-dump] Node name: 10.0.0.{g.randrange(3)}",
        lambda g: "  File 'x.py', line 3",
        lambda g: "",
    ]
    for seed in range(30):
        g = random.Random(seed)
        lines = [g.choice(makers[: g.randrange(2, len(makers) + 1)])(g) for _ in range(600)]
        limit = g.choice((100, 300, 2000))
        every = _Tally()
        for i, line in enumerate(lines[:limit]):
            if every.evidence >= _ENOUGH and i >= 200:
                break
            every.add(line)
        assert facts(lines, limit) == every.facts(), seed
