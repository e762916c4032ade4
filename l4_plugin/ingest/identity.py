"""Which host a log file is, or whether it is the job's own: read from what its lines say.

A file's name does not always say which node wrote it. Slurm names per-task output files by task
id (``train-3176517-4.out``), a kernel log collected into ``syslog/`` sits beside the other hosts'
in one folder, and a platform adds files of the whole job (the batch script's output with
``srun: error: HOST: task 3: Aborted``, ``kubectl get events``, ``kubectl get pods``, Ray's
``driver.log``). The lines do say it: every NCCL line starts with the host that printed it
(``host:pid:tid [dev] NCCL INFO``), a syslog line carries its host, launch scripts print a banner
(``task 3 on gpu-r20-u15``, ``host=dgx-h144``), and each rank announces its address at start-up
(``NCCL INFO Bootstrap : Using eth0:10.36.50.59<0>``), which names a host that Ray's labels and
the peers' errors give only by address.

:func:`facts` reads the start of one file (pure: lines in); :func:`assign` decides, knowing every
file of the job, which node each file is: the directory a collector named after the node wins; a
file at the top (or in a folder of system logs) is the host its lines name, else the known host
its name is, else its name; a file that names other hosts and none of its own is the job's
(``records.JOB_NODE``), its lines about one host routed to that host.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from l4_plugin.ingest.header import outer_labels, prefix_end
from l4_plugin.ingest.masking import digit_key

_HOST = r"[A-Za-z0-9][\w.-]*[A-Za-z0-9]"
_IP = r"\d{1,3}(?:\.\d{1,3}){3}"
_IPV4 = re.compile(_IP)
# NCCL's own prefix (src/debug.cc): "host:pid:tid [dev] NCCL INFO …".
_NCCL = re.compile(r"(" + _HOST + r"):\d+:\d+ \[\d+\] NCCL ")
# NCCL bootstrap (src/bootstrap.cc): the interface and address this rank uses.
_BOOTSTRAP = re.compile(r"NCCL INFO Bootstrap ?: Using [\w.:-]+?:(" + _IP + r")<")
# Ray's raylet names its node by the node's address ("[state-dump] Node name: 10.83.41.81", the
# "node:10.83.41.81" resource, "node_ip_address=…").
_RAY_NODE = re.compile(r"(?:\bNode name: |\{node:|\bnode_ip_address[=:] ?)(" + _IP + r")\b")
# syslog / kern.log: "Mon DD HH:MM:SS host prog[pid]: …"
_SYSLOG = re.compile(
    r"(?:[A-Z][a-z]{2} )?[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?(?: \d{4})? ("
    + _HOST
    + r") [\w./-]+?(?:\[\d+\])?: "
)
# Launch scripts' banners: "host=dgx-h144", "hostname: gpu-3", "task 3 on gpu-r20-u15" (srun).
_BANNER = re.compile(
    r"(?:^|[\s\]])(?:host(?:name)?\s*[=:]\s*|HOSTNAME=|task \d+ on |[Rr]unning on (?:host )?)("
    + _HOST
    + r")\b"
)
#: Lines naming a host as the subject of what a launcher, scheduler or collector reports, each
#: with a text every match holds: a line without it is not searched (most lines of a training log
#: hold none, and nine searches over each of them made discovery cost more than the scan).
_SUBJECTS = tuple(
    (re.compile(p), needle)
    for p, needle in (
        (r"\bsrun: error: (" + _HOST + r"): tasks? [\d,\s-]+: ", "srun: error: "),
        (r"\bsrun: error: Node failure on (" + _HOST + r")", "srun: error: Node failure on "),
        # mpirun: "… noticed that process rank 3 … on node HOST exited on signal 9"
        (r"\bon node (" + _HOST + r") exited on signal", " exited on signal"),
        (r"^\[(" + _HOST + r"):\d+\] ", ""),  # Open MPI: "[host:pid] *** Process received signal"
        (r"\bpod/([a-z0-9][a-z0-9.-]*[a-z0-9])\b", "pod/"),  # kubectl get events: the object
        (r"\bPod: [\w-]+\.([a-z0-9][a-z0-9.-]*[a-z0-9]) exited", "Pod: "),  # training-operator
        (r"^([a-z0-9][a-z0-9.-]*[a-z0-9])\s+\d+/\d+\s+[A-Z]\w+", "/"),  # kubectl get pods: a row
        (r"\band address: (" + _IP + r")\b", "and address: "),  # Ray: node … marked dead
        (r"\bip=(" + _IP + r")[,)]", "ip="),  # Ray: a task's error names the worker's address
    )
)
_LEAD_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}) ")
_TOKEN = re.compile(r"[A-Za-z0-9][\w.-]*[A-Za-z0-9]")
# A launcher agent's own lines: torchrun's elastic agent (glog headers since torch 2.4 name its
# source file, "torch/distributed/elastic/agent/server/api.py:…]"; older releases log through
# "torch.distributed.elastic…" loggers) and Ray's node daemons ("(raylet)", "(gcs_server)").
_AGENT = re.compile(
    r"torch[./]distributed[./](?:elastic|run\.py|launcher)|\((?:raylet|gcs_server|\w+_agent)\)"
    # the failure summary the agent prints (torch/distributed/elastic/multiprocessing/errors)
    r"|^(?:\[\d+\]:|Failures:|Root Cause \(first observed failure\):|\S+ FAILED)\s*$"
)
_AGENT_LINES = 3
_AGENT_SHARE = 0.5
#: How many of a file's first lines are read for its facts.
FACT_LINES = 2000
#: Own-host evidence lines after which the rest need not be read.
_ENOUGH = 8
_OWN_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What the start of one file says of who wrote it."""

    #: The host its own lines name (NCCL prefix, syslog host, a banner); None: none or several.
    own: str | None = None
    #: (address, host) pairs its ranks announced; host "" for the file's own node (Ray's
    #: raylet names no host, only the address of the node it runs on).
    addresses: tuple[tuple[str, str], ...] = ()
    #: Hosts (or addresses) its lines name as the subject of a launcher's or scheduler's report.
    named: tuple[str, ...] = ()
    #: Most of its lines are a launcher agent's own (torchrun's elastic agent, Ray's raylet):
    #: what it prints says nothing of whether the node's training processes still run.
    agent: bool = False


