"""YAML with line marks: where each key of the spec came from, so every problem says file:line.

PyYAML's constructors throw the marks away, so the document is composed into nodes and built
here by hand, recording the position of every mapping key and sequence item under its path
(``("vhosts", 0, "queues", 3, "arguments", "x-message-ttl")``), which is exactly the ``loc``
pydantic reports. Duplicate keys, which PyYAML silently lets the last one win, are collected
as problems on the way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology.spec import fast_yaml
from rabbitry.topology.spec.limits import SpecLimits, exceeded

Loc = tuple[str | int, ...]
"""A path into the document: mapping keys and sequence indexes."""

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_PATH_TOKEN = re.compile(r'\.?([A-Za-z0-9_-]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def format_path(loc: Loc) -> str:
    """``("vhosts", 0, "queues", 3, "arguments")`` -> ``vhosts[0].queues[3].arguments``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += "[" + _quote(part) + "]"
    return out


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_path(path: str) -> Loc:
    """The inverse of :func:`format_path` (for problems that only carry a path string)."""
    loc: list[str | int] = []
    pos = 0
    while pos < len(path):
        match = _PATH_TOKEN.match(path, pos)
        if match is None:
            raise ValueError(f"not a spec path: {path!r}")
        if match[1] is not None:
            loc.append(match[1])
        elif match[2] is not None:
            loc.append(int(match[2]))
        else:
            loc.append(match[3][1:-1].replace('\\"', '"').replace("\\\\", "\\"))
        pos = match.end()
    return tuple(loc)


@dataclass(frozen=True)
class Mark:
    """A 1-based position; ``column`` is None when not known exactly, ``file`` None for the
    document's own file (an included template names its own)."""

    line: int
    column: int | None = None
    file: str | None = None


MarkTranslator = Callable[[int, int], Mark]
"""Turns a 0-based (line, column) of the text YAML saw into a position in the source file."""


def identity_marks(line: int, column: int) -> Mark:
    return Mark(line + 1, column + 1)


Position = tuple[int, int]
"""A 0-based (line, column) in the text YAML saw."""


@dataclass
class SourceMap:
    """Positions of the keys and values of one loaded document, by path.

    Positions are kept as YAML saw them and translated to the template's file:line only for
    the few that a problem points at: translating every node of a large spec cost more than
    parsing it."""

    file: str | None
    keys: dict[Loc, Position] = field(default_factory=dict)
    values: dict[Loc, Position] = field(default_factory=dict)
    translate: MarkTranslator = identity_marks
    fill: Callable[[SourceMap], None] | None = field(default=None, repr=False, compare=False)
    """Fills ``keys`` and ``values`` when a position is first asked for (see ``load_yaml``)."""

    def locate(self, loc: Loc, *, at_key: bool = False) -> Mark | None:
        """Where ``loc`` is: its value (or key), else the nearest enclosing thing that exists."""
        if self.fill is not None:
            fill, self.fill = self.fill, None
            fill(self)
        loc = tuple(loc)
        first = (self.keys, self.values) if at_key else (self.values, self.keys)
        for table in first:
            if loc in table:
                return self.translate(*table[loc])
        for end in range(len(loc) - 1, -1, -1):
            parent = loc[:end]
            if parent in self.keys:
                return self.translate(*self.keys[parent])
            if parent in self.values:
                return self.translate(*self.values[parent])
        return None

    def problem(
        self, loc: Loc, message: str, severity: str = "error", *, at_key: bool = False
    ) -> SpecProblem:
        """A problem at ``loc``, with this file's line and column."""
        mark = self.locate(loc, at_key=at_key)
        return SpecProblem(
            message,
            path=format_path(loc),
            file=mark.file or self.file if mark else self.file,
            line=mark.line if mark else None,
            column=mark.column if mark else None,
            severity=severity,
        )

    def attach(self, problem: SpecProblem) -> SpecProblem:
        """``problem`` with file:line:column filled in from its path, if it has none yet."""
        if problem.line is not None:
            return problem
        try:
            loc = parse_path(problem.path)
        except ValueError:
            return problem
        mark = self.locate(loc)
        return SpecProblem(
            problem.message,
            path=problem.path,
            file=problem.file or (mark.file if mark else None) or self.file,
            line=mark.line if mark else None,
            column=mark.column if mark else None,
            severity=problem.severity,
        )


def unlocated(loc: Loc, message: str, severity: str = "error") -> SpecProblem:
    """A problem for a spec built in code (no file to point at)."""
    return SpecProblem(message, path=format_path(loc), severity=severity)


# libyaml composes the same marked nodes about five times faster than the pure-Python scanner
# (a 1,500-object spec: 0.04 s instead of 0.23 s); fall back where PyYAML was built without it.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_STR = "tag:yaml.org,2002:str"
_NUMERIC_START = frozenset("0123456789+-.")
"""First characters of YAML 1.1 numbers and timestamps (and .inf/.nan): the resolver decides."""
_WORDS = frozenset(
    {"~", "null", "Null", "NULL", "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE"}
    | {"false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"}
)
"""The plain scalars YAML 1.1 reads as null or booleans."""
_OTHER_START = frozenset("<=")
"""The merge key ``<<`` and the value key ``=``."""


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that builds nothing itself; kept separate so SafeLoader is never patched.

    Most scalars of a spec are names and keys: a plain scalar that cannot be a number, a
    boolean, null or a merge key is a string without trying the resolver's patterns."""

    def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode and implicit[0] and value:
            first = value[0]
            if first not in _NUMERIC_START and first not in _OTHER_START and value not in _WORDS:
                return _STR
        return str(super().resolve(kind, value, implicit))


