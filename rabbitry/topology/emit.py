"""Block-style YAML text, written by libyaml's C emitter where it can be.

Specs are written the way people write YAML: a list under a key is indented under it. PyYAML's
pure-Python emitter can be told to do that (an ``increase_indent`` override), libyaml's cannot:
it writes such a list "indentless", its dashes in the key's own column. The C emitter is ~10x
faster (an export of 50,000 objects spends most of its time emitting), so ``block_yaml`` lets
it write and then moves every indentless list two columns right, which is the only difference
between the two. That is a line-by-line edit, exact only while each line holds one node: a
document whose text would span lines inside a scalar (a string with a line break) or use the
``? key`` form (an empty key, or one of 128 characters or more) is written by the Python
emitter instead. Both give the same text (``tests/unit/topology/test_emit.py`` compares them).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["block_yaml"]

_LINE_BREAK = re.compile("[\n\r\x85\u2028\u2029]")
_LONGEST_SIMPLE_KEY = 127  # the emitters write longer keys in the "? key" form


class _IndentedDumper(yaml.SafeDumper):
    """The Python emitter, told to indent lists under their key."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


_CDumper: type | None = getattr(yaml, "CSafeDumper", None)


def _options() -> dict[str, Any]:
    return {
        "sort_keys": False,
        "allow_unicode": True,
        "default_flow_style": False,
        "width": 1 << 30,  # never fold: folded lines are harder to diff and to escape
    }


def block_yaml(data: Any) -> str:
    """Block-style YAML in the data's own key order, lists indented under their key, lines
    never folded."""
    if _CDumper is None or not _one_node_per_line(data):
        text: str = yaml.dump(data, Dumper=_IndentedDumper, **_options())
        return text
    return _indent_lists(yaml.dump(data, Dumper=_CDumper, **_options()))


def _one_node_per_line(data: Any) -> bool:
    """No scalar the emitter would spread over lines, no key it would write as ``? key``."""
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if _LINE_BREAK.search(node):
                return False
        elif isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str) or not key or len(key) > _LONGEST_SIMPLE_KEY:
                    return False  # the Python emitter writes "? ''" for an empty key
                if _LINE_BREAK.search(key):
                    return False
                stack.append(value)
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return True


def _indent_lists(text: str) -> str:
    """Move each list that sits in its key's column two columns right (with all it holds)."""
    lines = text.split("\n")
    out: list[str] = []
    open_lists: list[int] = []  # columns of the indentless lists the current line is inside
    pending: int | None = None  # column of a key whose value starts on the next line
    for line in lines:
        if not line:
            out.append(line)
            continue
        content = line.lstrip(" ")
        indent = len(line) - len(content)
        item = content.startswith("- ") or content == "-"
        while open_lists and not (indent > open_lists[-1] or (indent == open_lists[-1] and item)):
            open_lists.pop()
        if pending is not None and indent == pending and item:
            open_lists.append(pending)
        pending = None
        if content.endswith(":"):
            column = indent
            rest = content
            while rest.startswith("- "):
                column += 2
                rest = rest[2:]
            pending = column
        shift = 2 * len(open_lists)
        out.append(" " * shift + line if shift else line)
    return "\n".join(out)
