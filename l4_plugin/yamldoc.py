"""Reading YAML that L4 does not control, bounded, with errors that name the file and line.

Every YAML L4 reads (``job.yaml``, config files, rule files, the lexicon, stage and masking rules)
goes through ``BoundedLoader``: the safe loader with limits on the document's size, its nesting
depth and its node count *after alias expansion*. A small alias bomb (``a: &a [x, x]``,
``b: &b [*a, *a]``, …) composes into a few nodes but expands into billions wherever the data is
walked, flattened or serialised; the limit stops it at load time with a located one-line error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from l4_plugin.errors import L4Error

#: Largest YAML document read (bytes); the shipped files are below 10 KB.
MAX_YAML_BYTES = 1_000_000
#: Most nodes a document may hold once every alias is expanded.
MAX_YAML_NODES = 100_000
#: Deepest nesting of mappings and sequences.
MAX_YAML_DEPTH = 64


class YAMLLimitError(yaml.MarkedYAMLError):
    """A YAML document exceeds a limit; ``problem_mark`` locates it when known."""

    def __init__(self, problem: str, mark: yaml.Mark | None = None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with limits on size, depth and expanded node count."""

    def __init__(self, stream: str) -> None:
        if len(stream) > MAX_YAML_BYTES:
            raise YAMLLimitError(
                f"document is {len(stream):,} characters, over the limit of {MAX_YAML_BYTES:,}"
            )
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLLimitError(f"nesting deeper than {MAX_YAML_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> yaml.Node | None:
        node = super().compose_document()
        check_expanded_size(node)
        return node


def check_expanded_size(root: yaml.Node | None) -> None:
    """Raise ``YAMLLimitError`` when ``root`` expands to more than ``MAX_YAML_NODES`` nodes
    (aliases counted as often as they are used) or refers to itself."""
    if root is None:
        return
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        known = sizes.get(key)
        if known is not None:
            return known
        if key in active:
            raise YAMLLimitError("an alias refers to the node that contains it", node.start_mark)
        if depth > 4 * MAX_YAML_DEPTH:
            raise YAMLLimitError(
                f"aliases nest deeper than {4 * MAX_YAML_DEPTH} levels", node.start_mark
            )
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k, depth + 1) + size(v, depth + 1)
                if total > MAX_YAML_NODES:
                    break
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                total += size(item, depth + 1)
                if total > MAX_YAML_NODES:
                    break
        active.discard(key)
        if total > MAX_YAML_NODES:
            raise YAMLLimitError(
                f"more than {MAX_YAML_NODES:,} values once aliases are expanded (an alias "
                "bomb?) — hint: write the values out instead of nesting aliases",
                node.start_mark,
            )
        sizes[key] = total
        return total

    size(root, 0)


def compose(text: str) -> yaml.Node | None:
    """The node graph of one YAML document, bounded (``YAMLLimitError``, a ``YAMLError``)."""
    loader = BoundedLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def construct(node: yaml.Node) -> Any:
    """The Python value of a node ``compose`` returned (safe constructors only)."""
    loader = BoundedLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def duplicate_key(node: yaml.Node | None) -> tuple[int, str] | None:
    """The first (line, key) that repeats a key of the same mapping, anywhere in ``node``."""
    if node is None:
        return None
    seen_nodes: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            keys: set[str] = set()
            for k, v in current.value:
                name = str(k.value) if isinstance(k, yaml.ScalarNode) else repr(k.value)
                if name in keys:
                    return k.start_mark.line + 1, name
                keys.add(name)
                stack.append(v)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return None


def read_text(path: Path, error: type[L4Error], what: str, max_bytes: int | None = None) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes; ``error`` otherwise.

    A FIFO, device or socket is refused before it is opened (reading ``/dev/zero`` never ends),
    and a byte that is not UTF-8 names its line instead of being replaced silently.
    """
    if max_bytes is None:
        max_bytes = MAX_YAML_BYTES
    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"cannot read {what} — {path} — {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"cannot read {what} — {path} — not a regular file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {what} — {path} — {exc.strerror}") from None
    if len(data) > max_bytes:
        raise error(
            f"{what} too large — {path} — over {max_bytes:,} bytes — hint: is this the right file?"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(
            f"{what} is not UTF-8 — {path}:{line} — byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start} — hint: save the file as UTF-8"
        ) from None


def _yaml_error(exc: yaml.YAMLError, path: Path, error: type[L4Error], what: str) -> L4Error:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or str(exc)
    return error(f"{where}: invalid YAML in {what}: {problem}")


def read_document(
    path: Path, error: type[L4Error], what: str
) -> tuple[dict[str, Any], dict[str, int]]:
    """The mapping in ``path`` ({} for an empty file) and the 1-based line of each top-level key.

    Bad YAML, a limit exceeded, a duplicate key or a document that is not a mapping raise
    ``error`` with ``file:line``.
    """
    text = read_text(path, error, what)
    try:
        node = compose(text)
        if node is None:
            return {}, {}
        dup = duplicate_key(node)
        if dup is not None:
            raise error(f"{path}:{dup[0]}: duplicate key {dup[1]!r} in {what}")
        data = construct(node)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, path, error, what) from None
    except RecursionError:
        raise error(f"{path}: invalid YAML in {what}: nested too deeply") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise error(f"{path}:1: {what} must be a mapping, got {type(data).__name__}")
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            lines.setdefault(str(k.value), k.start_mark.line + 1)
    return data, lines


def read_mapping(path: Path, error: type[L4Error], what: str) -> dict[str, Any]:
    """The mapping in ``path`` ({} for an empty file); ``error`` says ``file:line`` otherwise.

    ``what`` names the file's role in messages (``config file``, ``job.yaml``, ``stage rules``).
    """
    return read_document(path, error, what)[0]
