"""Options and error handling shared by the verb modules."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from rabbitry.diagnostics import Diagnostic
from rabbitry.errors import RabbitryError, Refusal, SpecError, SpecProblem
from rabbitry.uri import mask_text

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_INTERRUPTED = 130


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


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Machine-readable output on stdout (has format_version); errors and warnings as"
    " JSON lines on stderr.",
)


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


class Invocation:
    """How this run of the command talks: set from the command line before any command runs."""

    json = False
    """``--json`` was given: errors go to stderr as one JSON object, not as text."""
    verbose = 0


def color_enabled() -> bool:
    """Colour only on a terminal, and neither under NO_COLOR (https://no-color.org) nor with
    ``--no-color`` (which sets NO_COLOR for everything this process prints)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


class MaskingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


VERBOSE_LOGGERS = {
    1: {"rabbitry": "INFO", "httpx": "WARNING"},
    2: {"rabbitry": "DEBUG", "httpx": "DEBUG", "httpcore": "INFO", "pika": "INFO"},
}
"""What ``-v`` and ``-vv`` show: rabbitry's steps and every HTTP call; then AMQP and wire
detail."""


def set_verbosity(level: int) -> None:
    """``-v``: log rabbitry's steps and each management API call to stderr, secrets masked.

    Undone by ``reset_verbosity`` when the command ends (the CLI may run inside a process that
    goes on: a test, a notebook)."""
    if level <= Invocation.verbose:
        return
    reset_verbosity()
    Invocation.verbose = level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(MaskingFormatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
    for name, lvl in VERBOSE_LOGGERS[min(level, 2)].items():
        logger = logging.getLogger(name)
        _verbose_undo.append((logger, logger.level, logger.propagate))
        logger.setLevel(lvl)
        logger.addHandler(handler)
        logger.propagate = False
        _verbose_handlers.append((logger, handler))


_verbose_undo: list[tuple[logging.Logger, int, bool]] = []
_verbose_handlers: list[tuple[logging.Logger, logging.Handler]] = []


def reset_verbosity() -> None:
    for logger, handler in _verbose_handlers:
        logger.removeHandler(handler)
    for logger, level, propagate in reversed(_verbose_undo):
        logger.setLevel(level)
        logger.propagate = propagate
    _verbose_undo.clear()
    _verbose_handlers.clear()
    Invocation.verbose = 0


def _verbose_callback(ctx: click.Context, param: click.Parameter, value: int) -> None:
    set_verbosity(value)


def _no_color_callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        os.environ["NO_COLOR"] = "1"


COMMON_OPTIONS = (
    click.Option(
        ["-v", "--verbose"],
        count=True,
        expose_value=False,
        is_eager=True,
        callback=_verbose_callback,
        help="Log each step and management API call to stderr, secrets masked (-vv: more).",
    ),
    click.Option(
        ["--no-color"],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_no_color_callback,
        help="No colour in the output (NO_COLOR in the environment does the same).",
    ),
)
"""Options every command takes, wherever they are written on the command line."""


class RabbitryCommand(click.Command):
    """A command with the options every command takes (``-v``, ``--no-color``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(COMMON_OPTIONS)


class RabbitrySubgroup(click.Group):
    """A group of commands (``dlq``, ``worker`` ...) whose commands take the common options."""

    command_class = RabbitryCommand

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.extend(COMMON_OPTIONS)


def command(name: str | None = None, **kwargs: Any) -> Callable[[F], click.Command]:
    """``click.command`` for rabbitry: the command takes the common options."""
    return click.command(name, cls=RabbitryCommand, **kwargs)


def group(name: str | None = None, **kwargs: Any) -> Callable[[F], click.Group]:
    """``click.group`` for rabbitry: its commands take the common options."""
    return click.group(name, cls=RabbitrySubgroup, **kwargs)


def _json_requested(args: Sequence[str]) -> bool:
    for arg in args:
        if arg == "--":
            return False
        if arg == "--json":
            return True
    return False


def _error_json(message: str, kind: str, **extra: Any) -> str:
    return json.dumps({"error": {"type": kind, "message": mask_text(message), **extra}})


def _usage_text(exc: click.UsageError) -> str:
    message = exc.format_message().rstrip(".")
    message = message[:1].lower() + message[1:]
    if exc.ctx is None:
        return message
    path = exc.ctx.command_path
    return f"{message} ({path}): see `{path} --help`"


def fail(exc: BaseException) -> int:
    """Print ``exc`` as rabbitry prints every error and return the exit status.

    Text: ``error: <what> (<where>): <what to do>`` lines on stderr. With ``--json``: one JSON
    object ``{"error": {"type", "message", "diagnostics"}}`` on stderr: one diagnostic per
    refusal of a refused plan or apply, per problem of a spec (``problems`` too), else one.
    Never a traceback, unless ``-v`` asks for one on an error rabbitry did not expect.
    """
    if isinstance(exc, Refusal) and Invocation.json:
        found = [diagnostic_json(d) for d in exc.diagnostics]
        err(_error_json(str(exc), type(exc).__name__, diagnostics=found))
        return EXIT_ERROR
    if isinstance(exc, SpecError):
        if Invocation.json:
            problems = [problem_json(p) for p in exc.problems]
            found = [diagnostic_json(d) for d in exc.diagnostics]
            err(_error_json(str(exc), "SpecError", problems=problems, diagnostics=found))
        else:
            for problem in exc.problems:
                err(f"{problem.severity}: {problem}")
        return EXIT_ERROR
    if isinstance(exc, click.UsageError):
        text, kind = _usage_text(exc), "UsageError"
    elif isinstance(exc, click.exceptions.Abort):
        text, kind = "aborted: nothing was changed after the question", "Aborted"
    elif isinstance(exc, click.ClickException):
        text, kind = exc.format_message(), type(exc).__name__
    elif isinstance(exc, RabbitryError):
        text, kind = str(exc), type(exc).__name__
    elif isinstance(exc, KeyboardInterrupt):
        text, kind = "interrupted", "Interrupted"
    else:
        text = (
            f"unexpected {type(exc).__name__}: {exc}: this is a bug in rabbitry;"
            " run again with -v for the traceback, and report it"
        )
        kind = "InternalError"
        if Invocation.verbose:
            err("".join(traceback.format_exception(exc)))
    if Invocation.json:  # every error is a list of diagnostics, one at least
        said = exc.diagnostics if isinstance(exc, RabbitryError) else (Diagnostic(summary=text),)
        err(_error_json(text, kind, diagnostics=[diagnostic_json(d) for d in said]))
    else:
        err(f"error: {text}")
    return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_ERROR


def diagnostic_json(diagnostic: Diagnostic) -> dict[str, Any]:
    """A refusal for ``--json`` output: severity, summary, detail, address, source."""
    out = diagnostic.to_json()
    return {**out, "summary": mask_text(out["summary"]), "detail": mask_text(out["detail"])}


def problem_json(problem: SpecProblem) -> dict[str, Any]:
    """A spec problem for ``--json`` output (validate, and errors of every command): its
    severity, message, and place (file, line, column, path)."""
    where = problem.source().to_json()
    return {"severity": problem.severity, "message": mask_text(problem.message), **where}


class RabbitryGroup(RabbitrySubgroup):
    """The command group: errors become messages and exit codes, never tracebacks.

    Exit codes follow terraform: 0 success, 1 any error (usage errors included), 2 "changes
    present" (plan --detailed-exitcode). Living in ``main`` makes click's test runner see
    exactly what a user sees.
    """

    group_class = RabbitrySubgroup

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        argv = list(sys.argv[1:] if args is None else args)
        Invocation.json = _json_requested(argv)
        try:
            rc = super().main(argv, *rest, **kwargs)
        except click.exceptions.Exit as exc:
            rc = exc.exit_code
        except SystemExit:
            raise
        except BaseException as exc:  # every error leaves through fail(): no traceback
            rc = fail(exc)
        finally:
            reset_verbosity()
        sys.exit(rc if isinstance(rc, int) else EXIT_OK)


def broker_options(func: F, *, spec: bool = True) -> F:
    """``--url``, ``--management-url``, ``--ca-file``, ``--insecure``: where the broker is and
    how to trust it. Flags win over the environment, the environment over the spec (for the
    commands that read one: ``spec``)."""
    from_spec = ", or the spec's broker section" if spec else ""
    # each read from the environment too, and --help says from which variable
    from_environment: tuple[tuple[str, str, dict[str, Any]], ...] = (
        (
            "--insecure",
            "RABBITRY_INSECURE",
            {
                "is_flag": True,
                "default": None,
                "help": "Do not check the management API's TLS certificate (testing only).",
            },
        ),
        (
            "--ca-file",
            "RABBITRY_CA_FILE",
            {
                "metavar": "PEM",
                "help": "Trust this CA bundle for the management API's TLS certificate.",
            },
        ),
        (
            "--management-url",
            "RABBITRY_MANAGEMENT_URL",
            {
                "metavar": "URL",
                "help": "Management API URL(s), comma-separated (default:"
                f" derived from --url{from_spec}).",
            },
        ),
        (
            "--url",
            "RABBITRY_URL",
            {
                "metavar": "URL",
                "help": f"AMQP URL(s) (default: derived from --management-url"
                f"{from_spec}, or amqp://guest:guest@localhost:5672/).",
            },
        ),
    )
    for name, envvar, settings in from_environment:
        func = click.option(name, envvar=envvar, show_envvar=True, **settings)(func)
    return func


BROKER_PARAMS = ("url", "management_url", "ca_file", "insecure")


def broker_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """The broker options, taken out of a command's ``options``. A URL click read from
    ``RABBITRY_URL`` / ``RABBITRY_MANAGEMENT_URL`` is left for ``resolve_endpoints`` to read
    there, so that it knows which URL was given and which came from the environment (a
    ``--url`` never pairs with an environment's management URL of another host)."""
    broker = {name: options.pop(name) for name in BROKER_PARAMS}
    context = click.get_current_context(silent=True)
    if context is not None:
        for name in ("url", "management_url"):
            if context.get_parameter_source(name) is click.core.ParameterSource.ENVIRONMENT:
                broker[name] = None
    return broker


def endpoint_options(func: F) -> F:
    """The broker options, handed to the command as one resolved ``endpoints``."""

    @functools.wraps(func)
    def command(**options: Any) -> Any:
        from rabbitry.management.endpoints import resolve_endpoints

        broker = broker_arguments(options)
        return func(endpoints=resolve_endpoints(**broker), **options)

    return broker_options(command, spec=False)  # type: ignore[return-value]


target_option = click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="KIND/VHOST/NAME",
    help="Limit the work to these objects and what they need (repeatable; e.g."
    " queue/shop/orders.work, user/app). For repairs: the rest of the spec is left as it is.",
)


def log_options(default_format: str) -> Callable[[F], F]:
    """``--log-level`` and ``--log-format`` of the long-running commands (``worker run``,
    ``reconcile``); ``default_format``: ``text`` for a terminal, ``json`` for a log collector."""

    def decorate(func: F) -> F:
        func = click.option(
            "--log-format",
            type=click.Choice(["text", "json"]),
            default=default_format,
            show_default=True,
            help="Log lines as text, or as one JSON object each (for log collectors).",
        )(func)
        return click.option(
            "--log-level",
            type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
            default="info",
            show_default=True,
            help="Least severe log records to print.",
        )(func)

    return decorate


def live_progress() -> bool:
    """Progress displays only for a person at a terminal: stderr is one, no ``--json``, not in
    CI (``CI`` set, as every CI service does), not a dumb terminal."""
    return (
        sys.stderr.isatty()
        and not Invocation.json
        and not os.environ.get("CI")
        and os.environ.get("TERM") != "dumb"
    )


class Activity:
    """What a long command is doing, on stderr: a spinner for a step of unknown length, a bar
    for counted work; transient (gone when done) and nothing at all unless ``live_progress()``."""

    def __init__(self) -> None:
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> Activity:
        if live_progress():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A step of unknown length (a spinner while it runs)."""
        if self._progress is None:
            yield
            return
        task = self._progress.add_task(description, total=None)
        try:
            yield
        finally:
            self._progress.remove_task(task)

    def count(self, description: str, done: int, total: int) -> None:
        """Counted work: ``done`` of ``total`` (a bar per description)."""
        if self._progress is None:
            return
        task = self._tasks.get(description)
        if task is None:
            task = self._tasks[description] = self._progress.add_task(description, total=total)
        self._progress.update(task, completed=done, total=total)
