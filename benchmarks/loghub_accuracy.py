"""Grouping / parsing accuracy of L4's masker + Drain on the LogHub 2k datasets (prints a table).

    /work/venv/bin/python benchmarks/loghub_accuracy.py [DATA_DIR]

DATA_DIR (default /work/shared/data/loghub) holds ``<System>/<System>_2k.log``, the corrected
ground truth ``<System>_2k.log_structured_corrected.csv`` and ``drain_settings.json``. The LogHub
header of each line is stripped with the dataset's ``log_format`` (as the LogPAI benchmark does),
then the Content goes through L4's shipped masking rules and ``TemplateMiner`` — the same code the
product runs — once with L4's defaults (sim_th 0.4, depth 5) and once with the benchmark's
per-dataset st/depth. GA and PA are computed as in LogPAI's evaluator.
"""

from __future__ import annotations

import csv
import inspect
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from l4_plugin.ingest.masking import Masker
from l4_plugin.ingest.templates import TemplateMiner

# The product's TemplateMiner defaults (what `l4 parse` and `l4 ingest` run with).
_DEFAULTS = inspect.signature(TemplateMiner).parameters
DEFAULT_SIM_TH = float(_DEFAULTS["sim_th"].default)
DEFAULT_DEPTH = int(_DEFAULTS["depth"].default)

SYSTEMS = ("HDFS", "Hadoop", "Spark", "Zookeeper", "OpenStack", "Thunderbird", "Linux", "Apache")
# Drain's published GA on the corrected 2k labels (Loghub-2.0 paper; README.md of the data folder)
DRAIN_GA = {
    "HDFS": 0.998,
    "Hadoop": 0.948,
    "Spark": 0.922,
    "Zookeeper": 0.967,
    "OpenStack": 0.733,
    "Thunderbird": 0.955,
    "Linux": 0.690,
    "Apache": 1.000,
}
DRAIN_PA = {
    "HDFS": 0.500,
    "Hadoop": 0.269,
    "Spark": 0.362,
    "Zookeeper": 0.497,
    "OpenStack": 0.018,
    "Thunderbird": 0.046,
    "Linux": 0.183,
    "Apache": 0.694,
}
_TOKEN = re.compile(r"<[A-Z]+>|<\*>")


def format_regex(log_format: str) -> re.Pattern[str]:
    """LogPAI's header regex: each <Field> a lazy group, spaces match any run of whitespace."""
    parts = re.split(r"(<[^<>]+>)", log_format)
    regex = ""
    for k, part in enumerate(parts):
        if k % 2 == 0:
            regex += re.sub(" +", r"\\s+", part)
        else:
            regex += f"(?P<{part.strip('<>')}>.*?)"
    return re.compile("^" + regex + "$")


def normalise(template: str) -> str:
    """Every mask token is a wildcard; adjacent wildcards are one; whitespace is single."""
    text = _TOKEN.sub("<*>", template)
    while "<*><*>" in text:
        text = text.replace("<*><*>", "<*>")
    return " ".join(text.split())


def evaluate(predicted: list[str], truth: list[str]) -> float:
    """Grouping accuracy: lines in predicted groups that coincide exactly with a true group."""
    true_sizes = Counter(truth)
    groups: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(predicted):
        groups[p].append(i)
    correct = 0
    for members in groups.values():
        labels = {truth[i] for i in members}
        if len(labels) == 1 and true_sizes[next(iter(labels))] == len(members):
            correct += len(members)
    return correct / len(truth)


def run(root: Path, system: str, masker: Masker, sim_th: float, depth: int) -> tuple[float, float]:
    settings = json.loads((root / "drain_settings.json").read_text())["loghub-2.0_Drain_settings"]
    header = format_regex(settings[system]["log_format"])
    folder = root / system
    with open(folder / f"{system}_2k.log_structured_corrected.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    raw = (folder / f"{system}_2k.log").read_text(encoding="utf-8", errors="replace").splitlines()
    contents = []
    for line, row in zip(raw, rows, strict=False):
        m = header.match(line.strip())
        contents.append(m.group("Content") if m else row["Content"])
    miner = TemplateMiner(sim_th=sim_th, depth=depth)
    masked = masker.mask("\n".join(c.replace("\n", " ") for c in contents)).split("\n")
    handles = [miner.add(m) for m in masked]
    miner.finish()
    templates = [miner.template_for(h) for h in handles]
    ga = evaluate([t.id for t in templates], [r["EventId"] for r in rows])
    pa = sum(
        normalise(t.text) == normalise(r["EventTemplate"])
        for t, r in zip(templates, rows, strict=True)
    ) / len(rows)
    return ga, pa


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/work/shared/data/loghub")
    settings = json.loads((root / "drain_settings.json").read_text())["loghub-2.0_Drain_settings"]
    masker = Masker.load()
    print(
        "| system | Drain GA | L4 GA (defaults) | L4 GA (bench st/depth) | Drain PA "
        "| L4 PA (defaults) |"
    )
    print("|---|---|---|---|---|---|")
    sums = [0.0, 0.0, 0.0, 0.0, 0.0]
    for system in SYSTEMS:
        ga, pa = run(root, system, masker, DEFAULT_SIM_TH, DEFAULT_DEPTH)
        ga_b, _ = run(root, system, masker, settings[system]["st"], settings[system]["depth"])
        row = (DRAIN_GA[system], ga, ga_b, DRAIN_PA[system], pa)
        sums = [s + v for s, v in zip(sums, row, strict=True)]
        print(f"| {system} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    print("| **average** | " + " | ".join(f"**{s / len(SYSTEMS):.3f}**" for s in sums) + " |")


if __name__ == "__main__":
    main()
