"""Where each line of a rendered spec came from: the map from rendered lines back to template
lines (``LineMap``), and the markers the line-marking render (``sandbox``) leaves in its output.
Apart from ``template`` so the sandbox and the plain path share it without importing one
another."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rabbitry.topology.spec.source_map import Mark

MARKER = re.compile(r"\x00(\d+):(\d+)\x00")
"""How the line-marking render (``sandbox``) marks the template and line of each piece of text."""
_LEADING_MARKERS = re.compile(r"(?:\x00\d+:\d+\x00)+")


@dataclass(frozen=True)
class Rendered:
    """A rendered template and where each of its lines came from."""

    text: str
    lines: LineMap


_EXPRESSION = re.compile(r"\{\{.*?\}\}|\{#.*?#\}")
_BLOCK_ONLY = re.compile(r"^\s*\{%.*%\}\s*$")
_TOKEN = re.compile(r"[^\s:,\[\]{}#]+")

Origin = tuple[str, int]
"""A template file and a 0-based line in it."""


@dataclass(frozen=True)
class LineMap:
    """Which template line produced each rendered line.

    YAML positions refer to the rendered text; this turns them into positions in the files the
    user wrote, including lines repeated by loops and lines from included templates. Columns
    are exact when the rendered line is the template line unchanged, found by the text at the
    position otherwise, and left out when that text is not in the template line.
    """

    rendered: tuple[str, ...]
    origins: tuple[Origin, ...]
    sources: Mapping[str, tuple[str, ...]]
    same_as: str | None = None
    """The file whose lines are the rendered lines (no template ran): then nothing is stored
    per line (a 50,000-object spec has hundreds of thousands of them)."""
    line_count: int = 0

    @classmethod
    def identity(cls, filename: str, text: str) -> LineMap:
        return cls((), (), {}, same_as=filename, line_count=len(text.splitlines()))

    @classmethod
    def from_markers(
        cls,
        marked: str,
        files: Sequence[str],
        sources: Mapping[str, tuple[str, ...]],
        main: str,
    ) -> LineMap:
        rendered: list[str] = []
        origins: list[Origin] = []
        origin: Origin = (main, 0)
        for line in marked.split("\n"):
            leading = _LEADING_MARKERS.match(line)
            if leading:
                last = list(MARKER.finditer(leading[0]))[-1]
                origin = (files[int(last[1])], int(last[2]) - 1)
            else:
                # A line started by an expression's output: it belongs with the line before.
                origin = origin if rendered else (main, 0)
            rendered.append(MARKER.sub("", line))
            origins.append(origin)
        return cls(tuple(rendered), tuple(origins), dict(sources))

    @classmethod
    def from_diff(cls, filename: str, source_text: str, rendered_text: str) -> LineMap:
        """Best effort from the texts alone: equal lines match, others the most similar."""
        source = tuple(source_text.splitlines())
        rendered = tuple(rendered_text.splitlines())
        mapping = [0] * len(rendered)
        matcher = difflib.SequenceMatcher(a=source, b=rendered, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(j2 - j1):
                    mapping[j1 + k] = i1 + k
            elif tag in ("replace", "insert"):
                candidates = list(range(i1, i2)) or [max(i1 - 1, 0)]
                _map_block(source, rendered, candidates, range(j1, j2), mapping)
        return cls(rendered, tuple((filename, i) for i in mapping), {filename: source})

    def translate(self, line: int, column: int) -> Mark:
        """A 0-based rendered (line, column) as a 1-based position in a template file."""
        if self.same_as is not None and self.line_count:
            if line >= self.line_count:
                return Mark(self.line_count + 1, None, self.same_as)
            return Mark(line + 1, column + 1, self.same_as)
        if not self.origins:
            return Mark(line + 1, column + 1)
        if line >= len(self.origins):
            file, index = self.origins[-1]
            return Mark(index + 2, None, file)
        file, index = self.origins[line]
        rendered_line = self.rendered[line]
        source = self.sources.get(file, ())
        source_line = source[index] if index < len(source) else ""
        if rendered_line == source_line:
            return Mark(index + 1, column + 1, file)
        token = _TOKEN.match(rendered_line, column)
        if token and source_line.count(token[0]) == 1:
            return Mark(index + 1, source_line.index(token[0]) + 1, file)
        return Mark(index + 1, None, file)


def _map_block(
    source: Sequence[str],
    rendered: Sequence[str],
    candidates: list[int],
    targets: range,
    mapping: list[int],
) -> None:
    content = [i for i in candidates if not _BLOCK_ONLY.match(source[i])] or candidates
    if len(content) == len(targets):
        for i, j in zip(content, targets, strict=True):
            mapping[j] = i
        return
    for position, j in enumerate(targets):
        expected = content[min(position * len(content) // max(len(targets), 1), len(content) - 1)]

        def score(i: int, j: int = j, expected: int = expected) -> tuple[float, int]:
            template = _EXPRESSION.sub("", source[i])
            ratio = difflib.SequenceMatcher(a=template, b=rendered[j], autojunk=False).ratio()
            return (ratio, -abs(i - expected))

        mapping[j] = max(content, key=score)
