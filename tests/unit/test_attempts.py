"""Which attempt of a restarted job a file or a line belongs to."""

from __future__ import annotations

from l4_plugin.ingest.attempts import (
    AttemptClock,
    folder_attempt,
    marked_attempt,
    path_attempts,
    previous_attempts,
)


def test_torchrun_log_dir_attempt_folders() -> None:
    assert folder_attempt("gpu-1/logs/job1_abc/attempt_1/0/stdout.log") == 1
    assert folder_attempt("gpu-1/attempt_0/3/stderr.log") == 0
    assert folder_attempt("gpu-1/torchrun.log") is None
    assert folder_attempt("attempt_2.log") is None  # a file's own name is no folder


def test_kubectl_previous_runs_beside_the_current_one() -> None:
    rels = ["job-worker-0.previous.log", "job-worker-0.log", "job-worker-1.log", "w2-previous.log"]
    assert previous_attempts(rels) == {
        "job-worker-0.previous.log": 0,
        "job-worker-0.log": 1,
        "w2-previous.log": 0,
    }
    assert path_attempts(["n/attempt_1/0/stdout.log", "p.previous.log", "p.log"]) == {
        "n/attempt_1/0/stdout.log": 1,
        "p.previous.log": 0,
        "p.log": 1,
    }


def test_markers_in_a_stream() -> None:
    # torchrun's rendezvous result names the attempt; its restart banner starts the next.
    assert marked_attempt("  restart_count=2", 0) == 2
    banner = (
        "I0323 02:56:53.591000 384323 torch/distributed/elastic/agent/server/api.py:894] "
        "[default] Worker group FAILED. 1/1 attempts left; will restart worker group"
    )
    assert marked_attempt(banner, 0) == 1
    dlrover = (
        "[default] Worker group FAILED, is failure node: False,"
        "2/3 attempts left; will restart worker group."
    )
    assert marked_attempt(dlrover, 1) == 2
    assert marked_attempt("SLURM_RESTART_COUNT=3", 0) == 3
    assert marked_attempt("Cannot restart workers with fatal error.", 0) is None
    assert marked_attempt("step 10 loss 0.25", 0) is None


def test_a_lines_time_says_its_attempt_on_its_node() -> None:
    clock = AttemptClock.from_firsts({("a", 0): 100.0, ("a", 1): 200.0, ("b", 0): 101.0})
    assert clock.attempts == [0, 1]
    assert clock.attempt("a", 50.0) == 0  # the agent's start-up before the workers' first line
    assert clock.attempt("a", 150.0) == 0
    assert clock.attempt("a", 200.0) == 1 and clock.attempt("a", 999.0) == 1
    assert clock.attempt("a", None) == 0
    assert clock.attempt("b", 300.0) == 0 and clock.attempt("c", 1.0) is None
    # A later attempt whose files start earlier (a clock step) does not reorder the attempts.
    odd = AttemptClock.from_firsts({("a", 0): 100.0, ("a", 1): 90.0})
    assert odd.attempt("a", 95.0) == 0
