"""Inputs the security tests of tests/unit and tests/cluster share: a tiny job, a rule file."""

from __future__ import annotations

from pathlib import Path

LOG = "2024-05-01 10:00:00 INFO iteration 1/10 | loss 2.0\n"

BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)


def job_dir(root: Path, job_yaml: str | bytes | None = None) -> Path:
    (root / "node-1").mkdir(parents=True)
    (root / "node-1" / "rank0.log").write_text(LOG * 3)
    if isinstance(job_yaml, bytes):
        (root / "job.yaml").write_bytes(job_yaml)
    elif job_yaml is not None:
        (root / "job.yaml").write_text(job_yaml)
    return root


def rule_file(tmp_path: Path, **fields: str) -> Path:
    """A valid rule file with some fields replaced (values are YAML text)."""
    base = {
        "id": "port-busy",
        "title": "Port busy",
        "status": "draft",
        "category": "user/misoperation",
        "severity": "low",
        "description": "x",
        "role": "cause",
        "scope": "job",
        "detection": "\n  busy:\n    message|contains: Address already in use\n  condition: busy",
        "diagnosis": "'busy on {{ nodes | join(\", \") }}'",
    }
    base.update(fields)
    path = tmp_path / "user" / "misoperation" / "port-busy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}: {v}\n" for k, v in base.items()))
    return path
