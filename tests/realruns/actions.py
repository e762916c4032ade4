"""What the orchestration does to a running job: kill a rank, cut a node off, kill a DataLoader
worker. Each action is a callable polled every half second; it returns True once it has acted and
records what it did (and the step the job was at) in the run's facts."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import netns
from launch import Action, Node, last_step, workers


def attempt_of(nodes: list[Node]) -> int | None:
    for node in nodes:
        for _pid, env in workers(node):
            return int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return None


def when_ckpt(
    ckpt: Path, step: int, delay: float, attempt: int, act: Callable[[list[Node], dict], bool]
) -> Action:
    """Run act ``delay`` seconds after checkpoint ``step`` exists while ``attempt`` runs."""
    state: dict[str, float] = {}

    def poll(nodes: list[Node], facts: dict) -> bool:
        if "seen" not in state:
            if attempt_of(nodes) != attempt or not (ckpt / f"step_{step:06d}").exists():
                return False
            state["seen"] = time.monotonic()
        if time.monotonic() - state["seen"] < delay:
            return False
        return act(nodes, facts)

    return poll


def after(delay: float, act: Callable[[list[Node], dict], bool]) -> Action:
    """Run act ``delay`` seconds after the previous action of the same chain fired."""
    state: dict[str, float] = {}

    def poll(nodes: list[Node], facts: dict) -> bool:
        state.setdefault("t", time.monotonic())
        return time.monotonic() - state["t"] >= delay and act(nodes, facts)

    return poll


def chain(*steps: Action) -> Action:
    """Actions one after the other."""
    todo = list(steps)

    def poll(nodes: list[Node], facts: dict) -> bool:
        while todo and todo[0](nodes, facts):
            todo.pop(0)
        return not todo

    return poll


def note(facts: dict, nodes: list[Node], style: str, what: str) -> None:
    step = last_step(nodes, style)
    facts["events"].append(f"{time.strftime('%H:%M:%S')} {what} (last printed step {step})")
    facts.setdefault("fault_steps", []).append(None if step is None else step + 1)


def kill_rank(host: str, local_rank: str, style: str) -> Callable[[list[Node], dict], bool]:
    def act(nodes: list[Node], facts: dict) -> bool:
        node = next(n for n in nodes if n.host == host)
        for pid, env in workers(node):
            if env.get("LOCAL_RANK") == local_rank:
                what = f"SIGKILL to rank {env.get('RANK')} pid {pid} on {host}"
                note(facts, nodes, style, what)
                os.kill(pid, signal.SIGKILL)
                return True
        return False

    return act


def kill_loader_worker(
    host: str, local_rank: str, style: str
) -> Callable[[list[Node], dict], bool]:
    """SIGKILL one DataLoader worker process of a rank, as the kernel's OOM killer would."""

    def act(nodes: list[Node], facts: dict) -> bool:
        node = next(n for n in nodes if n.host == host)
        for pid, env in workers(node):
            if env.get("LOCAL_RANK") != local_rank:
                continue
            kids = sorted(
                int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            )
            if kids:
                what = f"SIGKILL to DataLoader worker pid {kids[-1]} of rank {env.get('RANK')}"
                note(facts, nodes, style, what + f" on {host}")
                os.kill(kids[-1], signal.SIGKILL)
                return True
        return False

    return act


def link(host: str, up: bool, style: str) -> Callable[[list[Node], dict], bool]:
    def act(nodes: list[Node], facts: dict) -> bool:
        node = next(n for n in nodes if n.host == host)
        netns.set_link(node.k, up)
        note(facts, nodes, style, f"link of {host} {'up' if up else 'down'}")
        return True

    return act
