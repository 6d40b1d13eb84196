"""Rendering a spec (the map from rendered lines back to the source lines is in ``line_map``).

Templates see ``env`` (the process environment), ``vars`` (from ``--var-file`` then ``--var``;
each variable is also a top-level name) and render with ``StrictUndefined``: a missing
variable is an error naming it, never an empty string that turns ``password: {{ env.PW }}``
into a user without a password. Block tags on their own line leave no blank line behind
(``trim_blocks``/``lstrip_blocks``), so ``{% for %}`` loops keep YAML indentation intact.

A spec without template syntax renders to itself; only one with it loads Jinja2 and the
sandbox it renders in (``sandbox``), so a worker running a plain spec does not carry them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology.spec.limits import SpecLimits, exceeded
from rabbitry.topology.spec.line_map import LineMap, Rendered

_JINJA_MARKERS = ("{{", "{%", "{#")
"""What makes a text a template, with the options of ``sandbox`` (no line statements or
comments)."""


def read_var_files(paths: Sequence[Path]) -> dict[str, Any]:
    """Variables from YAML mappings, later files winning key by key."""
    merged: dict[str, Any] = {}
    for path in paths:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise SpecError(
                SpecProblem(f"cannot read var file: {exc.strerror}", file=str(path))
            ) from None
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark
            raise SpecError(
                SpecProblem(
                    f"invalid YAML in var file: {exc.problem}",
                    file=str(path),
                    line=mark.line + 1 if mark else None,
                    column=mark.column + 1 if mark else None,
                )
            ) from None
        if data is None:
            continue
        if not isinstance(data, dict):
            raise SpecError(
                SpecProblem("a var file must be a mapping of names to values", file=str(path))
            )
        merged.update({str(k): v for k, v in data.items()})
    return merged


@dataclass(frozen=True)
class TemplateInputs:
    """What a spec's template is rendered with, besides its text."""

    variables: Mapping[str, str] | None = None
    """``--var`` values: they win over the var files'."""
    var_files: Sequence[Path] = ()
    """YAML mappings of variables, later files winning key by key."""
    environ: Mapping[str, str] | None = None
    """What templates see as ``env`` (None: ``os.environ``)."""
    search_path: Path | None = None
    """Where ``{% include %}`` looks."""


def render_template(
    text: str,
    filename: str = "<spec>",
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    *,
    search_path: Path | None = None,
) -> str:
    """Render ``text`` as a Jinja2 template; errors become SpecError with file:line.

    ``environ`` defaults to ``os.environ``; ``search_path`` is where ``{% include %}`` looks.
    """
    inputs = TemplateInputs(variables, var_files, environ, search_path)
    return render_with_lines(text, filename, inputs).text


def render_with_lines(text: str, filename: str, inputs: TemplateInputs) -> Rendered:
    """Like :func:`render_template`, plus the map from rendered lines to template lines."""
    values = read_var_files(inputs.var_files)
    if not any(marker in text for marker in _JINJA_MARKERS):
        # Plain YAML renders to itself: a large generated spec skips compiling a template of
        # its size (0.3 s at 50,000 objects). Var files are still read, and must still be valid.
        limits = SpecLimits.from_environment(inputs.environ)
        if len(text) > limits.max_bytes:
            raise exceeded(
                "max_bytes", len(text), limits.max_bytes, "the rendered spec's size", filename
            )
        return Rendered(text, LineMap.identity(filename, text))
    from rabbitry.topology.spec.sandbox import render_jinja

    return render_jinja(
        text, filename, values, inputs.variables, inputs.environ, search_path=inputs.search_path
    )
