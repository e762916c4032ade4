"""Peers name the culprit: the job's address book and the nodes its failure evidence points at.

When a node dies or its link fails, the loudest nodes are often its neighbours: NCCL, Gloo and
c10d on the other end of a broken connection report the failure and name the peer by address
(``NET/IB : Got completion from peer 10.0.3.7<4711>``, ``Connection closed by remote peer``,
``Connection reset by peer [10.0.3.7]:5555``, ``failed to connect to [host]:29500``). Every rank
announces its own addresses at start-up (``NCCL INFO Bootstrap : Using eth0:10.0.3.7``, NCCL's
``OOB eth0:…``, ``NET/Socket : Using [0]eth0:…``, HCCL's ``local ip …``) and NCCL prefixes its
lines with the host name. From those the job's address book maps an address or host name to the
node that owns it; an error line that names an address owned by *another* node is a witness
statement against that node. A node named by its peers is a suspect however quiet it was; a loud
node whose evidence is about a peer is a witness, not the culprit.

Pure: lines in, :class:`PeerResult` out.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

_IP = r"(\d{1,3}(?:\.\d{1,3}){3})"
_IPV4 = re.compile(r"(?<![\w.])" + _IP + r"(?![\d.]|\w)")
_HOST = re.compile(r"(?<![\w.-])([A-Za-z][\w-]*(?:\.[\w-]+)*)(?![\w-])")
#: Phrases in which a line states its own node's address (not a peer's).
_OWN_ADDRESS = (
    re.compile(r"\bBootstrap\s*:\s*Using\s+\[?\d*\]?[\w.-]+:" + _IP),
    re.compile(r"\bOOB\s+[\w.-]+:" + _IP),
    re.compile(r"NET/Socket\s*:\s*Using\s+(?:\[\d+\][\w.-]+:" + _IP + r"[^\s;]*\s*)+"),
    re.compile(r"\blocal[ _]?ip\s*[:=\[]?\s*" + _IP, re.IGNORECASE),
    re.compile(r"\blocalGid\s+::ffff:" + _IP),
    # Ray's raylet, in its periodic state dump: the node's own name (its IP unless set) and the
    # resource Ray gives every node, "node:<its IP>"
    re.compile(r"\[state-dump\] Node name:\s*" + _IP),
    re.compile(r"\bInitialConfigResources:\s*\{[^}]*?\bnode:" + _IP),
)
#: The host name a line carries of its own node: NCCL's "host:pid:tid [dev] NCCL" prefix,
#: torchrun's failure summary ("host : trn0219").
_OWN_HOST = (
    re.compile(r"(?:^|\]:|\s)([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL\b"),
    re.compile(r"^\s*host\s*:\s*([A-Za-z][\w.-]*)\s*$", re.MULTILINE),
)


def own_addresses(message: str) -> set[str]:
    """Addresses and host names a line states as its own node's."""
    out: set[str] = set()
    for pattern in _OWN_ADDRESS:
        for m in pattern.finditer(message):
            out.update(g for g in m.groups() if g)
            # "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>": every interface
            out.update(_IPV4.findall(m.group(0)))
    for pattern in _OWN_HOST:
        out.update(m.group(1).lower() for m in pattern.finditer(message))
    return out


class AddressBook:
    """Address (IPv4 or host name, lower case) → the node that owns it.

    Node names are host names too (a folder per host), with their short form; an address
    announced by two nodes (loopback, a container bridge) belongs to nobody.
    """

    def __init__(self, nodes: Sequence[str], announcements: Iterable[tuple[str, str]]) -> None:
        claims: dict[str, set[str]] = {}
        for node in nodes:
            for alias in {node.lower(), node.lower().split(".")[0]}:
                claims.setdefault(alias, set()).add(node)
        for node, message in announcements:
            for addr in own_addresses(message):
                claims.setdefault(addr, set()).add(node)
                if not _IPV4.fullmatch(addr):
                    claims.setdefault(addr.split(".")[0], set()).add(node)
        self.owner = {a: next(iter(ns)) for a, ns in claims.items() if len(ns) == 1}

    def addresses_of(self, node: str) -> set[str]:
        """Every address the book gives to ``node``."""
        return {a for a, n in self.owner.items() if n == node}

    def named(self, message: str) -> set[str]:
        """The nodes a line names by an address or host name of theirs."""
        out = {self.owner[ip] for ip in _IPV4.findall(message) if ip in self.owner}
        for m in _HOST.finditer(message):
            word = m.group(1).lower()
            owner = self.owner.get(word)
            if owner is not None and not _IPV4.fullmatch(word):
                out.add(owner)
        return out


@dataclass(frozen=True, slots=True)
class NamedNode:
    """A node that other nodes' failure evidence names."""

    node: str
    witnesses: tuple[str, ...]
    templates: tuple[str, ...]
    share: float  # witnesses relative to the most-named node's


@dataclass(frozen=True, slots=True)
class PeerResult:
    """Who names whom: suspects named by peers, and the witnesses that name them."""

    named: tuple[NamedNode, ...]
    witnesses: dict[str, tuple[str, ...]]  # witness node → the nodes it names
    addresses: int  # size of the address book

    @property
    def nodes(self) -> tuple[str, ...]:
        """Named nodes, most witnesses first."""
        return tuple(n.node for n in self.named)


def name_peers(
    nodes: Sequence[str],
    announcements: Iterable[tuple[str, str]],
    statements: Iterable[tuple[str, str, str]],
    faulted: Collection[str] = (),
) -> PeerResult:
    """Build the address book from ``announcements`` (node, line) and read the ``statements``
    (node, template id, line: the failure evidence) for the other nodes they name.

    A line never names its own node (its own addresses are in it: "localGid", "local ip"), and
    a statement names another node only by an address the book gives that node. A node in
    ``faulted`` reported a fault of its own device or link: when its port goes down, its
    transfers fail with the peer's address in the error, so what it says of a peer is its own
    fault's consequence, not a statement against the peer.
    """
    book = AddressBook(nodes, announcements)
    against: dict[str, set[str]] = {}
    via: dict[str, set[str]] = {}
    by_witness: dict[str, set[str]] = {}
    for witness, tid, message in statements:
        if witness in faulted:
            continue
        own = own_addresses(message)
        for target in book.named(message):
            if target == witness:
                continue
            # An address the line itself says is local is not a peer's, whoever owns it.
            if own and book.addresses_of(target) & own:
                continue
            against.setdefault(target, set()).add(witness)
            via.setdefault(target, set()).add(tid)
            by_witness.setdefault(witness, set()).add(target)
    top = max((len(w) for w in against.values()), default=0)
    named = sorted(
        (
            NamedNode(t, tuple(sorted(w)), tuple(sorted(via[t])), len(w) / top)
            for t, w in against.items()
        ),
        key=lambda n: (-len(n.witnesses), n.node),
    )
    return PeerResult(
        named=tuple(named),
        witnesses={w: tuple(sorted(ts)) for w, ts in sorted(by_witness.items())},
        addresses=len(book.owner),
    )
