"""A node that runs other versions than the rest of the job: its own software stack.

Every node of a job runs one image; the lines that state a version (NCCL's "NCCL version
2.21.5", a start-up banner's ``nccl=2.21.5 driver=550.90.07``, an error's "NCCL version …")
print the same value on every node. A template whose value differs on a few nodes from what
most nodes print names those nodes' stack as the odd one (a node left on an old image, a
driver not upgraded): NCCL's bootstrap then fails with truncated messages, collectives with
internal errors, and every rank times out. One template is one line shape: the value is what
masking took away, so it is read back from each node's own line (``JobData.version_lines``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# "key=value" of a banner, and "<Thing> version <value>" of a library or a driver.
_KEYED = re.compile(
    r"\b(nccl|torch|cuda|cudnn|driver|image|transformers|deepspeed|megatron|nemo)=(\S+)",
    re.IGNORECASE,
)
_STATED = re.compile(
    r"\b(NCCL|CUDA|cuDNN|[Dd]river|PyTorch|torch|HCCL)\s+[Vv]ersion[:\s]+v?(\d+(?:\.\d+)+[\w.+-]*)"
)
#: The share of nodes the common value must hold, and the most nodes an odd one may be.
_COMMON_SHARE = 0.75
_ODD_SHARE = 0.25
_MIN_NODES = 3


@dataclass(frozen=True, slots=True)
class OddVersion:
    """A node whose line states another version than most nodes' same line."""

    node: str
    template_id: str
    what: str  # "nccl"
    value: str  # "2.17.1"
    common: str  # "2.21.5"
    others: int  # nodes that print the common value

    @property
    def why(self) -> str:
        return f"{self.what} {self.value} where {self.others} nodes run {self.common}"


def odd_versions(lines: Iterable[tuple[str, str, str]]) -> tuple[OddVersion, ...]:
    """The nodes whose version lines ``(node, template, line)`` disagree with most nodes'."""
    values: dict[tuple[str, str], dict[str, str]] = {}
    for node, tid, line in lines:
        for what, value in _versions(line):
            values.setdefault((tid, what), {}).setdefault(node, value)
    found: list[OddVersion] = []
    for (tid, what), by_node in sorted(values.items()):
        if len(by_node) < _MIN_NODES:
            continue
        (common, n_common), *_ = Counter(by_node.values()).most_common(1)
        odd = sorted(n for n, v in by_node.items() if v != common)
        if n_common < _COMMON_SHARE * len(by_node) or len(odd) > _ODD_SHARE * len(by_node):
            continue
        found += [OddVersion(n, tid, what, by_node[n], common, n_common) for n in odd]
    return tuple(found)


def _versions(line: str) -> list[tuple[str, str]]:
    out = [(m.group(1).lower(), m.group(2).rstrip(",;")) for m in _KEYED.finditer(line)]
    out += [(m.group(1).lower(), m.group(2).rstrip(".,;")) for m in _STATED.finditer(line)]
    return out