def _body(line: str) -> str:
    """The line less a collector's labels and stamp (``kubectl logs --timestamps``) and launcher
    rank prefixes."""
    if line[:1].isdigit() and (m := _LEAD_TIME.match(line)) is not None:
        line = line[m.end() :]
    end = prefix_end(line)
    if not end and line[:1] in "0123456789[(":
        end = outer_labels(line)[2]
    return line[end:].lstrip() if end else line


def facts(lines: Iterable[str], limit: int = FACT_LINES) -> FileFacts:
    """The facts of a file from its first ``limit`` lines.

    Most lines of a file say nothing of who wrote it, and lines of one digit shape (their
    ``digit_key``) say the same: every test a line takes (``_body``'s, the needles, the regexes,
    which ``tests/unit/test_identity.py`` checks) treats all digits alike. So a shape found to
    name no host is not looked at again: its later lines only count as it did (seen, agent's).
    """
    tally = _Tally()
    quiet: dict[str, tuple[int, int]] = {}  # digit shape -> what a line of it adds to the counts
    it = iter(lines)
    i = 0
    while i < limit:
        block = list(itertools.islice(it, min(_FACT_BLOCK, limit - i)))
        if not block:
            break
        keys = digit_key("\n".join(block)).split("\n")
        if len(keys) != len(block):  # a line holding "\n": shapes line by line
            keys = list(map(digit_key, block))
        for line, key in zip(block, keys, strict=True):
            if tally.evidence >= _ENOUGH and i >= 200:
                return tally.facts()
            i += 1
            counts = quiet.get(key)
            if counts is None:
                counts = tally.add(line)
                if counts is not None:
                    quiet[key] = counts
            else:
                tally.seen += counts[0]
                tally.agent += counts[1]
    return tally.facts()


#: Lines ``facts`` takes the digit shapes of at a time.
_FACT_BLOCK = 256


