"""The broker URL and node order of a rendered spec, read off its text without a YAML parser.

A worker started from its cached view still takes the broker's address from the spec itself,
never from the cache: a cache entry is a file, and a file can be planted. Loading YAML for the
two values would cost a warm worker the parser it otherwise never loads, so ``broker_settings``
reads the common ways of writing them (``url:`` a plain or quoted scalar or a block list of
them, ``node_order:`` a scalar) off the top-level ``broker:`` block, and answers None for
anything else. It is no YAML parser and need not be one: a view is stored only when this
reading of the text equals what the spec model made of the same text (``view.remember``), and
read back only for that same text, so a spec written in another way is simply never cached.
"""

from __future__ import annotations

import re

__all__ = ["BrokerSettings", "broker_settings"]

BrokerSettings = tuple[str | None, str | None]
"""``(url, node_order)``: ``url`` as clients take it (the URLs of a list comma-separated)."""

_BROKER = re.compile(r"""\n(?:broker|"broker"|'broker')[ \t]*:(?P<rest>.*)""")
_TOP_LINE = re.compile(r"\n[^\s#]")
_KEY = re.compile(
    r"""(?P<key>[A-Za-z_]+|"[A-Za-z_]+"|'[A-Za-z_]+')[ \t]*:(?:[ \t]+(?P<value>.*))?$"""
)
_ITEM = re.compile(r"-[ \t]+(?P<value>.*)$")
_COMMENT = re.compile(r"[ \t]+#.*$")
_NOT_PLAIN = tuple("[]{}&*!|>%@`'\"")
"""How a plain scalar cannot start (flow collections, anchors, aliases, tags, block scalars,
reserved and quote marks)."""
WANTED = ("url", "node_order")


def broker_settings(text: str) -> BrokerSettings | None:
    """``(url, node_order)`` of the rendered spec ``text``: ``(None, None)`` when it has no
    top-level ``broker:``; None when they are written in a way this reader does not follow."""
    lines = "\n" + text
    found = list(_BROKER.finditer(lines))
    if not found:
        return None, None
    if len(found) > 1:
        return None  # a key given twice
    inline = _uncommented(found[0]["rest"])
    if inline:
        return _flow_mapping(inline)
    start = found[0].end()
    after = _TOP_LINE.search(lines, start)
    block = lines[start : after.start() if after else len(lines)].split("\n")[1:]
    values: dict[str, str | list[str]] = {}
    indent: int | None = None
    listing: tuple[str, int] | None = None  # the wanted key whose list items follow
    for raw in block:
        line = raw.rstrip("\r")
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        if "\t" in line[: len(line) - len(stripped)]:
            return None
        depth = len(line) - len(stripped)
        if indent is None:
            indent = depth
        if listing is not None:
            key, key_depth = listing
            item = _ITEM.match(stripped)
            if item is not None and depth >= key_depth:
                scalar = _scalar(item["value"])
                if scalar is None:
                    return None
                listed = values[key]
                assert isinstance(listed, list)
                listed.append(scalar)
                continue
            if depth > key_depth:
                return None  # something under the key that is no list item
            listing = None
        if depth != indent:
            if depth < indent:
                return None
            continue  # inside another key's value (management_url, version...)
        entry = _KEY.match(stripped)
        if entry is None:
            return None
        key = entry["key"].strip("'\"")
        if key not in WANTED:
            continue
        if key in values:
            return None
        value = _uncommented(entry["value"] or "")
        if value:
            scalar = _scalar(value)
            if scalar is None:
                return None
            values[key] = scalar
        else:
            values[key] = []
            listing = (key, depth)
    url, order = values.get("url"), values.get("node_order")
    if isinstance(url, list):
        url = ",".join(url) if url else None
        if url is None:
            return None
    if isinstance(order, list):
        return None
    return url, order


def _flow_mapping(text: str) -> BrokerSettings | None:
    """``{url: ..., node_order: ...}`` on one line, its values scalars."""
    if not (text.startswith("{") and text.endswith("}")):
        return None  # an alias, a tag, a scalar: not a mapping this reader follows
    items: list[str] = []
    current: list[str] = []
    quote = ""
    for char in text[1:-1]:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "{}[]":
            return None
        elif char == ",":
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    values: dict[str, str] = {}
    for item in items:
        if not item.strip():
            continue
        entry = _KEY.match(item.strip())
        if entry is None or entry["value"] is None:
            return None
        key = entry["key"].strip("'\"")
        scalar = _scalar(entry["value"])
        if key in values or scalar is None:
            return None
        values[key] = scalar
    return values.get("url"), values.get("node_order")


def _uncommented(value: str) -> str:
    return _COMMENT.sub("", value).strip()


def _scalar(value: str) -> str | None:
    """A one-line scalar's string, None when it is not a string this reader is sure of."""
    value = value.strip()
    if value.startswith("'"):
        end = value.rfind("'")
        inner = value[1:end]
        if end <= 0 or _uncommented(value[end + 1 :]) or "'" in inner.replace("''", ""):
            return None
        return inner.replace("''", "'")
    if value.startswith('"'):
        end = value.rfind('"')
        inner = value[1:end]
        if end <= 0 or _uncommented(value[end + 1 :]) or "\\" in inner or '"' in inner:
            return None
        return inner
    value = _uncommented(value)
    if not value or value.startswith(_NOT_PLAIN) or ": " in value or value.endswith(":"):
        return None
    return value
