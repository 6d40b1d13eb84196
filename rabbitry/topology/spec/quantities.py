"""Durations and byte sizes as people write them ("30s", "10MiB"), as the broker wants them (ints).

The broker only understands milliseconds and bytes; a spec that says ``x-message-ttl: 1800000``
hides a mistake in a column of zeros. So the spec accepts units, converts them once here, and
the export writes them back with the largest exact unit, so the text round-trips to the same int.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

DURATION_UNITS_MS: dict[str, int] = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
"""Duration units, largest last; ``m`` is minutes (months are never a TTL)."""

SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
"""Byte units: SI (kB = 1000) and IEC (KiB = 1024); matched without regard to case."""

_SIZE_NAMES = {"kb": "kB", "mb": "MB", "gb": "GB", "tb": "TB"} | {
    k: k[0].upper() + "iB" for k in ("kib", "mib", "gib", "tib")
}

DURATION_PATTERN = r"^\s*(\d+\s*(ms|s|m|h|d)\s*)+$|^\s*\d+\s*$"
SIZE_PATTERN = r"^\s*\d+\s*([kKmMgGtT][iI]?[bB]|[bB])?\s*$"
MAX_AGE_PATTERN = r"^\d+[YMDhmsdy]$"

_DURATION_FORMATS = tuple(
    (unit, factor) for unit, factor in reversed(DURATION_UNITS_MS.items()) if factor > 1
)
"""The units a duration is written back in, largest first (milliseconds stay an int)."""
_SIZE_FORMATS = tuple(
    (_SIZE_NAMES[name], SIZE_UNITS[name])
    for name in ("tib", "gib", "mib", "kib", "tb", "gb", "mb", "kb")
)
"""The units a size is written back in: IEC first, then SI, largest first (bytes stay an int)."""

_DURATION_PART = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
_DURATION = re.compile(DURATION_PATTERN)
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")
_MAX_AGE = re.compile(r"^(\d+)([YMDhmsdy])$")


def _whole_number(value: object, what: str, examples: str) -> int | None:
    """``value`` when it is a whole number of the unit (an int, or a float without a fraction),
    else None; a negative one or a bool (YAML's yes/no) is refused, said as ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"expected {what} such as {examples}, got {value}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} cannot be negative, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


def parse_duration(value: object) -> int:
    """Milliseconds from an int or a text like ``"30s"``, ``"1h30m"``, ``"250ms"``."""
    if isinstance(value, str) and _DURATION.match(value):
        text = value.strip()
        if text.isdigit():
            return int(text)
        return sum(int(n) * DURATION_UNITS_MS[unit] for n, unit in _DURATION_PART.findall(text))
    number = _whole_number(value, "a duration", "30s, 5m, 1h or milliseconds")
    if number is not None:
        return number
    raise ValueError(
        f"expected a duration such as 250ms, 30s, 5m, 1h, 2d, 1h30m or an integer number of "
        f"milliseconds, got {value!r}"
    )


def format_duration(ms: int) -> int | str:
    """The shortest exact text for ``ms`` (``30000`` -> ``"30s"``); small odd values stay ints."""
    return _in_largest_unit(ms, _DURATION_FORMATS)


def parse_size(value: object) -> int:
    """Bytes from an int or a text like ``"10MB"`` (10 * 1000**2) or ``"1GiB"`` (1024**3)."""
    number = _whole_number(value, "a size", "10MB, 512KiB or a number of bytes")
    if number is not None:
        return number
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match and match[2].lower() in (*SIZE_UNITS, ""):
            return int(match[1]) * SIZE_UNITS.get(match[2].lower(), 1)
    raise ValueError(
        f"expected a size such as 500kB, 10MB, 1GiB (kB/MB/GB/TB are powers of 1000, "
        f"KiB/MiB/GiB/TiB powers of 1024) or a number of bytes, got {value!r}"
    )


def format_size(size: int) -> int | str:
    """The shortest exact text for ``size``: IEC units first, then SI, else the plain int."""
    return _in_largest_unit(size, _SIZE_FORMATS)


def _in_largest_unit(value: int, units: tuple[tuple[str, int], ...]) -> int | str:
    """``value`` in the first of ``units`` (name, factor) that divides it exactly, else as it
    is (as is zero or less)."""
    if value <= 0:
        return value
    for name, factor in units:
        if value % factor == 0:
            return f"{value // factor}{name}"
    return value


def parse_max_age(value: object) -> str:
    """A stream retention age in the broker's own notation (``7D``, ``12h``, ``1Y``).

    The broker reads ``M`` as months and ``m`` as minutes, so no conversion is attempted; only
    lower-case ``d`` and ``y`` (unambiguous) are upper-cased to what the broker accepts.
    """
    if isinstance(value, str):
        match = _MAX_AGE.match(value.strip())
        if match:
            unit = match[2]
            return f"{int(match[1])}{unit.upper() if unit in 'dy' else unit}"
    raise ValueError(
        f"expected an age such as 7D, 12h, 30m, 1Y (Y years, M months, D days, h hours, "
        f"m minutes, s seconds), got {value!r}"
    )


def _int_or_text(pattern: str, description: str) -> dict[str, Any]:
    return {
        "anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": pattern},
        ],
        "description": description,
    }


Milliseconds = Annotated[
    int,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        _int_or_text(DURATION_PATTERN, "Milliseconds, or a duration: 250ms, 30s, 5m, 1h, 2d.")
    ),
]
"""A duration; the model holds milliseconds."""

Bytes = Annotated[
    int,
    BeforeValidator(parse_size),
    WithJsonSchema(_int_or_text(SIZE_PATTERN, "Bytes, or a size: 500kB, 10MB, 1GiB.")),
]
"""A size; the model holds bytes."""

MaxAge = Annotated[
    str,
    BeforeValidator(parse_max_age),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": MAX_AGE_PATTERN,
            "description": "Age in the broker's notation: 7D, 12h, 30m, 1Y (M = months).",
        }
    ),
]
"""A stream retention age, kept as the broker's text."""