class _Tally:
    """What a file's lines said so far (``facts``)."""

    def __init__(self) -> None:
        self.own: Counter[str] = Counter()
        self.addresses: dict[str, str] = {}
        self.named: dict[str, None] = {}
        self.evidence = self.seen = self.agent = 0

    def add(self, line: str) -> tuple[int, int] | None:
        """Count one line; when it names no host (no address, own host or subject), what it
        added to ``seen`` and ``agent``, else None."""
        said = False
        seen = agent = 0
        first = line[:1]
        if (first.isalnum() or first in ("_", "[", "(")) and not line.startswith("Traceback"):
            # A line that starts with a word character, "[" or "(" (so is not blank): a block's
            # indented lines and a table's rules say nothing of who printed it.
            seen = 1
            agent = int(_agent_line(line[:160]))
        self.seen += seen
        self.agent += agent
        body = _body(line)
        if "ode" in body and (ray := _RAY_NODE.search(body)) is not None:
            self.addresses.setdefault(ray.group(1), "")  # Ray names a node by its address
            said = True
        host = _own_host(body)
        if host is not None:
            self.own[host] += 1
            self.evidence += 1
            said = True
            if "Bootstrap" in body and (b := _BOOTSTRAP.search(body)) is not None:
                self.addresses.setdefault(b.group(1), host)
        if "[" in body[:1] or ": error: " in body or "=" in body or "pod" in body.lower():
            for subject, needle in _SUBJECTS:
                m = subject.search(body) if needle in body else None
                if m is not None:
                    self.named[m.group(1)] = None
                    said = True
                    break
        return None if said else (seen, agent)

    def facts(self) -> FileFacts:
        total = sum(self.own.values())
        top = self.own.most_common(1)
        mine = top[0][0] if top and top[0][1] >= _OWN_SHARE * total else None
        is_agent = self.seen >= _AGENT_LINES and self.agent >= _AGENT_SHARE * self.seen
        return FileFacts(mine, tuple(self.addresses.items()), tuple(self.named), is_agent)


def _agent_line(text: str) -> bool:
    """Whether ``_AGENT`` finds an agent's line in ``text``, searched only when the text holds
    what each of its matches does: "torch", "_agent)", "(raylet)" or "(gcs_server)", else (a
    failure summary's line) an end in ":" or "FAILED" (most lines of a rank's log have none)."""
    if not (
        "torch" in text
        or "_agent)" in text
        or "(raylet)" in text
        or "(gcs_server)" in text
        or text.rstrip().endswith((":", "FAILED"))
    ):
        return False
    return _AGENT.search(text) is not None


def _own_host(body: str) -> str | None:
    """The host a line says printed it: its NCCL prefix, syslog host or launch banner (a
    domain name as its host's short name: torchrun's failure table prints the FQDN, NCCL the
    host name)."""
    if " NCCL " in body:
        m = _NCCL.match(body)
        if m is not None:
            return short_name(m.group(1))
    if body[:1].isupper() and (m := _SYSLOG.match(body)) is not None:
        return short_name(m.group(1))
    if "host" in body or "task " in body or "unning on" in body or "HOSTNAME" in body:
        m = _BANNER.search(body[:300])
        if m is not None and not m.group(1).isdigit():
            return short_name(m.group(1))
    return None


def short_name(host: str) -> str:
    """A host's name less its domain (``gpu-3.cluster.local`` -> ``gpu-3``); an address as
    it is."""
    if "." not in host or _IPV4.fullmatch(host):
        return host
    return host.split(".", 1)[0]


def subject(line: str, hosts: Mapping[str, str]) -> str | None:
    """The known host a line of a job's own file reports about (``hosts``: name or address ->
    host), None when it names none or several."""
    body = _body(line)
    for pattern, needle in _SUBJECTS:
        m = pattern.search(body) if needle in body else None
        if m is not None:
            return hosts.get(m.group(1)) or hosts.get(short_name(m.group(1)))
    return None


def lists_hosts(line: str, hosts: Mapping[str, str]) -> bool:
    """Whether a line names two or more of the job's hosts (a node list, a hostfile): what a
    file about the whole job prints, never one rank."""
    seen: set[str] = set()
    for token in _TOKEN.findall(line):
        host = hosts.get(token)
        if host is not None:
            seen.add(host)
            if len(seen) >= 2:
                return True
    return False


def address_host(addresses: Mapping[str, str], known: Iterable[str]) -> dict[str, str]:
    """Address -> host: what the ranks announced, and the addresses cloud hosts are named
    after (EC2's ``ip-10-2-22-194`` is 10.2.22.194)."""
    out = dict(addresses)
    for host in known:
        m = re.fullmatch(r"ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(?:\..*)?", host)
        if m is not None:
            out.setdefault(".".join(m.groups()), host)
    return out
