"""Plain YAML at C++ speed, for large specs: rapidyaml (the ``fast`` extra) parses, PyYAML's
rules read the scalars.

A spec of 50,000 objects is 2.5 MB of YAML. libyaml composes it into marked nodes in about two
seconds; rapidyaml parses it in 0.06 s. Its tree becomes Python values in one of two ways:
rapidyaml writes it as JSON and the json module reads that (``_json_reading``: a few C passes,
used whenever the text shows nothing the two could read differently), or a walk of the tree
node by node (``_Walker``: four times slower, for everything else). Positions are not recorded
on this path: they are needed only to point at a problem, so the source map is filled by the
marked loader the first time one is asked for.

Only plain YAML takes this path: mappings with string keys, sequences and scalars, as a spec is
written. Anything else is left to the marked loader, which is the one that reports errors and
applies every rule: a syntax error, anchors and aliases, merge keys, tags,
duplicate keys, keys that are not strings, characters YAML does not allow, a document past the
limits. Scalars are resolved with PyYAML's own resolver and constructors (YAML 1.1: ``yes`` is
true, ``010`` is 8), so both paths give the same values.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.nodes import ScalarNode

from rabbitry.topology.spec.limits import SpecLimits

_NOT_IMPORTED: Any = object()

ryml: Any = _NOT_IMPORTED
"""rapidyaml (the ``fast`` extra), imported by ``_rapidyaml`` the first time a text is large
enough to take this path: a small spec never needs it, and it costs a worker 1.5 MiB."""


def _rapidyaml() -> Any:
    """The ``ryml`` module, or None where the extra is not installed."""
    global ryml
    if ryml is _NOT_IMPORTED:
        try:
            import ryml as module
        except ImportError:  # pragma: no cover - exercised where the extra is not installed
            module = None
        ryml = module
    return ryml


_STR = "tag:yaml.org,2002:str"

FAST_FROM = 64 * 1024
"""Texts shorter than this (characters) take the marked loader: it is fast enough there."""

_UNLIKE = "\t\r\x85\u2028\u2029"
"""What the two parsers read differently: tabs, the line breaks YAML 1.1 knows besides LF, and
directives (``%`` starting a line). A spec rarely has them; one that does takes the marked
loader."""


def _unlike(text: str) -> bool:
    # one fast find a character: a regex tries each of 2.5 MB's positions 40 times slower
    return any(c in text for c in _UNLIKE) or text.startswith("%") or "\n%" in text


_INDICATORS = frozenset("?:,[]{}#&*!|>'\"%@`")
"""What PyYAML refuses at the start of a plain scalar somewhere (rapidyaml reads some as text;
``?`` and ``:`` start one only outside flow collections)."""


_AFTER_QUOTE = re.compile("[\"'] +[^ \n:#,\\]}]")
"""A quoted scalar followed on its line by more than a colon, comma, bracket or comment."""


def _odd_quoting(text: str) -> bool:
    """Quoted scalars that span lines, or with text after them on their line: rapidyaml reads
    some that PyYAML refuses. Conservative: a line that merely might be one counts."""
    if '"' not in text and "'" not in text:
        return False
    if _AFTER_QUOTE.search(text):
        return True
    return any(
        line.count('"') % 2 or line.count("'") % 2
        for line in text.split("\n")
        if '"' in line or "'" in line
    )


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """rapidyaml prints a parse error to file descriptor 2 before raising it; the marked
    loader reports the error in rabbitry's words, so that text must not reach the terminal.
    The descriptor is the process's: held for the parse only (0.06 s at 50,000 objects),
    before plan starts any thread of its own."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def available() -> bool:
    return _rapidyaml() is not None


# Internal: caught in this module, which hands the text to the marked loader.
class _Unplain(Exception):
    """The text needs the marked loader."""


