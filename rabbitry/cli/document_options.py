"""What the commands that print a document of a spec share (``render``, ``graph``,
``asyncapi``): the spec loaded and checked with its warnings on stderr, a ``--format`` option,
``-o/--output``, and writing the document to one or the other."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from rabbitry.cli.common import err, parse_vars, spec_options
from rabbitry.cli.reporting import show_warning
from rabbitry.errors import SpecProblem
from rabbitry.topology import check_spec, load_spec
from rabbitry.topology.spec.model import Spec

F = TypeVar("F", bound=Callable[..., Any])


def print_warning(problem: SpecProblem) -> None:
    show_warning(problem)


def checked_spec(spec: Path, variables: tuple[str, ...], var_files: Sequence[Path]) -> Spec:
    """SPEC loaded with its --var and --var-file values and checked: an error raises, a warning
    goes to stderr."""
    loaded = load_spec(spec, parse_vars(variables), var_files)
    check_spec(loaded, on_warning=print_warning)
    return loaded


def checked_spec_options(func: F) -> F:
    """``SPEC``, ``--var`` and ``--var-file``, handed to the command as the spec loaded and
    checked (``checked_spec``)."""

    @functools.wraps(func)
    def command(
        spec: Path, variables: tuple[str, ...], var_files: tuple[Path, ...], **options: Any
    ) -> Any:
        return func(checked_spec(spec, variables, var_files), **options)

    return spec_options(command)  # type: ignore[return-value]


def format_option(*formats: str, help: str) -> Callable[[F], F]:
    """``--format`` (the parameter ``output_format``): one of ``formats``, the first by default."""
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(list(formats)),
        default=formats[0],
        show_default=True,
        help=help,
    )


output_option = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write to this file instead of standard output.",
)


def write_document(text: str, output: Path | None) -> None:
    """``text`` to standard output, or to the file ``output`` (said on stderr)."""
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        err(f"wrote {output}")


__all__ = [
    "checked_spec",
    "checked_spec_options",
    "format_option",
    "output_option",
    "print_warning",
    "write_document",
]
