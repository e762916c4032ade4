"""Tests of the job simulator (l4_simulate)."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from l4_plugin.cli import main
from l4_simulate import FAULT_KINDS, Truth, simulate
from l4_simulate.faults import CATEGORIES

SMALL = {"nodes": 4, "iterations": 30, "ranks_per_node": 4}


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _read(path: Path) -> list[str]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.decode("utf-8").splitlines()


def _node_of(job: Path, path: Path) -> str:
    rel = path.relative_to(job)
    if len(rel.parts) > 1:
        return rel.parts[0]
    return re.sub(r"-(rank\d+|dmesg|kern)\.log(\.gz)?$", "", rel.name)


def _logs(job: Path) -> dict[Path, list[str]]:
    return {p: _read(p) for p in sorted(job.rglob("*.log*"))}


def _matches(pattern: str, files: dict[Path, list[str]]) -> list[Path]:
    rx = re.compile(pattern)
    return [p for p, lines in files.items() if any(rx.search(line) for line in lines)]


@pytest.fixture(scope="module", params=sorted(FAULT_KINDS))
def generated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Truth]:
    fault = request.param
    out = tmp_path_factory.mktemp(fault)
    seed = sorted(FAULT_KINDS).index(fault) + 3
    return out, simulate(out, fault=fault, seed=seed, **SMALL)


def test_at_least_twelve_fault_kinds_across_the_taxonomy() -> None:
    real = {n: s for n, s in FAULT_KINDS.items() if n != "none"}
    assert len(real) >= 12
    assert {s.category for s in real.values()} <= set(CATEGORIES)
    assert len({s.category for s in real.values()}) >= 8


def test_truth_json_equals_returned_truth(generated: tuple[Path, Truth]) -> None:
    out, truth = generated
    on_disk = json.loads((out / "truth.json").read_text())
    assert on_disk == truth.to_dict()
    assert list(truth.indicators) == list(truth.root_indicators) + list(truth.cascade_indicators)
    assert truth.stage in (
        None,
        "init",
        "data_loading",
        "model_loading",
        "training",
        "checkpointing",
        "shutdown",
    )


def test_root_indicators_hit_faulty_nodes_and_never_baselines(
    generated: tuple[Path, Truth],
) -> None:
    out, truth = generated
    job = out / "job"
    files = _logs(job)
    if truth.fault == "none":
        assert truth.indicators == () and truth.faulty_nodes == ()
        return
    assert truth.root_indicators
    nodes_in_job = {_node_of(job, p) for p in files}
    assert set(truth.faulty_nodes) <= nodes_in_job
    faulty_files = {p: v for p, v in files.items() if _node_of(job, p) in truth.faulty_nodes}
    baseline_files = _logs(out / "baselines")
    for pattern in truth.root_indicators:
        assert _matches(pattern, faulty_files), pattern
        assert not _matches(pattern, baseline_files), pattern
    for pattern in truth.cascade_indicators:
        assert _matches(pattern, files), pattern
        assert not _matches(pattern, baseline_files), pattern


def test_node_scoped_root_lines_stay_on_the_culprit(generated: tuple[Path, Truth]) -> None:
    out, truth = generated
    if FAULT_KINDS[truth.fault].scope != "node":
        return
    job = out / "job"
    files = _logs(job)
    for pattern in truth.root_indicators:
        hosts = {_node_of(job, p) for p in _matches(pattern, files)}
        assert hosts == set(truth.faulty_nodes), pattern


def test_baselines_differ_in_nodes_and_succeed(generated: tuple[Path, Truth]) -> None:
    out, truth = generated
    job_meta = yaml.safe_load((out / "job" / "job.yaml").read_text())
    assert job_meta["status"] == ("succeeded" if truth.fault == "none" else "failed")
    assert job_meta["id"] == truth.job_id
    job_nodes = {_node_of(out / "job", p) for p in (out / "job").rglob("*.log*")}
    assert len(truth.baseline_jobs) == 2
    for bid in truth.baseline_jobs:
        root = out / "baselines" / bid
        meta = yaml.safe_load((root / "job.yaml").read_text())
        assert meta["status"] == "succeeded" and meta["id"] == bid
        assert {k: v for k, v in meta["config"].items() if k != "nodes"} == {
            k: v for k, v in job_meta["config"].items() if k != "nodes"
        }
        assert meta["config"]["nodes"] != job_meta["config"]["nodes"]
        nodes = {_node_of(root, p) for p in root.rglob("*.log*")}
        assert len(nodes) == meta["config"]["nodes"]
        assert not nodes & job_nodes


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a = simulate(tmp_path / "a", fault="gpu-xid", seed=11, **SMALL)
    b = simulate(tmp_path / "b", fault="gpu-xid", seed=11, **SMALL)
    simulate(tmp_path / "c", fault="gpu-xid", seed=12, **SMALL)
    assert a == b and _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_both_layouts_kernel_logs_and_valid_gzip_across_seeds(tmp_path: Path) -> None:
    layouts, kernel, gz = set(), 0, 0
    for seed in range(10):
        out = tmp_path / str(seed)
        simulate(
            out, fault="none", seed=seed, nodes=3, iterations=10, ranks_per_node=2, baselines=0
        )
        job = out / "job"
        layouts.add("nested" if any(p.is_dir() for p in job.iterdir()) else "flat")
        kernel += bool(list(job.rglob("*dmesg.log*")) + list(job.rglob("*kern.log*")))
        for path in job.rglob("*.gz"):
            gz += 1
            assert gzip.decompress(path.read_bytes())
    assert layouts == {"nested", "flat"}
    assert 0 < kernel < 10
    assert gz > 0


def test_hang_node_stops_printing_iterations_before_its_peers(tmp_path: Path) -> None:
    truth = simulate(
        tmp_path,
        fault="hang",
        seed=5,
        nodes=4,
        iterations=40,
        ranks_per_node=2,
        lines_per_iteration=3,
    )
    job = tmp_path / "job"
    it_rx = re.compile(r"iteration\s+(\d+)/|steps: (\d+) |(?:^|\]:)\s*\d+%\|[^|]*\| (\d+)/\d+ \[")
    last: dict[str, int] = {}
    for path, lines in _logs(job).items():
        node = _node_of(job, path)
        for line in lines:
            m = it_rx.search(line)
            if m:
                k = int(next(g for g in m.groups() if g))
                last[node] = max(last.get(node, 0), k)
    (culprit,) = truth.faulty_nodes
    assert truth.iteration is not None
    assert last[culprit] == truth.iteration - 1
    assert all(v == truth.iteration for n, v in last.items() if n != culprit)


def test_unknown_fault_is_a_config_error(tmp_path: Path) -> None:
    from l4_plugin.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown fault kind"):
        simulate(tmp_path, fault="cosmic-ray")


def test_l4_simulate_without_the_simulator_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # None in sys.modules makes ``import l4_simulate`` fail as on an install without the extra.
    monkeypatch.setitem(sys.modules, "l4_simulate", None)
    assert main(["simulate", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the simulator is not installed — l4 simulate")
    assert 'pip install "/path/to/l4[simulate]"' in err
    assert err.count("\n") == 1
    assert not (tmp_path / "out").exists()
