"""store/packs.py without a server: which rollups are packed, and unpacking gives them back."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from l4_plugin.store import fields as F
from l4_plugin.store import packs


def _event(node: str, count: int = 3, first: int = 1000, level: str | None = "info") -> Any:
    doc: dict[str, Any] = {
        "message": f"iteration 5 on {node}",
        "host.name": node,
        "log.file.path": f"/logs/{node}/rank0.log",
        F.JOB_ID: "j",
        F.TEMPLATE_ID: "t1",
        F.TEMPLATE_TEXT: "iteration <*> on <*>",
        F.COUNT: count,
        F.COUNT_ALL: count,
        F.FIRST_POS: first // 10,
        F.LAST_POS: first // 10 + 5,
        F.RANKS: [int(node[-1]) * 8, int(node[-1]) * 8 + 1],
        F.STAGE: "training",
        F.GENERATION: "g",
        F.BUCKET: "it:5+1",
        F.ITERATION: 5,
        F.ITERATION_SPAN: 1,
        F.ITERATION_SECONDS: 1.5,
        "@timestamp": first,
        F.FIRST_TS: first,
        F.LAST_TS: first + 7,
    }
    if level:
        doc["log.level"] = level
    return (f"id-{node}-{count}", doc)


def _ids(*parts: object) -> str:
    return "pack:" + ":".join(str(p) for p in parts)


def test_nodes_that_agree_are_one_document_that_unpacks_to_theirs() -> None:
    events = [_event("n3", first=1300), _event("n1", first=1100), _event("n2", first=900)]
    out = packs.pack_events(events, _ids)
    assert len(out) == 1
    _, pack = out[0]
    assert pack["host.name"] == ["n1", "n2", "n3"]
    assert pack[F.NODES] == 3 and pack[F.COUNT] == 3 and pack[F.COUNT_ALL] == 9
    assert pack[F.FIRST_TS] == 900 and pack[F.LAST_TS] == 1307
    assert pack["message"] == "iteration 5 on n2"  # the earliest node's line
    assert F.RANKS not in pack and pack[F.PACK]["ranks"] == [[8, 9], [16, 17], [24, 25]]
    back = {r.node: r for r in packs.unpack(pack)}
    for _, doc in events:
        r = back[doc["host.name"]]
        assert (r.count, r.first_ts, r.last_ts, r.first_pos, r.last_pos) == (
            doc[F.COUNT],
            doc[F.FIRST_TS],
            doc[F.LAST_TS],
            doc[F.FIRST_POS],
            doc[F.LAST_POS],
        )
        assert (r.message, r.path, r.stage, r.iteration, r.span, r.level) == (
            doc["message"],
            doc["log.file.path"],
            "training",
            5,
            1,
            "info",
        )
        assert r.seconds == pytest.approx(1.5)


def test_nodes_that_differ_keep_their_own_documents() -> None:
    events = [_event("n1"), _event("n2", count=4), _event("n3", level="warning")]
    assert packs.pack_events(events, _ids) == events


def test_packs_are_chunked_and_a_lone_node_keeps_its_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(packs, "MAX_PACK_NODES", 2)
    events = [_event(f"n{i}") for i in range(5)]
    out = packs.pack_events(events, _ids)
    assert [d.get(F.NODES) for _, d in out] == [2, 2, None]
    assert out[2] == events[4]
    assert len({i for i, _ in out}) == 3


def test_reads_exclude_or_select_packs() -> None:
    q = {"term": {F.JOB_ID: "j"}}
    assert packs.without_packs(q)["bool"]["must_not"] == [{"exists": {"field": F.NODES}}]
    assert {"exists": {"field": F.NODES}} in packs.only_packs(q)["bool"]["filter"]


def test_only_the_store_reads_what_a_pack_keeps_per_node() -> None:
    """A reader outside ``store/`` that touched ``l4.pack`` (or the helpers that split packs
    from documents of one node) would be unpacking by hand: per-node reads of ``l4-events`` and
    ``l4-lines`` go through ``store/events.py`` and ``store/lines.py``."""
    import re
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "l4_plugin"
    unpacking = re.compile(
        r"\bF\.PACK\b|[\"']l4\.pack[\"'.]|\b(without_packs|only_packs|read_packs|own_line)\b"
        r"|\bline_packs\.members\b|from l4_plugin\.store\.(line_)?packs import"
        r"|from l4_plugin\.store import .*\b(line_)?packs\b"
    )
    found = [
        f"{path.relative_to(package)}:{n}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] != "store"
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if unpacking.search(line)
    ]
    # The write step packs what it writes: the lanes gather their nodes' event documents as
    # columns per signature (``owners``), the reducer packs them (``pipeline``).
    allowed = ("ingest/pipeline.py", "ingest/owners.py")
    found = [f for f in found if not f.startswith(allowed)]
    assert not found, "unpacking outside the store:\n" + "\n".join(found)


def _pack_documents(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """A pack made from its nodes' documents (what ``pack_event_columns`` made before it made
    packs from the columns directly): the reference it is checked against."""
    first = docs[0]
    out = {name: first[name] for name in (*packs._SHARED, F.ATTEMPT) if name in first}
    pack: dict[str, list[Any]] = {key: [d.get(name) for d in docs] for name, key in packs._OWN}
    out[F.PACK] = pack
    out["host.name"] = pack["hosts"]
    out["log.file.path"] = sorted(set(pack["paths"]))
    out[F.NODES] = len(docs)
    out[F.COUNT_ALL] = first[F.COUNT] * len(docs)
    firsts = [(d[F.FIRST_TS], i) for i, d in enumerate(docs) if d.get(F.FIRST_TS) is not None]
    earliest = docs[min(firsts)[1]] if firsts else min(docs, key=lambda d: d[F.FIRST_POS])
    out["message"] = earliest["message"]
    if firsts:
        out["@timestamp"] = out[F.FIRST_TS] = min(firsts)[0]
    lasts = [d[F.LAST_TS] for d in docs if d.get(F.LAST_TS) is not None]
    if lasts:
        out[F.LAST_TS] = max(lasts)
    out[F.FIRST_POS] = min(d[F.FIRST_POS] for d in docs)
    out[F.LAST_POS] = max(d[F.LAST_POS] for d in docs)
    seconds = [d[F.ITERATION_SECONDS] for d in docs if d.get(F.ITERATION_SECONDS) is not None]
    if seconds:
        out[F.ITERATION_SECONDS] = sum(seconds) / len(seconds)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_packs_made_from_columns_are_those_made_from_each_nodes_document(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(packs, "MAX_PACK_NODES", rng.choice((2, 3, 256)))
    events = []
    for i in range(rng.randint(1, 40)):
        node = f"n{rng.randint(0, 12)}"  # some nodes twice: ties in the order by node
        _, doc = _event(node, count=rng.choice((3, 3, 4)), first=rng.choice((900, 1000, 1100)))
        doc["message"] += f" #{i}"  # which node's line is the pack's shows
        for name in (F.FIRST_TS, F.LAST_TS, F.ITERATION_SECONDS, "log.level"):
            if rng.random() < 0.3:
                doc.pop(name)
        if F.FIRST_TS not in doc:
            doc.pop("@timestamp")
        doc[F.FIRST_POS] = rng.choice((5, 7, 9))
        doc["log.file.path"] = f"/logs/r{rng.randint(0, 3)}.log"  # nodes that share a file
        if rng.random() < 0.5:
            doc[F.ATTEMPT] = rng.choice((0, 1))
        events.append((f"id-{i}", doc))
    groups: dict[tuple[Any, ...], packs.EventColumns] = {}
    packs.add_events(groups, events)
    by_node = {
        sig: [(c.ids[i], c.doc(sig, i)) for i in range(len(c.ids))] for sig, c in groups.items()
    }
    want = packs.packed(by_node, _pack_documents, lambda key, start: _ids("pack", *key, start))
    got = packs.pack_event_columns(groups, _ids)
    # The same documents, in the same order, each field in its place (the bytes written).
    assert json.dumps(got) == json.dumps(want)
    assert any(F.NODES in d for _, d in got) or len(events) < 4
