"""Options and error handling shared by the verb modules."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rabbitry.errors import RabbitryError, SpecError
from rabbitry.uri import mask_text

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2


def spec_options(func: F) -> F:
    """``SPEC`` argument plus ``--var k=v`` and ``--var-file``, as every spec-reading verb takes."""
    func = click.option(
        "--var-file",
        "var_files",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="YAML file of template variables (repeatable; later files win).",
    )(func)
    func = click.option(
        "--var",
        "variables",
        multiple=True,
        metavar="KEY=VALUE",
        help="Template variable (repeatable; wins over --var-file).",
    )(func)
    func = click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))(
        func
    )
    return func


def parse_vars(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--var {pair!r}: expected KEY=VALUE")
        out[name] = value
    return out


def err(message: str) -> None:
    click.echo(mask_text(message), err=True)


def color_enabled() -> bool:
    """Colour only on a terminal and only when NO_COLOR is unset (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


class RabbitryGroup(click.Group):
    """The command group: errors become messages and exit codes, never tracebacks.

    Exit codes follow terraform: 0 success, 1 any error (usage errors included), 2 "changes
    present" (plan --detailed-exitcode). Living in ``main`` makes click's test runner see
    exactly what a user sees.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            rc = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            err("Aborted.")
            sys.exit(EXIT_ERROR)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(EXIT_ERROR)
        except SpecError as exc:
            for problem in exc.problems:
                err(f"{problem.severity}: {problem}")
            sys.exit(EXIT_ERROR)
        except RabbitryError as exc:
            err(f"error: {exc}")
            sys.exit(EXIT_ERROR)
        sys.exit(rc if isinstance(rc, int) else EXIT_OK)


def broker_options(func: F) -> F:
    """``--url`` / ``--management-url``; the environment and the spec fill in what is not given."""
    func = click.option(
        "--management-url",
        metavar="URL",
        help="Management API URL (default: $RABBITRY_MANAGEMENT_URL, the spec, or derived).",
    )(func)
    func = click.option(
        "--url",
        metavar="URL",
        help="AMQP URL (default: $RABBITRY_URL, the spec's broker.url, or localhost).",
    )(func)
    return func


def target_options(func: F) -> F:
    """``SPEC``, its template variables and the broker options, handed to the command as one
    loaded and checked ``target`` (warnings to stderr)."""

    @functools.wraps(func)
    def command(
        spec: Path,
        variables: tuple[str, ...],
        var_files: tuple[Path, ...],
        url: str | None,
        management_url: str | None,
        **options: Any,
    ) -> Any:
        from rabbitry.provisioner.target import target_of  # the spec model loads only here

        target = target_of(
            spec,
            url=url,
            management_url=management_url,
            variables=parse_vars(variables),
            var_files=var_files,
            on_warning=lambda problem: err(f"warning: {problem}"),
        )
        return func(target, **options)

    return spec_options(broker_options(command))  # type: ignore[return-value]
