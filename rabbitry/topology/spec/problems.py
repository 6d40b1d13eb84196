"""Pydantic validation errors rewritten as spec problems a person can act on.

Pydantic says ``Extra inputs are not permitted`` at ``('vhosts', 0, 'queues', 1, 'durabel')``;
users need ``spec.yaml:12:7: vhosts[0].queues[1].durabel: unknown key 'durabel' (did you mean
'durable'?)``. The model class at each location is found by walking the spec model along the
error's path, which gives the valid keys to suggest from.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from rabbitry.errors import SpecProblem
from rabbitry.topology.spec.arguments import KnownKeys, aliases
from rabbitry.topology.spec.source_map import Loc, SourceMap, format_path

_QUOTED = re.compile(r"'([^']*)'")
_SECRET_KEYS = ("password", "url", "uri")


def problems_from_validation_error(
    error: ValidationError, root: type[BaseModel], source: SourceMap | None
) -> list[SpecProblem]:
    """One problem per pydantic error, located in the source when ``source`` is known."""
    problems: list[SpecProblem] = []
    for detail in error.errors(include_url=False):
        loc: Loc = tuple(detail["loc"])
        message, path_loc, at_key = _describe(detail, loc, root)
        if source is not None:
            mark = source.locate(path_loc if detail["type"] == "missing" else loc, at_key=at_key)
            problems.append(
                SpecProblem(
                    message,
                    path=format_path(path_loc),
                    file=(mark.file if mark else None) or source.file,
                    line=mark.line if mark else None,
                    column=mark.column if mark else None,
                )
            )
        else:
            problems.append(SpecProblem(message, path=format_path(path_loc)))
    return sorted(problems, key=by_position)


def by_position(problem: SpecProblem) -> tuple[int, int]:
    """Sort key: file order, problems without a position last (stable otherwise)."""
    return (problem.line or 1 << 30, problem.column or 0)


def _describe(detail: ErrorDetails, loc: Loc, root: type[BaseModel]) -> tuple[str, Loc, bool]:
    """(message, path to report, whether to point at the key rather than the value)."""
    kind = detail["type"]
    ctx = detail.get("ctx") or {}
    value = detail.get("input")
    if kind == "extra_forbidden" and loc:
        return _unknown_key(str(loc[-1]), model_at(root, loc[:-1])), loc, True
    if kind == "missing" and loc:
        return f"missing required key {loc[-1]!r}", loc[:-1], False
    shown = _show(value, loc)
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", ""))
        options = _QUOTED.findall(expected)
        hint = _suggest(str(value), options) if isinstance(value, str) else ""
        return f"expected {expected}, got {shown}{hint}", loc, False
    if kind == "value_error":
        return str(ctx.get("error", detail["msg"])), loc, False
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {shown}", loc, False
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, got {shown}", loc, False
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}, got {shown}", loc, False
    if kind == "string_too_short":
        return "must not be empty", loc, False
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long", loc, False
    if kind == "string_pattern_mismatch":
        return f"{shown} does not match the pattern {ctx.get('pattern')}", loc, False
    message = detail["msg"].replace("Input should be", "expected")
    return f"{message[:1].lower()}{message[1:]}, got {shown}", loc, False


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list (write [] for none)",
    "tuple_type": "a list",
    "dict_type": "a mapping of keys to values",
    "model_type": "a mapping of keys to values",
    "model_attributes_type": "a mapping of keys to values",
}


def _unknown_key(key: str, model: type[BaseModel] | None) -> str:
    if model is None:
        return f"unknown key {key!r}"
    if issubclass(model, KnownKeys) and key in model.misplaced:
        return f"{key!r} is not accepted here: {model.misplaced[key]}"
    valid = aliases(model)
    hint = _suggest(key, valid)
    if issubclass(model, KnownKeys):
        escape = (
            "unchecked_definition"
            if "definition" in model.__name__.lower()
            else "unchecked_arguments"
        )
        hint += f"; keys rabbitry does not know go under `{escape}`"
    elif not hint:
        hint = f" (expected one of: {', '.join(valid)})"
    return f"unknown key {key!r}{hint}"


def _suggest(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not close:
        # "message-ttl" in queue arguments should still find "x-message-ttl", and back.
        variants = {f"x-{word}": word, word.removeprefix("x-"): word}
        close = [v for v in variants if v in options][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


def _show(value: Any, loc: Loc) -> str:
    if loc and any(s in str(loc[-1]).lower() for s in _SECRET_KEYS):
        return "a value that is not shown"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class that validates the mapping found at ``loc``, if there is one."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, int):
            if typing.get_origin(current) in (list, tuple):
                current = typing.get_args(current)[0]
                continue
            return None
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return None
        current = field.annotation
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp
