"""The code's shape: short functions, and imports that only go down the layers."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "l4_plugin", ROOT / "simulate" / "l4_simulate")
MAX_LINES = 80
# The parser's hot loop: one function on purpose, so that each line costs no call (benchmarked
# in benchmarks/RESULTS.md); it is the one exception.
LONG_ON_PURPOSE = {"l4_plugin/ingest/rollup.py:NodeRollup.scan"}
# What each layer of l4_plugin may import from the others (docs/ARCHITECTURE.md, *Layers*).
# The pure analysis knows records and its own modules; the store knows no stage.
FORBIDDEN = {
    "analysis": {"store", "diagnosis", "service", "cli", "report", "rules", "dashboards"},
    "ingest": {"analysis", "diagnosis", "service", "cli", "report", "rules", "dashboards"},
    "store": {"analysis", "ingest", "diagnosis", "service", "cli", "report", "rules"},
    "rules": {"diagnosis", "service", "cli", "report", "dashboards"},
    "report": {"store", "ingest", "diagnosis", "service", "cli", "rules"},
    "diagnosis": {"service", "cli"},
    "service": {"cli"},
    "records": {"analysis", "ingest", "store", "diagnosis", "service", "cli", "report", "rules"},
}


def _functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.ClassDef):
            out += _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            out.append((f"{prefix}{node.name}", node.end_lineno - node.lineno + 1))
            out += _functions(node, f"{prefix}{node.name}.")
    return out


def long_functions(path: Path, source: str) -> list[str]:
    """``path:qualified.name (N lines)`` of every function over the limit in ``source``."""
    rel = path.relative_to(ROOT).as_posix() if path.is_absolute() else path.as_posix()
    return [
        f"{rel}:{name} ({n} lines)"
        for name, n in _functions(ast.parse(source))
        if n > MAX_LINES and f"{rel}:{name}" not in LONG_ON_PURPOSE
    ]


def test_the_length_check_sees_methods_and_nested_functions() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    src = f"class A:\n    def m(self):\n{body}\n\ndef f():\n    def g():\n{body}\n"
    assert long_functions(Path("x.py"), src) == [
        "x.py:A.m (81 lines)",
        "x.py:f (82 lines)",
        "x.py:f.g (81 lines)",
    ]


def test_no_function_over_80_lines() -> None:
    found = [
        problem
        for package in PACKAGES
        for path in sorted(package.rglob("*.py"))
        for problem in long_functions(path, path.read_text(encoding="utf-8"))
    ]
    assert not found, "split these:\n" + "\n".join(found)


def _imported_layers(source: str) -> set[str]:
    layers: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "l4_plugin":
                names = [f"l4_plugin.{a.name}" for a in node.names]
            else:
                names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        layers |= {n.split(".")[1] for n in names if n.startswith("l4_plugin.")}
    return layers


def test_imports_only_go_down_the_layers() -> None:
    package = PACKAGES[0]
    found = []
    for path in sorted(package.rglob("*.py")):
        layer = path.relative_to(package).parts[0].removesuffix(".py")
        bad = _imported_layers(path.read_text(encoding="utf-8")) & FORBIDDEN.get(layer, set())
        found += [f"{path.relative_to(ROOT)} imports l4_plugin.{b}" for b in sorted(bad)]
    assert not found, "\n".join(found)
