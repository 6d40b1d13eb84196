"""The topology spec: load a templated YAML spec, check it, expand it into broker primitives.

``load_topology`` is the usual entry point; the steps it combines are public too, for tools
that need the spec itself (``validate`` for problems, ``spec_document`` for export).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rabbitry.errors import SpecError, SpecProblem
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
    "primitives",
    "render_template",
    "spec_document",
    "topology_data",
    "validate",
]

logger = logging.getLogger(__name__)

WarningHandler = Callable[[SpecProblem], None]


def _log_warning(problem: SpecProblem) -> None:
    logger.warning("%s", problem)


def check_spec(spec: Spec, on_warning: WarningHandler | None = None) -> None:
    """Raise SpecError with every error of ``spec``; pass each warning to ``on_warning``.

    Warnings go to the ``rabbitry.topology`` logger when no handler is given.
    """
    problems = validate(spec)
    handler = on_warning or _log_warning
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
    spec = load_spec(path, variables, var_files, environ)
    check_spec(spec, on_warning)
    return expand(spec)
