"""Facts read back from a finished run: where the ranks' Flight Recorder traces diverge, and which
rank's stack stands apart."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path


def fr_traces(failed: Path) -> dict[str, dict[int, dict]]:
    """attempt -> rank -> the JSON Flight Recorder dump."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(failed.glob("*/fr/attempt_*/*.json")):
        rank = int(path.name.removesuffix(".json").rsplit("_", 1)[1])
        out.setdefault(path.parent.name, {})[rank] = json.loads(path.read_text())
    return out


def divergence(traces: dict[int, dict], world: int) -> dict[str, object] | None:
    """The first collective of the default group at which the dumped ranks disagree."""
    seqs: dict[int, dict[int, tuple[str, str]]] = {}
    last: dict[int, int] = {}
    for rank, dump in traces.items():
        last[rank] = 0
        for e in dump.get("entries", []):
            if str(e.get("pg_id")) != "0" or e.get("is_p2p"):
                continue
            seq = int(e["collective_seq_id"])
            # sizes differ legitimately between the root and the others of a scatter, gather or
            # broadcast (and DCP uses them); they must agree in an all-reduce
            op = e["profiling_name"]
            sizes = json.dumps(e["input_sizes"]) if op.endswith("all_reduce") else ""
            seqs.setdefault(seq, {})[rank] = (op, sizes)
            last[rank] = max(last[rank], seq)
    for seq in sorted(seqs):
        got = seqs[seq]
        if len(got) == len(traces) and len(set(got.values())) == 1:
            continue
        ops = Counter(got.values())
        major = ops.most_common(1)[0][0]
        return {
            "collective_seq_id": seq,
            "op": major[0],
            "ranks_in_op": sorted(r for r, v in got.items() if v == major),
            "ranks_in_other_op": {
                str(r): f"{v[0]} {v[1]}".strip() for r, v in got.items() if v != major
            },
            "ranks_behind": sorted(r for r in traces if r not in got),
            "ranks_without_dump": sorted(set(range(world)) - set(traces)),
            "last_seq_by_rank": {str(r): last[r] for r in sorted(last)},
        }
    return None


def odd_stacks(failed: Path) -> dict[str, dict[str, object]]:
    """attempt -> the innermost main-thread frame of each rank and the ranks whose frame is rare."""
    out: dict[str, dict[str, object]] = {}
    for path in sorted(failed.glob("*/stacks/attempt_*/rank*.json")):
        try:
            threads = json.loads(path.read_text())
        except ValueError:
            continue
        main = next((t for t in threads if t.get("thread_name") == "MainThread"), None)
        if not main or not main.get("frames"):
            continue
        frames = [f"{f['name']} ({f['short_filename']}:{f['line']})" for f in main["frames"]]
        user = next((f for f in frames if "train.py" in f), frames[0])
        rank = int(path.stem.removeprefix("rank"))
        entry = out.setdefault(path.parent.name, {"innermost": {}, "in_train_py": {}})
        entry["innermost"][str(rank)] = frames[0]
        entry["in_train_py"][str(rank)] = user
    for entry in out.values():
        counts = Counter(entry["in_train_py"].values())
        if len(counts) > 1:
            rare = min(counts.values())
            entry["odd_ranks"] = (
                sorted(int(r) for r, f in entry["in_train_py"].items() if counts[f] == rare)
                if list(counts.values()).count(rare) == 1
                else []
            )
    return out


def hang_facts(failed: Path, world: int) -> dict[str, object]:
    out: dict[str, object] = {}
    fr = {a: divergence(t, world) for a, t in fr_traces(failed).items()}
    if any(fr.values()):
        out["flight_recorder"] = fr
    stacks = odd_stacks(failed)
    if stacks:
        out["stacks"] = stacks
    return out


def last_printed_step(failed: Path, rx: re.Pattern[str]) -> int | None:
    """The highest training step printed in the newest attempt that printed one."""
    by_attempt: dict[int, int] = {}
    for path in failed.glob("*/logs/*/attempt_*/*/*.log"):
        attempt = int(path.parent.parent.name.split("_")[1])
        for line in path.read_text(errors="replace").splitlines():
            m = rx.search(line)
            if m:
                by_attempt[attempt] = max(by_attempt.get(attempt, 0), int(m.group(1)))
    return by_attempt[max(by_attempt)] if by_attempt else None
