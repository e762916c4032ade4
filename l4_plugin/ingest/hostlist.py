"""Slurm's hostlist syntax: ``gpu-r[01-03,07]``, ``node[1-2]-ib[0-1]``, ``a,b[3-4]``.

A scheduler writes the nodes of a job this way (``SLURM_JOB_NODELIST``, ``squeue -o %N``,
``scontrol show job``'s ``NodeList=``). Ranges keep their zero padding (``[01-03]`` gives
``01 02 03``, as Slurm's ``hostlist_expand`` does); several bracket groups in one name give
their product. Expansion is bounded: a hostlist that names more than ``MAX_HOSTS`` hosts is an
error, never a loop over a billion names.
"""

from __future__ import annotations

import itertools
import re

#: The most hosts a hostlist may name (a job of 100,000 nodes is beyond any cluster's).
MAX_HOSTS = 100_000

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """A hostlist that is not Slurm's syntax or names too many hosts; the message says why."""


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested brackets at character {i + 1}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' at character {i + 1}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError("unbalanced '['")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _choices(group: str) -> list[str]:
    """The values of one bracket group's ``01-03,07``."""
    out: list[str] = []
    for item in group.split(","):
        m = _RANGE.match(item.strip())
        if m is None:
            raise HostlistError(f"not a number or range: {item.strip()!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"range goes down: {item.strip()!r}")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise HostlistError(f"range {item.strip()!r} names more than {MAX_HOSTS:,} hosts")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_one(name: str) -> list[str]:
    pieces = re.split(r"\[([^\]]*)\]", name)
    # pieces: text, group, text, group, ..., text
    texts = pieces[0::2]
    groups = [_choices(g) for g in pieces[1::2]]
    size = 1
    for g in groups:
        size *= len(g)
        if size > MAX_HOSTS:
            raise HostlistError(f"{name!r} names more than {MAX_HOSTS:,} hosts")
    out = []
    for combo in itertools.product(*groups):
        parts = [texts[0]]
        for value, text in zip(combo, texts[1:], strict=True):
            parts += [value, text]
        out.append("".join(parts))
    return out


def expand(hostlist: str | list[str]) -> list[str]:
    """The host names of a hostlist (or of a list of them), in order, without repeats."""
    items = [hostlist] if isinstance(hostlist, str) else list(hostlist)
    hosts: dict[str, None] = {}
    for item in items:
        for name in _split_top(str(item)):
            for host in _expand_one(name):
                hosts[host] = None
                if len(hosts) > MAX_HOSTS:
                    raise HostlistError(f"names more than {MAX_HOSTS:,} hosts")
    return list(hosts)