@dataclass
class MarkedDocument:
    """A parsed YAML document with the positions of its parts."""

    data: Any
    source: SourceMap
    problems: list[SpecProblem]


@dataclass(frozen=True)
class YamlText:
    """A YAML text to read, with what its problems name as the file, where a position in it
    stands in the template it was rendered from, and how far reading it may go."""

    text: str
    file: str | None
    translate: MarkTranslator = identity_marks
    limits: SpecLimits = field(default_factory=SpecLimits)


def load_yaml(source: YamlText) -> MarkedDocument:
    """``load_marked_yaml``, through the fast parser when the text is plain YAML and the
    ``fast`` extra is installed: then positions are found only when a problem asks for one."""
    data, plain = fast_yaml.load_plain(source.text, source.limits)
    if not plain:
        return load_marked_yaml(source)

    def fill(positions: SourceMap) -> None:
        try:
            marked = load_marked_yaml(source)
        except (yaml.YAMLError, SpecError):  # read by one parser, refused by the other
            return
        positions.keys, positions.values = marked.source.keys, marked.source.values

    return MarkedDocument(data, SourceMap(source.file, translate=source.translate, fill=fill), [])


def load_marked_yaml(source: YamlText) -> MarkedDocument:
    """Parse one YAML document, recording where every key and item is.

    Raises ``yaml.MarkedYAMLError`` for syntax errors, ``SpecError`` past ``source.limits``
    (values built, nesting) or for a tag that is not plain YAML; duplicate keys come back as
    problems.
    """
    loader = _Loader(source.text)
    try:
        node = loader.get_single_node()
        builder = _Builder(
            loader, SourceMap(source.file, translate=source.translate), source.limits
        )
        data = builder.build(node, ()) if node is not None else None
        return MarkedDocument(data, builder.source, builder.problems)
    finally:
        loader.dispose()


_PLAIN_COLLECTIONS = {"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


class _Builder:
    def __init__(self, loader: _Loader, source: SourceMap, limits: SpecLimits) -> None:
        self.loader = loader
        self.source = source
        self.limits = limits
        self.budget = limits.max_values
        self.problems: list[SpecProblem] = []

    def past_limit(self, node: Node, loc: Loc, error: SpecError) -> SpecError:
        problem = error.problems[0]
        return SpecError(self.located(loc, problem.message, node))

    def mark(self, node: Node) -> Position:
        start = node.start_mark
        return (start.line, start.column)

    def scalar(self, node: Node) -> Any:
        # most scalars are strings, which PyYAML's constructor would return unchanged after a
        # few calls; the others (numbers, booleans, null, timestamps) go through it
        if node.tag == _STR and isinstance(node, ScalarNode):
            return node.value
        return self.loader.construct_object(node, deep=True)

    def build(self, node: Node, loc: Loc) -> Any:
        self.budget -= 1
        if self.budget < 0:  # aliases make one node many values: count what is built
            limit = self.limits.max_values
            raise self.past_limit(
                node, loc, exceeded("max_values", limit + 1, limit, "the number of YAML values")
            )
        if len(loc) > self.limits.max_depth:
            limit = self.limits.max_depth
            raise self.past_limit(
                node, loc, exceeded("max_depth", len(loc), limit, "the nesting of the YAML")
            )
        self.source.values.setdefault(loc, self.mark(node))
        if not isinstance(node, ScalarNode) and node.tag not in _PLAIN_COLLECTIONS:
            raise SpecError(
                self.located(
                    loc,
                    f"YAML tag {node.tag!r} is not allowed: a spec is plain YAML (mappings,"
                    " lists, strings, numbers, booleans); remove the tag",
                    node,
                )
            )
        if isinstance(node, MappingNode):
            return self.build_mapping(node, loc)
        if isinstance(node, SequenceNode):
            out = []
            for index, item in enumerate(node.value):
                self.source.keys.setdefault((*loc, index), self.mark(item))
                out.append(self.build(item, (*loc, index)))
            return out
        assert isinstance(node, ScalarNode)
        return self.scalar(node)

    def build_mapping(self, node: MappingNode, loc: Loc) -> dict[Any, Any]:
        self.check_duplicates(node, loc)
        # Merge keys (<<: *defaults) are legitimate repetition: flatten them, later keys win.
        self.loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            if not isinstance(key, str | int | float | bool) or key is None:
                self.problems.append(
                    self.located((*loc,), "mapping keys must be plain names", key_node)
                )
                continue
            key_loc = (*loc, key if isinstance(key, str | int) else str(key))
            self.source.keys[key_loc] = self.mark(key_node)
            self.source.values.pop(key_loc, None)
            out[key] = self.build(value_node, key_loc)
        return out

    def check_duplicates(self, node: MappingNode, loc: Loc) -> None:
        seen: dict[Any, Node] = {}
        for key_node, _ in _own_pairs(node):
            if not isinstance(key_node, ScalarNode):
                continue
            key = self.scalar(key_node)
            if key in seen:
                first = self.source.translate(*self.mark(seen[key]))
                self.problems.append(
                    self.located(
                        (*loc, key),
                        f"duplicate key {key!r} (first defined on line {first.line}); "
                        "YAML would silently keep only the last one",
                        key_node,
                    )
                )
            else:
                seen[key] = key_node

    def located(self, loc: Loc, message: str, node: Node) -> SpecProblem:
        mark = self.source.translate(*self.mark(node))
        return SpecProblem(
            message,
            path=format_path(loc),
            file=mark.file or self.source.file,
            line=mark.line,
            column=mark.column,
        )


def _own_pairs(node: MappingNode) -> Iterator[tuple[Node, Node]]:
    for key_node, value_node in node.value:
        if key_node.tag != "tag:yaml.org,2002:merge":
            yield key_node, value_node