class _Scalars:
    """Plain scalars resolved as PyYAML's SafeLoader would, memoised: a spec repeats its
    values (types, flags, numbers) thousands of times, and every result is immutable."""

    def __init__(self) -> None:
        self.resolver = yaml.resolver.Resolver()
        self.constructor = yaml.constructor.SafeConstructor()
        self.known: dict[str, Any] = {}

    def plain(self, value: str) -> Any:
        try:
            return self.known[value]
        except KeyError:
            pass
        if value and (
            value[0] in _INDICATORS
            or (value[0] == "-" and value[1:2] in ("", " ", "\t"))
            or value[0] == " "
            or value[-1] == " "
            or ": " in value
            or " #" in value
        ):
            raise _Unplain  # not a plain scalar PyYAML would read: misread lines around it
        tag = self.resolver.resolve(ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
        if tag == _STR:
            out: Any = value
        else:
            construct = self.constructor.yaml_constructors.get(tag)
            if construct is None:  # the merge key `<<` or the value key `=`
                raise _Unplain
            try:
                out = construct(self.constructor, ScalarNode(tag, value))
            except yaml.YAMLError:
                raise _Unplain from None
        if isinstance(out, list | dict | set):  # never for a plain scalar, but never shared
            raise _Unplain
        self.known[value] = out
        return out


_parsed: tuple[str, Any] | None = None
"""The text ``peek_names`` parsed and its tree, for ``load_plain`` to take instead of parsing
the same text again."""


def _tree(text: str) -> Any | None:
    """rapidyaml's tree of ``text`` when it is plain YAML this module reads, else None."""
    global _parsed
    if _parsed is not None and _parsed[0] is text:
        tree, _parsed = _parsed[1], None
        return tree
    if len(text) < FAST_FROM or not text.endswith("\n") or _rapidyaml() is None:
        return None  # (a block scalar ending the text unterminated: PyYAML's reading)
    if yaml.reader.Reader.NON_PRINTABLE.search(text) or _unlike(text):
        return None
    if _odd_quoting(text):
        return None
    try:
        with _quiet_stderr():
            return ryml.parse_in_arena(text.encode("utf-8"))
    except Exception:  # a syntax error: the marked loader says where and what
        return None


def peek_names(text: str) -> tuple[str, list[str]] | None:
    """The stack name and the vhost names of a large plain spec, read off its YAML tree
    without building the document: ``rabbitry plan`` starts reading those vhosts from the
    broker while the spec loads. None when this module would not load the text, or when the
    spec names its own broker (``broker:``: where to read is known only once it is loaded).
    A guess, never a check: the loaded spec is what counts."""
    global _parsed
    tree = _tree(text)
    if tree is None:
        return None
    _parsed = (text, tree)
    try:
        root = tree.root_id()
        if tree.is_stream(root):
            root = tree.first_child(root)
        if not tree.is_map(root):
            return None
        stack, vhosts = "default", []
        for key, node in _entries(tree, root):
            if key == "broker":
                return None
            if key == "name":
                stack = _scalar(tree, node)
            if key == "vhosts" and tree.is_seq(node):
                for item in _children(tree, node):
                    name = dict(_entries(tree, item)).get("name") if tree.is_map(item) else None
                    if name is not None:
                        vhosts.append(_scalar(tree, name))
        return stack, vhosts
    except Exception:  # an alias, a tag, an odd tree: no guess
        return None


def _scalar(tree: Any, node: int) -> str:
    if not tree.has_val(node) or tree.type(node) & (ryml.VALREF | ryml.VALTAG | ryml.VALANCH):
        raise _Unplain  # an alias, a tag or no scalar: the loaded spec will say
    return str(tree.val(node), "utf-8")


def _children(tree: Any, node: int) -> Iterator[int]:
    child = tree.first_child(node)
    while child != ryml.NONE:
        yield child
        child = tree.next_sibling(child)


def _entries(tree: Any, node: int) -> Iterator[tuple[str, int]]:
    for child in _children(tree, node):
        if tree.has_key(child):
            yield str(tree.key(child), "utf-8"), child


def load_plain(text: str, limits: SpecLimits) -> tuple[Any, bool]:
    """``(data, True)`` for plain YAML, ``(None, False)`` when the marked loader must read it."""
    tree = _tree(text)
    if tree is None:
        return None, False
    data = _json_reading(tree, text, limits)
    if data is not None:
        return data, True
    try:
        return _Walker(tree, limits).document(), True
    except _Unplain:
        return None, False


_RESOLVED = "|".join(
    sorted(
        {
            f"(?x:{regexp.pattern})"
            for resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.values()
            for _tag, regexp in resolvers
        }
    )
)
_ASK_THE_WALKER = re.compile(
    # the walker's indicators (``_INDICATORS``), a dash or white space first
    _RESOLVED + "|[" + re.escape("".join(sorted(_INDICATORS))) + r"""\s-]|.*(?::\s|\s\#|\s$)""",
    re.DOTALL,
)
"""A string the JSON reading cannot vouch for without knowing whether the YAML quoted it:
one PyYAML's resolver would read as another type when plain (``yes``, ``010``, ``~``, a
date), or one the walker would not take as a plain scalar (an indicator first, ``: `` or
`` #`` inside, spaces around). Matched for any first character: a superset is safe."""

_RYML_SPECIALS = frozenset({".nan", ".inf", "-.inf"})
"""What rapidyaml's JSON writes for ``nan``, ``inf`` and ``.NaN`` alike: the text's own
spelling (a string to PyYAML, or a float) is lost, so the walker reads it."""

_NODE_PROPERTIES = "&*!|>?"
_TOKEN_START = " \n[{,:"
"""What may stand right before a token: white space, a flow indicator, or the colon after a
quoted key in a flow mapping (``{"k":yes}`` is true to PyYAML)."""
_SIGNED_POINT = re.compile(r"[-+]\.[0-9]")


def _node_properties(text: str) -> bool:
    """What the JSON reading does not take: anchors, aliases, tags, block scalars and explicit
    keys where a token may start (a quoted string holding one only costs the faster reading),
    and a signed number with no digit before its point (``-.5``, a string to PyYAML, which
    rapidyaml's JSON writes as ``-0.5``). Found a character at a time (a regex trying every
    position of a large text is far slower)."""
    if ("-." in text or "+." in text) and _SIGNED_POINT.search(text):
        return True
    for char in _NODE_PROPERTIES:
        at = text.find(char)
        while at != -1:
            if at == 0 or text[at - 1] in _TOKEN_START:
                return True
            at = text.find(char, at + 1)
    return False


_DECIMAL = re.compile(r"-?[0-9]+\.[0-9]+")
"""The only JSON float the JSON reading takes as written: PyYAML reads it the same."""

_SUSPECTS = 64
"""More distinct strings to vouch for than this, and the walker reads the text instead."""


def _decimal(literal: str) -> float:
    if _DECIMAL.fullmatch(literal) is None:
        raise _Unplain  # an exponent or a form PyYAML reads otherwise (1e3 is a string there)
    return float(literal)


def _no_constants(literal: str) -> Any:
    raise _Unplain  # NaN or Infinity: rapidyaml writes .nan and .inf as strings


def _json_reading(tree: Any, text: str, limits: SpecLimits) -> dict[str, Any] | None:
    """The document as the walker would read it, from rapidyaml's JSON of the tree; None when
    the text holds anything that reading cannot vouch for.

    JSON keeps a string's text but not whether the YAML quoted it, and PyYAML's reading of a
    plain scalar depends on it (``yes`` is true, ``'yes'`` a string). So every string whose
    reading could depend on it (``_ASK_THE_WALKER``) must be shown quoted wherever it stands in
    the text: ``_plain_somewhere`` looks for it unquoted where a plain scalar could start, and
    one sighting, a comment's included, hands the text to the walker. Numbers and ``true``,
    ``false`` and ``null`` are written bare only for plain scalars, and read as PyYAML reads
    them; anchors, tags and block scalars never take this path (``_node_properties``)."""
    if tree.size() > limits.max_values or _node_properties(text):
        return None
    root = tree.root_id()
    if tree.is_stream(root):
        docs = _children(tree, root)
        root = next(docs, None)
        if root is None or next(docs, None) is not None:
            return None
    if not tree.is_map(root):
        return None
    try:
        # rapidyaml refuses a tree deeper than its own limit (an exception of its own)
        written = ryml.emit_json_malloc(tree, root)
        data = json.loads(written, parse_float=_decimal, parse_constant=_no_constants)
    except Exception:  # that, bad JSON, or a number PyYAML reads otherwise
        return None
    if not isinstance(data, dict):
        return None
    keys, values, count, depth = _strings(data)
    if depth > limits.max_depth or not _RYML_SPECIALS.isdisjoint(values):
        return None
    # json keeps the last of two equal keys: count them in the text (each ends in `":`, which
    # a string holds only escaped, `\":`)
    if '\\":' in written or written.count('":') != count:
        return None
    suspects = {v for v in values if v and _ASK_THE_WALKER.match(v)}
    suspects.update(k for k in keys if not k or " " in k or _ASK_THE_WALKER.match(k))
    if len(suspects) > _SUSPECTS or any(_plain_somewhere(text, s) for s in suspects):
        return None
    return data


def _strings(data: dict[str, Any]) -> tuple[set[str], set[str], int, int]:
    """The distinct keys and string values of ``data``, its number of keys and its depth in
    mappings and lists, in one pass over its containers."""
    keys: set[str] = set()
    values: set[str] = set()
    count = depth = 0
    level: list[Any] = [data]
    while level:
        depth += 1
        below = []
        for container in level:
            if container.__class__ is dict:
                keys.update(container)
                count += len(container)
                items = container.values()
            else:
                items = container
            for item in items:
                kind = item.__class__
                if kind is str:
                    values.add(item)
                elif kind is dict or kind is list:
                    below.append(item)
        level = below
    return keys, values, count, depth


def _plain_somewhere(text: str, string: str) -> bool:
    """Whether ``string`` may stand unquoted in ``text`` where a plain scalar or key could
    start and end (runs of white space may be a folded line break; in any case, as rapidyaml's
    JSON writes ``.NaN`` as ``.nan``). Errs towards yes."""
    words = string.split()
    if not words:
        return True  # only white space: no text to look for
    body = r"\s+".join(map(re.escape, words))
    # `#` first on a line or after white space starts a comment, not a scalar
    starts = "[{,:" if string[0] == "#" else _TOKEN_START
    at_start = string[0] != "#"
    # the text first, then what stands before it: a look-behind first is much slower
    for found in re.finditer(body + r"(?=[\s,\]}:#]|$)", text, re.MULTILINE | re.IGNORECASE):
        at = found.start()
        if text[at - 1] in starts if at else at_start:
            return True
    return False


class _Walker:
    def __init__(self, tree: Any, limits: SpecLimits) -> None:
        self.tree = tree
        self.size = tree.size()
        self.budget = limits.max_values
        self.max_depth = limits.max_depth
        self.scalars = _Scalars()
        self.special = (
            ryml.KEYREF | ryml.VALREF | ryml.KEYANCH | ryml.VALANCH | ryml.KEYTAG | ryml.VALTAG
        )
        self.map, self.seq, self.quoted = ryml.MAP, ryml.SEQ, ryml.VALQUO
        self.block = ryml.VAL_LITERAL | ryml.VAL_FOLDED | ryml.KEY_LITERAL | ryml.KEY_FOLDED
        self.key_quoted = ryml.KEYQUO

    def document(self) -> Any:
        tree = self.tree
        root = tree.root_id()
        if tree.is_stream(root):
            docs = self.children(root)
            if len(docs) != 1:
                raise _Unplain  # several documents, or none: the marked loader's errors
            root = docs[0]
        flags = tree.type(root)
        if not flags & self.map:
            raise _Unplain  # a spec is a mapping: the marked loader's error otherwise
        return self.value(root, flags, 0)

    def children(self, node: int) -> list[int]:
        tree, size = self.tree, self.size
        out = []
        child = tree.first_child(node)
        while child < size:
            out.append(child)
            child = tree.next_sibling(child)
        return out

    def value(self, node: int, flags: int, depth: int) -> Any:
        self.budget -= 1
        if self.budget < 0 or depth > self.max_depth or flags & self.special:
            raise _Unplain
        if flags & self.block:  # block scalars: headers and chomping are PyYAML's to read
            raise _Unplain
        tree = self.tree
        if flags & self.map:
            out: dict[str, Any] = {}
            children = self.children(node)
            for child in children:
                child_flags = tree.type(child)
                if child_flags & (self.special | self.block):
                    raise _Unplain
                raw_key = tree.key(child)
                if raw_key is None:
                    raise _Unplain  # an empty key
                raw = str(raw_key, "utf-8")
                if child_flags & self.key_quoted:
                    key = raw
                elif " " in raw:  # perhaps a key folded from several lines, which YAML refuses
                    raise _Unplain
                else:
                    key = self.scalars.plain(raw)
                if not isinstance(key, str):
                    raise _Unplain  # keys that are not strings: the marked loader's problems
                out[key] = self.value(child, child_flags, depth + 1)
            if len(out) != len(children):
                raise _Unplain  # a duplicate key: a problem with its line
            return out
        if flags & self.seq:
            return [self.value(child, tree.type(child), depth + 1) for child in self.children(node)]
        raw_value = tree.val(node)
        if raw_value is None:
            return None
        text = str(raw_value, "utf-8")
        if flags & self.quoted:
            return text
        return self.scalars.plain(text)
