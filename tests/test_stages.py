"""Stage and iteration rules on real-looking masked bodies and raw lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from l4_plugin.errors import ConfigError
from l4_plugin.ingest.parser import LineParser
from l4_plugin.ingest.stages import StageRules


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
    ],
)
def test_iteration_markers(rules: StageRules, raw: str, number: int) -> None:
    role = rules.role(_body(raw))
    assert role.stage == "training" and role.iteration is not None
    assert role.iteration.number_of(raw) == number


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
        ("[rank0]:[after training is done] datetime: 2024-03-18 05:00:00", "shutdown"),
    ],
)
def test_stage_switches(rules: StageRules, raw: str, stage: str) -> None:
    assert rules.role(_body(raw)).stage == stage


def test_ordinary_lines_have_no_role(rules: StageRules) -> None:
    role = rules.role(_body("[rank0]:RuntimeError: CUDA error: an illegal memory access"))
    assert role.stage is None and role.iteration is None


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
