"""The shipper configs and the ingest pipeline of ``ingest/`` agree with L4's own parsing.

There is no grok engine here (osmem has no ingest pipelines): ``Grok`` below expands the standard
grok patterns the pipeline uses into Python regexes — copied from the logstash-patterns-core
``grok-patterns`` file that Elasticsearch and OpenSearch ship — and runs the pipeline's grok and
date processors over real-looking lines, field by field against ``header.parse_header``.
"""

from __future__ import annotations

import calendar
import json
import re
from dataclasses import fields as dc_fields
from pathlib import Path
from typing import Any

import pytest
import yaml

from l4_plugin.ingest.header import infer_level, normalise_level, parse_header
from l4_plugin.ingest.index_source import RawFields

INGEST = Path(__file__).resolve().parents[2] / "ingest"
PIPELINE = json.loads((INGEST / "pipelines" / "l4-training-header.json").read_text())

# The standard patterns the pipeline refers to, as in logstash-patterns-core/patterns/legacy/
# grok-patterns (the set Elasticsearch's and OpenSearch's grok processors load by default).
STANDARD = {
    "INT": r"(?:[+-]?(?:[0-9]+))",
    "NONNEGINT": r"\b(?:[0-9]+)\b",
    "POSINT": r"\b(?:[1-9][0-9]*)\b",
    "NUMBER": r"(?:%{BASE10NUM})",
    "BASE10NUM": r"(?<![0-9.+-])(?>[+-]?(?:(?:[0-9]+(?:\.[0-9]+)?)|(?:\.[0-9]+)))",
    "WORD": r"\b\w+\b",
    "NOTSPACE": r"\S+",
    "SPACE": r"\s*",
    "DATA": r".*?",
    "GREEDYDATA": r".*",
    "YEAR": r"(?>\d\d){1,2}",
    "MONTHNUM": r"(?:0?[1-9]|1[0-2])",
    "MONTHNUM2": r"(?:0[1-9]|1[0-2])",
    "MONTHDAY": r"(?:(?:0[1-9])|(?:[12][0-9])|(?:3[01])|[1-9])",
    "MONTH": r"\b(?:[Jj]an(?:uary|uar)?|[Ff]eb(?:ruary|ruar)?|[Mm](?:a|ä)?r(?:ch|z)?|"
    r"[Aa]pr(?:il)?|[Mm]a(?:y|i)?|[Jj]un(?:e|i)?|[Jj]ul(?:y|i)?|[Aa]ug(?:ust)?|"
    r"[Ss]ep(?:tember)?|[Oo](?:c|k)?t(?:ober)?|[Nn]ov(?:ember)?|[Dd]e(?:c|z)(?:ember)?)\b",
    "HOUR": r"(?:2[0123]|[01]?[0-9])",
    "MINUTE": r"(?:[0-5][0-9])",
    "SECOND": r"(?:(?:[0-5]?[0-9]|60)(?:[:.,][0-9]+)?)",
    "TIME": r"(?!<[0-9])%{HOUR}:%{MINUTE}(?::%{SECOND})(?![0-9])",
    "ISO8601_TIMEZONE": r"(?:Z|[+-]%{HOUR}(?::?%{MINUTE}))",
    "TIMESTAMP_ISO8601": r"%{YEAR}-%{MONTHNUM}-%{MONTHDAY}[T ]%{HOUR}:?%{MINUTE}(?::?%{SECOND})?"
    r"%{ISO8601_TIMEZONE}?",
    "SYSLOGTIMESTAMP": r"%{MONTH} +%{MONTHDAY} %{TIME}",
}
_REF = re.compile(r"%\{(\w+)(?::([\w.@]+))?(?::(int|long|float|double))?\}")


class Grok:
    """A grok processor: ``%{NAME:field:type}`` expanded recursively; the first match wins."""

    def __init__(self, patterns: list[str], definitions: dict[str, str]) -> None:
        self.definitions = {**STANDARD, **definitions}
        self.fields: list[tuple[str, str | None]] = []
        self.regexes = [re.compile(self._expand(p)) for p in patterns]

    def _expand(self, pattern: str, depth: int = 0) -> str:
        assert depth < 20, f"recursive grok pattern {pattern!r}"

        def sub(m: re.Match[str]) -> str:
            name, field, kind = m.groups()
            assert name in self.definitions, f"unknown grok pattern {name}"
            inner = self._expand(self.definitions[name], depth + 1)
            if not field:
                return f"(?:{inner})"
            self.fields.append((field, kind))
            return f"(?P<g{len(self.fields) - 1}>{inner})"

        return _REF.sub(sub, pattern)

    def match(self, text: str) -> dict[str, Any] | None:
        for regex in self.regexes:
            m = regex.search(text)
            if m is None:
                continue
            out: dict[str, Any] = {}
            for group, value in m.groupdict().items():
                if value is None:
                    continue
                field, kind = self.fields[int(group[1:])]
                out[field] = int(value) if kind in ("int", "long") else value
            return out
        return None


