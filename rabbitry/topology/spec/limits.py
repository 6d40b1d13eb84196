"""What reading a spec may cost before rabbitry refuses it: size, YAML values, nesting, template
time and string sizes.

A spec is code (a Jinja2 template) and data (YAML with aliases): either can ask for more memory
or time than any topology needs, by accident or on purpose. The defaults hold twice the largest
topology rabbitry is measured at (50,000 objects: about 2.5 MB, 200,000 YAML values, 8 levels
deep), which validates in about 9 s on two cores; each limit is checked before its cost is paid,
so ``validate`` and ``plan`` of any input end within seconds, or with an error naming the limit
and the environment variable that raises it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from rabbitry.errors import SpecError, SpecProblem


@dataclass(frozen=True)
class SpecLimits:
    max_bytes: int = 16 * 1024 * 1024
    """Size of the spec file, and of the text its template renders (RABBITRY_SPEC_MAX_BYTES)."""
    max_values: int = 400_000
    """YAML values built, counting each use of an alias anew (RABBITRY_SPEC_MAX_VALUES)."""
    max_depth: int = 100
    """Nesting of YAML mappings and lists (RABBITRY_SPEC_MAX_DEPTH)."""
    max_render_seconds: float = 8.0
    """Time the template may take to render (RABBITRY_SPEC_MAX_RENDER_SECONDS)."""
    max_string: int = 8 * 1024 * 1024
    """Length of a string or list a template expression makes with ``*``, ``**`` or a filter's
    width argument (RABBITRY_SPEC_MAX_STRING)."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SpecLimits:
        env = os.environ if environ is None else environ
        values: dict[str, float] = {}
        for field in fields(cls):
            name = env_name(field.name)
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                value = float(raw) if field.type == "float" else int(raw.replace("_", ""))
            except ValueError:
                raise SpecError(
                    f"{name}={raw!r} is not a number: set it to a positive"
                    f" {'number' if field.type == 'float' else 'whole number'}, or unset it"
                ) from None
            if value <= 0:
                raise SpecError(f"{name}={raw!r} must be above 0, or unset")
            values[field.name] = value
        return cls(**values)  # type: ignore[arg-type]


def env_name(field: str) -> str:
    return "RABBITRY_SPEC_" + field.upper()


def number(value: float) -> str:
    """``12,345,678`` for whole numbers, ``2.5`` otherwise."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def exceeded(
    field: str, value: float, limit: float, what: str, file: str | None = None
) -> SpecError:
    """The error for a spec past one of its limits: which, by how much, how to raise it."""
    return SpecError(
        SpecProblem(
            f"{what} would be {number(value)}, past the limit of {number(limit)}: a topology"
            " rarely needs this much (a loop or a YAML alias that multiplies?); if this one"
            f" does, raise the limit with {env_name(field)}",
            file=file,
        )
    )
