"""Kept lines of many nodes packed into one ``l4-lines`` document, and unpacked again."""

from __future__ import annotations

from typing import Any

from l4_plugin.store import fields as F
from l4_plugin.store import line_packs
from l4_plugin.store.line_packs import members, own_line, pack_lines
from l4_plugin.store.packs import MAX_PACK_NODES


def _doc_id(*parts: object) -> str:
    return "/".join(str(p) for p in parts)


def _line(node: str, ms: int | None, *, pid: int = 7, rank: int | None = 0, **extra: Any) -> Any:
    doc: dict[str, Any] = {
        "message": f"W0315 01:10:35 {pid} run.py:779] Setting OMP_NUM_THREADS to 1",
        "host.name": node,
        "log.file.path": f"{node}/rank{rank}.log",
        F.JOB_ID: "j",
        F.TEMPLATE_ID: "t1",
        F.STAGE: "init",
        F.LINE: 3,
        F.GENERATION: "g",
        "log.level": "WARNING",
        "log.offset": 120,
    }
    if ms is not None:
        doc["@timestamp"] = ms
    if rank is not None:
        doc[F.RANK] = rank
    doc.update(extra)
    return (f"{node}-{ms}-{pid}", doc)


def test_lines_that_differ_in_digits_only_pack_and_unpack_exactly() -> None:
    docs = [_line(f"n{i:02d}", 1000 + 10 * (5 - i), pid=100 + i, rank=8 * i) for i in range(6)]
    docs[2][1][F.FOLDED] = 7  # another signature: stands for 8 ranks, not 1
    docs[3][1][F.UNTIL] = 5000
    docs[3][1][F.FOLDED] = 7
    out = pack_lines(docs, _doc_id)
    packs = [d for _, d in out if F.NODES in d]
    assert len(out) == 2 and len(packs) == 2  # {0, 1, 4, 5} and {2, 3}
    big = next(d for d in packs if d[F.NODES] == 4)
    # The representative is the earliest line: n05 (time 1000); the rest follow by time.
    assert big["host.name"] == ["n05", "n04", "n01", "n00"]
    assert big["message"] == docs[5][1]["message"] and big["@timestamp"] == 1000
    assert big[F.RANK] == 40 and big["log.file.path"] == "n05/rank40.log"
    assert big[F.UNTIL] == 1050  # the last of them
    back = {m.node: m for m in members(big)}
    for i in (0, 1, 4, 5):
        m, d = back[f"n{i:02d}"], docs[i][1]
        assert (m.message, m.ms, m.rank, m.path, m.line, m.offset, m.until) == (
            d["message"], d["@timestamp"], d[F.RANK], d["log.file.path"], 3, 120, None,
        )  # fmt: skip
    small = next(d for d in packs if d[F.NODES] == 2)
    assert small[F.FOLDED] == 7 and small[F.UNTIL] == 5000
    assert {m.node: m.until for m in members(small)} == {"n02": None, "n03": 5000}


def test_what_does_not_agree_stays_a_line_of_its_own() -> None:
    alone = [
        _line("a", 1),  # another word
        _line("b", 1, **{"log.level": "INFO"}),  # another level
        _line("c", 1, **{F.ITERATION: 4}),  # another iteration
        _line("d", 1, **{F.FLAGS: ["timeout"]}),
    ]
    alone[0][1]["message"] = "W0315 01:10:35 7 run.py:779] Setting OMP_NUM_THREADS to one"
    assert pack_lines(alone, _doc_id) == alone


def test_a_nodes_second_line_packs_with_the_others_second() -> None:
    docs = [_line(n, ms) for ms in (10, 20) for n in ("a", "b", "c")]
    out = pack_lines(docs, _doc_id)
    assert len(out) == 2 and all(d[F.NODES] == 3 for _, d in out)
    assert sorted(d["@timestamp"] for _, d in out) == [10, 20]
    assert len({i for i, _ in out}) == 2  # distinct ids


def test_packs_are_chunked_and_ids_do_not_depend_on_order() -> None:
    n = MAX_PACK_NODES + 3
    docs = [_line(f"n{i:04d}", 1000 + i) for i in range(n)]
    out = pack_lines(docs, _doc_id)
    assert sorted(d[F.NODES] for _, d in out if F.NODES in d) == [3, MAX_PACK_NODES]
    assert sum(d.get(F.NODES, 1) for _, d in out) == n
    again = pack_lines(list(reversed(docs)), _doc_id)
    assert sorted(i for i, _ in again) == sorted(i for i, _ in out)
    one_over = [_line(f"n{i:04d}", 1000 + i) for i in range(MAX_PACK_NODES + 1)]
    rest = [d for _, d in pack_lines(one_over, _doc_id) if F.NODES not in d]
    assert [d["host.name"] for d in rest] == [f"n{MAX_PACK_NODES:04d}"]  # a chunk of one


def test_own_line_reads_a_pack_as_one_nodes_line() -> None:
    docs = [_line(n, ms, pid=p, rank=r) for n, ms, p, r in (("a", 30, 1, 0), ("b", 10, 2, 8))]
    ((_, pack),) = pack_lines(docs, _doc_id)
    assert line_packs.is_pack(pack)
    rep = own_line(pack)
    assert rep["host.name"] == "b" and rep["@timestamp"] == 10 and rep[F.RANK] == 8
    asked = own_line(pack, ["z", "a"])
    assert asked["host.name"] == "a" and asked["message"] == docs[0][1]["message"]
    assert asked["@timestamp"] == 30 and asked[F.RANK] == 0 and F.UNTIL not in asked
    assert F.PACK not in asked and F.NODES not in asked
    # What the _source did not carry stays absent; a line of one node is returned as it is.
    trimmed = {k: pack[k] for k in ("message", "host.name", F.NODES, F.PACK)}
    assert set(own_line(trimmed, ["a"])) == {"message", "host.name"}
    assert own_line(docs[0][1]) is docs[0][1]


def test_an_untimed_line_is_never_the_representative_of_a_timed_one() -> None:
    docs = [_line("a", None, pid=1), _line("b", 50, pid=2)]
    ((_, pack),) = pack_lines(docs, _doc_id)
    assert pack["host.name"] == ["b", "a"] and pack["@timestamp"] == 50
    assert F.UNTIL not in pack


def test_own_line_reads_a_pack_the_cluster_returned_as_nested_objects() -> None:
    # Source filtering may give back {"host": {"name": [...]}, "l4": {"pack": ...}}.
    docs = [_line(n, ms, pid=p, rank=r) for n, ms, p, r in (("a", 30, 1, 0), ("b", 10, 2, 8))]
    ((_, pack),) = pack_lines(docs, _doc_id)
    nested = {
        "message": pack["message"],
        "@timestamp": pack["@timestamp"],
        "host": {"name": pack["host.name"]},
        "l4": {"rank": pack[F.RANK], "nodes": pack[F.NODES], "pack": pack[F.PACK]},
    }
    line = own_line(nested, ["a"])
    assert line == {
        "message": docs[0][1]["message"], "@timestamp": 30, "host.name": "a", F.RANK: 0,
    }  # fmt: skip