_JAVA = {"yyyy": r"(?P<y>\d{4})", "MMM": r"(?P<mon>[A-Z][a-z]{2})", "MM": r"(?P<mo>\d{2})",
         "dd": r"(?P<d>\d{2})", "d": r"(?P<d>\d{1,2})", "HH": r"(?P<h>\d{2})",
         "mm": r"(?P<mi>\d{2})", "ss": r"(?P<s>\d{2})"}  # fmt: skip
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_ISO8601 = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[T ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<f>\d+))?(?P<z>Z|[+-]\d{2}:?\d{2})?"
)


def _java_regex(fmt: str) -> re.Pattern[str]:
    """A Java date format (the tokens the pipeline uses) as a full-match regex."""
    out, i = "", 0
    while i < len(fmt):
        if fmt[i] == "S":
            j = i
            while j < len(fmt) and fmt[j] == "S":
                j += 1
            out += rf"(?P<f>\d{{{j - i}}})"
            i = j
            continue
        for token in sorted(_JAVA, key=len, reverse=True):
            if fmt.startswith(token, i):
                out += _JAVA[token]
                i += len(token)
                break
        else:
            out += re.escape(fmt[i])
            i += 1
    return re.compile(out)


def date_processor(value: str, formats: list[str], year: int) -> float | None:
    """The pipeline's date processor: the first format that parses (UTC; no year → ``year``)."""
    for fmt in formats:
        m = _ISO8601.fullmatch(value) if fmt == "ISO8601" else _java_regex(fmt).fullmatch(value)
        if m is None:
            continue
        g = m.groupdict()
        month = _MONTHS.index(g["mon"]) + 1 if g.get("mon") else int(g["mo"])
        parts = (int(g.get("y") or year), month, int(g["d"]), int(g["h"]), int(g["mi"]))
        ts = calendar.timegm((*parts, int(g["s"]), 0, 0, 0))
        ts += float("0." + g["f"]) if g.get("f") else 0.0
        zone = g.get("z")
        if zone and zone != "Z":
            digits = zone[1:].replace(":", "")
            ts -= (1 if zone[0] == "+" else -1) * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        return ts
    return None


def run_pipeline(message: str, year: int = 2024) -> dict[str, Any]:
    """The pipeline's processors on one document ``{"message": ...}`` (flat dotted fields)."""
    doc: dict[str, Any] = {"message": message}
    for processor in PIPELINE["processors"]:
        (kind, spec), *_ = processor.items()
        if kind == "grok":
            if spec["field"] not in doc:
                assert spec.get("ignore_missing"), spec
                continue
            found = Grok(spec["patterns"], spec.get("pattern_definitions", {})).match(
                doc[spec["field"]]
            )
            if found is None:
                assert spec.get("ignore_failure"), f"grok {spec['tag']} failed on {message!r}"
                continue
            doc.update(found)
        elif kind == "date":
            if spec["field"] in doc:
                ts = date_processor(doc[spec["field"]], spec["formats"], year)
                assert ts is not None or spec.get("ignore_failure")
                if ts is not None:
                    doc[spec["target_field"]] = ts
                doc["_time_text"] = doc[spec["field"]]
        elif kind == "remove":
            for name in spec["field"]:
                doc.pop(name, None)
        else:
            raise AssertionError(f"processor {kind} has no emulation in this test")
    return doc


SAMPLES = [
    # PyTorch / torchrun (glog-style c10 lines behind rank prefixes, nested --tee prefixes)
    "[rank3]:[E1105 12:00:00.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=1, Timeout(ms)"
    "=600000) ran for 600011 milliseconds before timing out.",
    "[default0]:[rank8]:[W1105 12:00:01.5 ProcessGroupNCCL.cpp:1168] Warning: "
    "TORCH_NCCL_ASYNC_ERROR_HANDLING is deprecated",
    "[default1]:[rank9]:Traceback (most recent call last):",
    '[rank2]:  File "/workspace/train.py", line 281, in <module>',
    "[rank0]:RuntimeError: CUDA error: an illegal memory access was encountered",
    "E1023 09:13:42.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 5] NCCL watchdog thread "
    "terminated with exception",
    "W0326 11:49:00.000 4711 socket.cpp:663] [c10d] The client socket has failed to connect.",
    "[default5]:torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)",
    # NCCL
    "[rank1]:dgx-h100-017:2245:2890 [1] NCCL INFO Channel 00/32 : 0[0] -> 1[1] via P2P/IPC",
    "dgx-h100-018:1187:1302 [3] NCCL WARN NET/IB : Got async event : port error",
    "node-a07.cluster.local:99:100 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA",
    # DeepSpeed / Megatron-LM / HF Trainer / python logging
    "[rank0]:[2024-09-02 00:12:04,445] [INFO] [logging.py:96:log_dist] [Rank 0] Saving model "
    "checkpoint: /mnt/ckpt/global_step100/mp_rank_00_model_states.pt",
    "[2024-03-18 04:01:03,112] [WARNING] [stage3.py:1850:step] 4 pytorch allocator cache "
    "flushes since last step",
    "[rank0]: [2024-03-18 04:01:03] iteration      117/   1000 | consumed samples: 512 |",
    " [2024-03-18 05:00:00] iteration      118/   1000 | elapsed time per iteration (ms): 3.1",
    "[INFO|trainer.py:2048] 2024-05-03 10:11:12,345 >> ***** Running training *****",
    "[default0]:[WARNING|modeling_utils.py:4280] 2024-05-03 10:11:13,001 >> Some weights were "
    "not initialized",
    "2024-05-03 10:11:12,345 - torch.distributed - INFO - Added key: store_based_barrier_key:1",
    "2024-05-03 10:11:12,345 ERROR Training crashed at step 1120",
    "2024-05-03T10:11:12.123Z INFO loading shard 3",
    "2024-05-03T12:11:12+02:00 plain message with a zone",
    "WARNING:root:this is the logging.basicConfig layout",
    # Ascend CANN / HCCL
    "[ERROR] HCCL(12345,python):2024-05-03-10:11:12.123.456 [op_base.cc:974][36818][Init]"
    "HcclCommInitRootInfo failed",
    "[ERROR] 2024-05-21-11:57:54 (PID:927000, Device:3, RankID:3) ERR02200 DIST call hccl api "
    "failed.",
    "[INFO] plain bracketed level",
    # Slurm
    "slurmstepd: error: *** STEP 1234.0 ON node-a07 CANCELLED AT 2024-05-03T10:11:12 DUE TO "
    "TIME LIMIT ***",
    "srun: error: node-a07: task 3: Exited with exit code 1",
    # syslog / kernel / dmesg
    "May  3 10:11:12 node-a07 kernel: [12345.678901] NVRM: Xid (PCI:0000:3b:00): 79, GPU has "
    "fallen off the bus.",
    "Nov 23 01:02:03 node-b1 systemd[1]: Started Session 5 of user root.",
    "[ 4567.123456] mlx5_core 0000:3b:00.0: mlx5_cmd_out_err:838: ACCESS_REG(0x805) op_mod(0x1)",
    # no header at all
    "  successfully saved checkpoint at iteration     100 to /ckpt",
    "[rank4]:Segmentation fault (core dumped)",
]


@pytest.mark.parametrize("line", SAMPLES)
def test_pipeline_grok_agrees_with_the_header_parser(line: str) -> None:
    h = parse_header(line, 2024)
    doc = run_pipeline(line)
    assert doc.get("l4.body") == line[h.body_start :], "body"
    assert doc.get("l4.rank", doc.get("l4.header.rank")) == h.rank, "rank"
    assert doc.get("l4.header.host") == h.host, "host"
    level = normalise_level(doc.get("log.level")) if "log.level" in doc else None
    assert (level or infer_level(line[h.body_start :])) == h.level, "level"
    ts = doc.get("l4.header.timestamp")
    if h.timestamp is None:
        assert ts is None, f"pipeline found a time the parser does not: {doc.get('_time_text')}"
    else:
        assert ts is not None, "pipeline found no time"
        assert abs(ts - h.timestamp) < 1e-3, (doc.get("_time_text"), ts, h.timestamp)


