"""Argument maps written back into the spec (``rabbitry export``): the keys an arguments model
checks, durations and sizes with their units, under one key, and the rest, which the model
would not take back as they are, under another (pure)."""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from rabbitry.topology.kinds.kind import Document
from rabbitry.topology.primitives import JSON, same_json
from rabbitry.topology.spec.arguments import KnownKeys
from rabbitry.topology.spec.quantities import (
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)


def split_arguments(
    out: Document,
    values: Mapping[str, JSON],
    model: type[KnownKeys],
    checked_key: str,
    unchecked_key: str,
) -> None:
    """Split ``values`` into the keys the model checks and the ones it would not take back."""
    formatters, known = model_keys(model)
    checked: Document = {}
    unchecked: Document = {}
    for key, value in values.items():
        if key in known and _survives(model, key, value):
            checked[key] = formatters.get(key, _same)(value)
        else:
            unchecked[key] = value
    if checked:
        out[checked_key] = checked
    if unchecked:
        out[unchecked_key] = unchecked


def flags(out: Document, durable: bool, auto_delete: bool) -> None:
    """A queue's or exchange's flags, where they are not the defaults."""
    if not durable:
        out["durable"] = False
    if auto_delete:
        out["auto_delete"] = True


def _survives(model: type[KnownKeys], key: str, value: JSON) -> bool:
    """Whether loading ``{key: value}`` gives back exactly ``value`` (else keep it unchecked)."""
    try:
        loaded = model.model_validate({key: value}).as_broker_dict()
    except ValidationError:
        return False
    return key in loaded and same_json(loaded[key], value)


def _same(value: JSON) -> JSON:
    return value


@functools.cache
def model_keys(
    model: type[BaseModel],
) -> tuple[dict[str, Callable[[JSON], JSON]], frozenset[str]]:
    """The unit formatters and the keys of an arguments model: read once per model, not per
    queue (an export of 5,000 queues spent half its time reading the same annotations)."""
    known = frozenset(field.alias or name for name, field in model.model_fields.items())
    return _unit_formatters(model), known


def _unit_formatters(model: type[BaseModel]) -> dict[str, Callable[[JSON], JSON]]:
    """Keys whose values take units, with the function that writes them with units."""
    out: dict[str, Callable[[JSON], JSON]] = {}
    for name, field in model.model_fields.items():
        parsers = set(_before_validators(field.annotation))
        if parse_duration in parsers:
            out[field.alias or name] = _with(format_duration)
        elif parse_size in parsers:
            out[field.alias or name] = _with(format_size)
    return out


def _with(formatter: Callable[[int], int | str]) -> Callable[[JSON], JSON]:
    return lambda value: formatter(value) if isinstance(value, int) else value


def _before_validators(annotation: Any) -> list[Callable[..., Any]]:
    found: list[Callable[..., Any]] = []
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, BeforeValidator):
            found.append(meta.func)
    for arg in typing.get_args(annotation):
        found.extend(_before_validators(arg))
    return found


__all__ = ["flags", "model_keys", "split_arguments"]
