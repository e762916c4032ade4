"""Network namespaces that stand in for the nodes of a cluster on one host (see README.md).

A switch namespace holds a bridge; each node is a namespace with one veth into that bridge, an
address 10.77.0.<11+k>/24 and an ``/etc/netns/<ns>/hosts`` file (which ``ip netns exec`` mounts
over ``/etc/hosts``) so that the nodes resolve each other's host names.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

PREFIX = "l4rr-"
SWITCH = PREFIX + "sw"
SUBNET = "10.77.0."


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def node_ns(k: int) -> str:
    return f"{PREFIX}n{k}"


def node_addr(k: int) -> str:
    return f"{SUBNET}{11 + k}"


def switch_port(k: int) -> str:
    return f"{PREFIX}p{k}"


def build(hosts: list[str]) -> None:
    """A switch and one namespace per host; host k gets node_addr(k)."""
    teardown()
    ip("netns", "add", SWITCH)
    ip("-n", SWITCH, "link", "add", "br0", "type", "bridge")
    ip("-n", SWITCH, "link", "set", "br0", "up")
    ip("-n", SWITCH, "link", "set", "lo", "up")
    table = "127.0.0.1 localhost\n" + "".join(f"{node_addr(k)} {h}\n" for k, h in enumerate(hosts))
    for k, _host in enumerate(hosts):
        ns, port = node_ns(k), switch_port(k)
        ip("netns", "add", ns)
        ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", port, "netns", SWITCH)
        ip("-n", SWITCH, "link", "set", port, "master", "br0")
        ip("-n", SWITCH, "link", "set", port, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "addr", "add", node_addr(k) + "/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        etc = Path("/etc/netns") / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(table)


def set_link(k: int, up: bool) -> None:
    """Take node k's switch port down (the node is cut off) or up again."""
    ip("-n", SWITCH, "link", "set", switch_port(k), "up" if up else "down")


def ours() -> list[str]:
    listed = ip("netns", "list", check=False).stdout.split("\n")
    return [line.split(" ")[0] for line in listed if line.startswith(PREFIX)]


def kill_inside() -> None:
    """SIGKILL every process that runs in one of our namespaces."""
    for name in ours():
        for pid in ip("netns", "pids", name, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


def teardown() -> None:
    """Kill what runs in our namespaces, then delete them (and their veths with them)."""
    kill_inside()
    time.sleep(0.5)
    for name in ours():
        ip("netns", "del", name, check=False)
    for etc in Path("/etc/netns").glob(PREFIX + "*"):
        shutil.rmtree(etc, ignore_errors=True)