def test_samples_cover_the_emitters() -> None:
    emitters = {parse_header(line, 2024).emitter for line in SAMPLES}
    assert emitters >= {
        "torch", "nccl", "deepspeed", "megatron", "hf", "python-logging", "hccl", "slurm",
        "kernel", "syslog", "plain",
    }  # fmt: skip
    assert len(SAMPLES) >= 30


def test_grok_expander_can_fail() -> None:
    grok = Grok(["^%{INT:n:int} %{WORD:w}$"], {})
    assert grok.match("12 abc") == {"n": 12, "w": "abc"}
    assert grok.match("x abc") is None
    with pytest.raises(AssertionError, match="unknown grok pattern"):
        Grok(["%{NOPE:x}"], {})


def test_pipeline_is_a_valid_ingest_pipeline_body() -> None:
    assert set(PIPELINE) <= {"description", "processors", "on_failure", "_meta", "version"}
    kinds = [next(iter(p)) for p in PIPELINE["processors"]]
    assert kinds[0] == "grok" and "date" in kinds
    for p in PIPELINE["processors"]:
        spec = next(iter(p.values()))
        for pattern in spec.get("patterns", []):
            # Every pattern anchors at the start: grok searches, and the first match wins.
            assert pattern.startswith("^"), pattern


def _yaml(name: str) -> Any:
    return yaml.safe_load((INGEST / name).read_text())


def test_filebeat_config_sets_the_from_index_defaults() -> None:
    cfg = _yaml("filebeat.yml")
    [inp] = cfg["filebeat.inputs"]
    assert inp["type"] == "filestream" and inp["id"]
    assert all(p.endswith(".log") for p in inp["paths"])
    set_fields: set[str] = set()
    for proc in inp["processors"]:
        if "dissect" in proc:
            d = proc["dissect"]
            assert d["target_prefix"] == ""
            set_fields |= set(re.findall(r"%\{([\w.]+)\}", d["tokenizer"]))
    set_fields -= {"l4.file"}  # dropped after the rank is taken from it
    # Filebeat itself writes these for every line of a filestream input.
    builtin = {"message", "@timestamp", "host.name", "log.file.path", "log.offset"}
    defaults = RawFields()
    wanted = {getattr(defaults, f.name) for f in dc_fields(RawFields)}
    assert wanted <= builtin | set_fields, wanted - builtin - set_fields
    convert = next(p["convert"] for p in inp["processors"] if "convert" in p)
    assert {"from": "l4.rank", "type": "integer"} in convert["fields"]
    # The path dissect works on the layout it documents.
    tokenizer = inp["processors"][0]["dissect"]["tokenizer"]
    parts = re.split(r"%\{([\w.?]+)\}", tokenizer)  # literal, key, literal, key, ..., literal
    regex = "".join(
        re.escape(p) if i % 2 == 0 else f"(?P<{p.replace('.', '_')}>[^/]+)"
        for i, p in enumerate(parts)
    )
    m = re.fullmatch(regex, "/shared/jobs/job-42/dgx-h100-017/rank3.log")
    assert m is not None and m["l4_job_id"] == "job-42" and m["l4_node"] == "dgx-h100-017"
    assert cfg["output.elasticsearch"]["index"].startswith("l4-raw")


def test_fluent_bit_config_sets_the_from_index_defaults() -> None:
    cfg = _yaml("fluent-bit.yaml")
    [tail] = cfg["pipeline"]["inputs"]
    assert tail["name"] == "tail"
    defaults = RawFields()
    assert tail["key"] == defaults.message
    assert tail["path_key"] == defaults.path and tail["offset_key"] == defaults.offset
    [lua] = cfg["pipeline"]["filters"]
    assert lua["name"] == "lua" and f"function {lua['call']}(" in lua["code"]
    assigned = set(re.findall(r'record\["([\w.@]+)"\] =', lua["code"]))
    assert {defaults.job, defaults.node, defaults.rank} <= assigned
    # The Lua path match, translated to a Python regex, finds job / node / rank.
    lua_pattern = re.search(r'string\.match\(path, "([^"]+)"\)', lua["code"])
    assert lua_pattern is not None
    regex = lua_pattern[1].replace("%d", r"\d").replace("-", r"\-")
    m = re.search(regex, "/shared/jobs/job-42/dgx-h100-017/rank3.log")
    assert m is not None and m.groups() == ("job-42", "dgx-h100-017", "rank3.log")
    [out] = cfg["pipeline"]["outputs"]
    assert out["name"] in ("es", "opensearch") and out["time_key"] == defaults.timestamp
