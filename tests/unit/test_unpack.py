"""Reading packs back: ``packs.unpack`` and ``events.JobEvents.table``'s folding of the packs'
nodes give what the plain per-node code (kept here as the reference) gives."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from l4_plugin.store import events as E
from l4_plugin.store import fields as F
from l4_plugin.store import packs
from l4_plugin.store.fields import source_field
from l4_plugin.store.packs import PackMember, int_or_none


def _float32_plain(value: Any) -> float | None:
    if not isinstance(value, int | float):
        return None
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _unpack_plain(src: dict[str, Any]) -> Iterator[PackMember]:
    """``unpack`` as it was: every field read for every node."""
    hosts, cols = packs.pack_columns(src, [key for _, key in packs._OWN])

    def shared(name: str) -> Any:
        return source_field(src, name)

    level = shared("log.level")
    for i, host in enumerate(hosts):
        yield PackMember(
            node=str(host),
            template_id=str(shared(F.TEMPLATE_ID)),
            template_text=str(shared(F.TEMPLATE_TEXT) or ""),
            stage=str(shared(F.STAGE)),
            level=None if level is None else str(level),
            iteration=int_or_none(shared(F.ITERATION)),
            span=int_or_none(shared(F.ITERATION_SPAN)),
            count=int(shared(F.COUNT) or 0),
            first_ts=int_or_none(cols["first"][i]),
            last_ts=int_or_none(cols["last"][i]),
            first_pos=int(cols["first_pos"][i] or 0),
            last_pos=int(cols["last_pos"][i] or 0),
            seconds=_float32_plain(cols["seconds"][i]),
            path=None if cols["paths"][i] is None else str(cols["paths"][i]),
            message=None if cols["messages"][i] is None else str(cols["messages"][i]),
        )


def _maybe(rng: random.Random, value: Any, p: float = 0.2) -> Any:
    return None if rng.random() < p else value


def _number(rng: random.Random) -> Any:
    return rng.choice([rng.randint(0, 10**13), rng.random() * 1e4, 7, 0, True, None, "12"])


def _source(rng: random.Random) -> dict[str, Any]:
    """A pack's ``_source``, dotted or nested, with odd values here and there."""
    n = rng.choice([0, 1, 2, 3, 8, 64])
    pack: dict[str, Any] = {"hosts": [f"n{rng.randint(0, 99)}" for _ in range(n)]}
    for key in ("first", "last", "first_pos", "last_pos", "seconds"):
        length = n if rng.random() < 0.9 else n + 1  # a column of another length: all None
        pack[key] = [_number(rng) for _ in range(length)]
    pack["seconds"] = [_maybe(rng, rng.random() * 3.3 + rng.choice([0, 1e30])) for _ in range(n)]
    pack["paths"] = [_maybe(rng, f"/l/{i}.log") for i in range(n)]
    if rng.random() < 0.2:
        del pack["paths"]
    pack["messages"] = [_maybe(rng, rng.choice(["iteration 5", 17])) for i in range(n)]
    pack["ranks"] = [[i] for i in range(n)]
    shared = {
        F.TEMPLATE_ID: _maybe(rng, "t1"),
        F.TEMPLATE_TEXT: _maybe(rng, "iteration <*>"),
        F.STAGE: _maybe(rng, "training"),
        "log.level": _maybe(rng, rng.choice(["info", 3])),
        F.ITERATION: _maybe(rng, rng.choice([5, 5.0, "5"])),
        F.ITERATION_SPAN: _maybe(rng, 1),
        F.COUNT: _maybe(rng, rng.choice([3, 3.0, 0])),
    }
    src: dict[str, Any] = {k: v for k, v in shared.items() if v is not None or rng.random() < 0.5}
    src[F.PACK] = pack
    if rng.random() < 0.3:  # nested objects, as a cluster may return them
        nested: dict[str, Any] = {}
        for name, value in src.items():
            node = nested
            *parents, last = name.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        return nested
    return src


