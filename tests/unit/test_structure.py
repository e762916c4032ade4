"""The code's shape: short functions, and imports that only go down the layers."""

from __future__ import annotations

import ast
import subprocess
import sys
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
    "stacks": {"analysis", "ingest", "store", "diagnosis", "service", "cli", "report", "rules"},
    # The settings are read by every edge: they know the floor modules (limits, urls, errors,
    # yamldoc) and the analysis's parameters, never a stage.
    "config": {
        "ingest",
        "store",
        "diagnosis",
        "service",
        "cli",
        "report",
        "rules",
        "dashboards",
    },
}
# Floor modules: they import nothing of the package but the exceptions.
FLOOR = {
    "limits": {"errors"},
    "urls": {"errors"},
    "errors": set(),
    "records": set(),
    "stacks": set(),
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


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in ``source`` (at module level,
    in a function or under ``TYPE_CHECKING``: each is an arrow): ``from a import b`` is ``a.b``
    when that is a module, else ``a``; relative imports are resolved."""
    out: set[str] = set()
    here = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    out.add(f"{base}.{alias.name}")
                elif base in known:
                    out.add(base)
    out.discard(module)
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle of ``graph`` (module → the modules it imports): its strongly connected
    components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(cycles)


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module → the modules it imports, for ``sources`` (module → its source, is a package)."""
    known = set(sources)
    return {m: imports_of(m, src, pkg, known) for m, (src, pkg) in sources.items()}


def test_the_cycle_check_sees_imports_in_functions_and_relative_ones() -> None:
    sources = {
        "p": ("", True),
        "p.a": ("from p import b\n", False),
        "p.b": ("def f():\n    from .c import thing\n", False),
        "p.c": ("import p.a\n", False),
        "p.d": ("from p.a import name\n", False),  # imports into the cycle, is not in it
        "p.e": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.d\n", False),
    }
    graph = import_graph(sources)
    assert graph["p.b"] == {"p.c"} and graph["p.d"] == {"p.a"} and graph["p.e"] == {"p.d"}
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]
    sources["p.d"] = ("def late():\n    from p import e\n", False)
    assert import_cycles(import_graph(sources)) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]
    del sources["p.c"]
    assert import_cycles(import_graph(sources)) == [["p.d", "p.e"]]


def _package_graph() -> dict[str, set[str]]:
    package = PACKAGES[0]
    sources = {
        _module_name(path, package): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
        for path in sorted(package.rglob("*.py"))
    }
    return import_graph(sources)


def test_no_import_cycle_in_the_package() -> None:
    cycles = import_cycles(_package_graph())
    assert not cycles, "break these import cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_the_layer_check_sees_config_importing_a_stage() -> None:
    assert _imported_layers("from l4_plugin.ingest.jobdir import MAX_FILE_SIZE\n") & set(
        FORBIDDEN["config"]
    ) == {"ingest"}
    assert not _imported_layers("from l4_plugin.limits import MAX_FILE_SIZE\n") & set(
        FORBIDDEN["config"]
    )


def test_floor_modules_import_nothing_above_them() -> None:
    graph = _package_graph()
    found = [
        f"l4_plugin.{name} imports {other}"
        for name, allowed in FLOOR.items()
        for other in sorted(graph[f"l4_plugin.{name}"])
        if other.removeprefix("l4_plugin.") not in allowed
    ]
    assert not found, "\n".join(found)


def test_the_store_loads_neither_the_settings_nor_the_parser() -> None:
    """Importing the store's field names (what a reader of documents needs) loads neither
    pydantic (the settings) nor any ingest module (the parser stack)."""
    probe = (
        "import sys, l4_plugin.store.fields; "
        "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'l4_plugin.ingest', "
        "'l4_plugin.config'))))"
    )
    assert _fresh_python(probe).strip() == "[]"


def test_the_command_line_loads_the_elasticsearch_client_only_to_reach_elasticsearch() -> None:
    """The CLI and an ingest on the embedded (OpenSearch) cluster never import the
    Elasticsearch client (a fifth of a command's start-up); asking the store package for its
    adapter does."""
    probe = (
        "import sys, l4_plugin.cli.main, l4_plugin.ingest.pipeline, l4_plugin.store as s; "
        "print('elasticsearch' in sys.modules, s.ElasticsearchStore.__name__, "
        "'elasticsearch' in sys.modules)"
    )
    assert _fresh_python(probe).split() == ["False", "ElasticsearchStore", "True"]


def _fresh_python(probe: str) -> str:
    """What ``probe`` prints in a new interpreter (nothing imported yet)."""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return out.stdout
