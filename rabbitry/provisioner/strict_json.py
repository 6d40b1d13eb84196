"""JSON input read as strictly as the broker reads it: a definitions file, or a spec written as
JSON, refused whole before anything is planned or changed.

Python's ``json`` module accepts what the broker's import (and JSON itself) does not, and reads
it differently from what the file says:

- ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON numbers, and ``1e400`` is one that no
  double can hold (it reads as infinity): the broker refuses them, and the management API's
  client could not send them, so an apply would stop half way;
- a key written twice in one object keeps only its last value: the file would not mean what
  it says (``"x-queue-type": "quorum"`` and later ``"x-queue-type": "classic"`` is classic);
- a document nested deeper than the interpreter's stack stops the parser itself.

``loads`` reports every such place at once, by its path in the document
(``queues[3].arguments.x-message-ttl``); text that is not JSON at all raises the parser's own
``ValueError`` for the caller to report as it reports that.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology.spec.limits import SpecLimits, env_name

__all__ = ["loads"]

_MAX_PROBLEMS = 20
"""Places named in one error: a file with thousands of them needs the first few to be fixed."""


class _NotANumber:
    """Where the text held a number JSON cannot carry (the walk reports its path)."""

    __slots__ = ("literal",)

    def __init__(self, literal: str) -> None:
        self.literal = literal


class _Duplicated(dict[str, Any]):
    """An object that held a key more than once (the walk reports its path)."""

    duplicated: list[str]


class _Reading:
    """The parser's hooks for one document, and whether any of them met a problem (so that
    the walk that finds where runs only then)."""

    def __init__(self) -> None:
        self.found = False

    def constant(self, literal: str) -> _NotANumber:
        self.found = True
        return _NotANumber(literal)

    def number(self, literal: str) -> float | _NotANumber:
        value = float(literal)
        if math.isfinite(value):
            return value
        self.found = True
        return _NotANumber(literal)

    def object(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) == len(pairs):
            return out
        self.found = True
        seen: set[str] = set()
        duplicated = _Duplicated(out)
        duplicated.duplicated = []
        for key, _ in pairs:
            if key in seen and key not in duplicated.duplicated:
                duplicated.duplicated.append(key)
            seen.add(key)
        return duplicated


def _too_deep(limit: int, file: str | None) -> SpecError:
    return SpecError(
        SpecProblem(
            f"the document is nested deeper than {limit} levels of objects and lists: a"
            " broker's export is a few levels deep (a file nested this far is a mistake or an"
            f" attack); if this one does, raise the limit with {env_name('max_depth')}",
            file=file,
        )
    )


def loads(text: str, file: str | None = None, limits: SpecLimits | None = None) -> Any:
    """The JSON document of ``text``; a ``SpecError`` naming every place (up to 20) that holds
    a number JSON cannot carry or a key written twice, or a document nested deeper than
    ``limits.max_depth``; ``ValueError`` (``json.JSONDecodeError``) when it is not JSON."""
    limits = limits or SpecLimits.from_environment()
    reading = _Reading()
    try:
        data = json.loads(
            text,
            object_pairs_hook=reading.object,
            parse_constant=reading.constant,
            parse_float=reading.number,
        )
    except RecursionError:
        raise _too_deep(limits.max_depth, file) from None
    # level by level, without recursion: depth is what is being checked
    level: list[Any] = [data]
    depth = 0
    while level:
        depth += 1
        if depth > limits.max_depth:
            raise _too_deep(limits.max_depth, file)
        below: list[Any] = []
        for value in level:
            children = value.values() if isinstance(value, dict) else value
            below.extend([child for child in children if isinstance(child, dict | list)])
        level = below
    if reading.found:
        raise SpecError(_problems(data, file))
    return data


def _problems(data: Any, file: str | None) -> list[SpecProblem]:
    """Where ``data`` holds what the parser's hooks marked, by path (the first 20)."""
    if isinstance(data, _NotANumber):
        return [_not_a_number(data.literal, "", file)]
    problems: list[SpecProblem] = []
    level: list[tuple[Any, str]] = [(data, "")]
    while level and len(problems) < _MAX_PROBLEMS:
        below: list[tuple[Any, str]] = []
        for value, path in level:
            items: Any
            if isinstance(value, dict):
                if isinstance(value, _Duplicated):
                    problems.extend(
                        SpecProblem(
                            f"the key {key!r} is written twice in one object: JSON keeps only"
                            " the last, so the file would not mean what it says; keep one",
                            path=_join(path, key),
                            file=file,
                        )
                        for key in value.duplicated
                    )
                items = ((_join(path, str(key)), item) for key, item in value.items())
            else:
                items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
            for where, item in items:
                if isinstance(item, dict | list):
                    below.append((item, where))
                elif isinstance(item, _NotANumber):
                    problems.append(_not_a_number(item.literal, where, file))
        level = below
    return problems[:_MAX_PROBLEMS]


def _not_a_number(literal: str, path: str, file: str | None) -> SpecProblem:
    if literal in ("NaN", "Infinity", "-Infinity"):
        why = f"{literal} is not a JSON number"
    else:
        why = f"{literal} is past the largest number JSON carries (it reads as infinity)"
    return SpecProblem(
        f"{why}: the broker's JSON cannot hold it either; write a finite number",
        path=path,
        file=file,
    )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
