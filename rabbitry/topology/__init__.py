"""The topology spec: load a templated YAML spec, check it, expand it into broker primitives.

``load_topology`` is the usual entry point; the steps it combines are public too, for tools
that need the spec itself (``validate`` for problems, ``spec_document`` for export).

The names are loaded on first use: a worker imports ``rabbitry.topology.spec.model`` and the
retry and delay patterns, and importing them must not load the checks, the exporter and the
schema (about a tenth of a worker's memory) that only ``validate``, ``plan`` and ``export`` use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rabbitry import lazy
from rabbitry.errors import SpecError, SpecProblem

if TYPE_CHECKING:
    from rabbitry.topology import primitives
    from rabbitry.topology.checks.validate import validate
    from rabbitry.topology.document import dump_yaml, spec_document, topology_data
    from rabbitry.topology.patterns.expand import expand
    from rabbitry.topology.primitives import Topology
    from rabbitry.topology.spec.loader import load_spec, load_spec_text, render_template
    from rabbitry.topology.spec.model import Spec
    from rabbitry.topology.spec.schema import json_schema

__all__ = [
    "Spec",
    "Topology",
    "check_spec",
    "dump_yaml",
    "expand",
    "json_schema",
    "load_spec",
    "load_spec_text",
    "load_topology",
    "log_warning",
    "primitives",
    "render_template",
    "spec_document",
    "topology_data",
    "validate",
]

_LAZY = {
    "primitives": "rabbitry.topology.primitives",
    "validate": "rabbitry.topology.checks.validate",
    "dump_yaml": "rabbitry.topology.document",
    "spec_document": "rabbitry.topology.document",
    "topology_data": "rabbitry.topology.document",
    "expand": "rabbitry.topology.patterns.expand",
    "Topology": "rabbitry.topology.primitives",
    "load_spec": "rabbitry.topology.spec.loader",
    "load_spec_text": "rabbitry.topology.spec.loader",
    "render_template": "rabbitry.topology.spec.loader",
    "Spec": "rabbitry.topology.spec.model",
    "json_schema": "rabbitry.topology.spec.schema",
}


__getattr__, __dir__ = lazy.names(__name__, _LAZY, __all__, modules=["primitives"])


logger = logging.getLogger(__name__)

WarningHandler = Callable[[SpecProblem], None]


def log_warning(problem: SpecProblem) -> None:
    """The default warning handler: the ``rabbitry.topology`` logger."""
    logger.warning("%s", problem)


def check_spec(spec: Spec, on_warning: WarningHandler | None = None) -> None:
    """Raise SpecError with every error of ``spec``; pass each warning to ``on_warning``.

    Warnings go to the ``rabbitry.topology`` logger when no handler is given.
    """
    from rabbitry.topology.checks.validate import validate

    problems = validate(spec)
    handler = on_warning or log_warning
    for problem in problems:
        if problem.severity != "error":
            handler(problem)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise SpecError(errors)


def load_topology(
    path: Path,
    variables: Mapping[str, str] | None = None,
    var_files: Sequence[Path] = (),
    environ: Mapping[str, str] | None = None,
    *,
    on_warning: WarningHandler | None = None,
) -> Topology:
    """Load, validate and expand the spec at ``path``: what plan and apply start from."""
    from rabbitry.topology.patterns.expand import expand
    from rabbitry.topology.spec.loader import load_spec

    spec = load_spec(path, variables, var_files, environ)
    check_spec(spec, on_warning)
    return expand(spec)
