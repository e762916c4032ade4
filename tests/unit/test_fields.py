"""Every ``l4.*`` document field is named once, in ``store/fields.py``, and is mapped."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from l4_plugin.store import fields as F
from l4_plugin.store.index_templates import load_template
from l4_plugin.store.names import INDEX_KINDS

PACKAGE = Path(__file__).resolve().parents[2] / "l4_plugin"
# "l4." followed by a name, or a bare "l4." prefix; not "l4_plugin", a URL host or a file name.
FIELD_LITERAL = re.compile(r"(?<![\w/.-])l4\.(?:[a-z_]|$)")
# Strings that look like fields and are not: the exported NDJSON's file name, a logger name.
NOT_FIELDS = {"l4.ndjson", "l4.service"}


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            out.add(id(body[0].value))
    return out


def field_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant (f-string parts included) that spells a field."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and node.value not in NOT_FIELDS
        and FIELD_LITERAL.search(node.value)
    ]


def test_the_scan_finds_literals_in_every_form() -> None:
    src = (
        'a = {"l4.job.id": 1}\nb = f"l4.{k}"\nc = \'l4.x:"y"\'\nd = "l4_plugin"\ne = "l4.ndjson"\n'
    )
    assert sorted(line for line, _ in field_literals(src)) == [1, 2, 3]


def test_no_l4_field_literal_outside_fields_module() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "fields.py" or path.parent.name != "store"
        for line, text in field_literals(path.read_text(encoding="utf-8"))
    ]
    assert not found, "name these through l4_plugin.store.fields:\n" + "\n".join(found)


def _mapped() -> set[str]:
    names: set[str] = set()

    def walk(props: dict[str, dict], prefix: str) -> None:
        for key, spec in props.items():
            names.add(prefix + key)
            walk(spec.get("properties", {}), f"{prefix}{key}.")

    for kind in INDEX_KINDS:
        walk(load_template(kind)["template"]["mappings"]["properties"], "")
    return names


def test_every_field_constant_is_mapped_by_an_index_template() -> None:
    values = {
        name: value for name, value in vars(F).items() if name.isupper() and isinstance(value, str)
    }
    assert len(values) > 60
    assert len(set(values.values())) == len(values), "one name per field"
    unmapped = sorted(v for v in values.values() if v not in _mapped())
    assert not unmapped, f"fields.py names fields no index template maps: {unmapped}"