@pytest.mark.parametrize("seed", range(60))
def test_unpack_gives_what_reading_each_node_gives(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(20):
        src = _source(rng)
        try:
            want: Any = list(_unpack_plain(src))
        except (OverflowError, ValueError) as exc:
            want = type(exc)
        try:
            got: Any = list(packs.unpack(src))
        except (OverflowError, ValueError) as exc:
            got = type(exc)
        assert got == want
        if isinstance(want, list):  # the same types too (1 and 1.0 are equal)
            assert [[type(v) for v in vars_(m)] for m in got] == [
                [type(v) for v in vars_(m)] for m in want
            ]


def vars_(m: PackMember) -> list[Any]:
    return [getattr(m, name) for name in m.__slots__]


def _fold_plain(op: str, old: Any, new: Any) -> Any:
    if old is None:
        return new
    if new is None:
        return old
    if op == "sum":
        return old + new
    return min(old, new) if op == "min" else max(old, new)


_ATTRIBUTE = {field: name for field, name in E._MEMBER.items()}


def _fold_members_plain(
    rows: dict[tuple[Any, ...], E.Row],
    members: list[PackMember],
    keys: Sequence[E.Key],
    metrics: Mapping[str, E.Metric],
) -> None:
    """``table``'s folding of the packs' nodes as it was: a dict per member, an op by name."""
    for member in members:
        key = {k.name: getattr(member, _ATTRIBUTE[k.field]) for k in keys}
        if any(key[k.name] is None and not k.missing for k in keys):
            continue
        values = {name: getattr(member, _ATTRIBUTE[m.field]) for name, m in metrics.items()}
        at = tuple(key[k.name] for k in keys)
        row = rows.get(at)
        if row is None:
            rows[at] = E.Row(key, values)
            continue
        for name, m in metrics.items():
            row.values[name] = _fold_plain(m.op, row.values[name], values[name])


def _members(rng: random.Random, n: int) -> list[PackMember]:
    out = []
    for _ in range(n):
        first = _maybe(rng, rng.randint(0, 50))
        out.append(
            PackMember(
                node=f"n{rng.randint(0, 5)}",
                template_id=f"t{rng.randint(0, 3)}",
                template_text="x",
                stage=rng.choice(["init", "training"]),
                level=_maybe(rng, "warn", 0.4),
                iteration=_maybe(rng, rng.randint(0, 4), 0.3),
                span=_maybe(rng, 1),
                count=rng.randint(0, 9),
                first_ts=first,
                last_ts=_maybe(rng, rng.randint(50, 99)),
                first_pos=rng.randint(0, 9),
                last_pos=rng.randint(10, 99),
                seconds=_maybe(rng, rng.random()),
                path=None,
                message=None,
            )
        )
    return out


_FIELDS = ["host.name", F.TEMPLATE_ID, F.STAGE, "log.level", F.ITERATION, F.ITERATION_SPAN]
_METRIC_FIELDS = [F.COUNT, F.FIRST_TS, F.LAST_TS, F.FIRST_POS, F.LAST_POS, F.ITERATION_SECONDS]


@pytest.mark.parametrize("seed", range(60))
def test_table_folds_the_packs_nodes_as_one_document_each_would(seed: int) -> None:
    rng = random.Random(seed)
    names = ["node", "t", "st", "lv", "it", "span"]
    keys = [
        E.Key(rng.choice(names), rng.choice(_FIELDS), missing=rng.random() < 0.4)
        for _ in range(rng.randint(0, 3))
    ]  # a name may come twice
    metrics = {
        f"m{i}": E.Metric(rng.choice(["sum", "min", "max"]), rng.choice(_METRIC_FIELDS))
        for i in range(rng.randint(0, 3))
    }
    members = _members(rng, rng.randint(0, 300))
    seed_rows = [
        (tuple(m.node for _ in keys), {k.name: m.node for k in keys}) for m in members[:3]
    ]  # rows the composite gave, some of which the members fold into
    want: dict[tuple[Any, ...], E.Row] = {
        at: E.Row(dict(key), dict.fromkeys(metrics, 1)) for at, key in seed_rows
    }
    got = {at: E.Row(dict(row.key), dict(row.values)) for at, row in want.items()}
    _fold_members_plain(want, members, keys, metrics)
    E._fold_members(got, members, keys, metrics)
    assert list(got) == list(want)  # the same rows, in the same order
    assert [(r.key, list(r.key), r.values, list(r.values)) for r in got.values()] == [
        (r.key, list(r.key), r.values, list(r.values)) for r in want.values()
    ]
