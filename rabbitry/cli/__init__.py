"""The ``rabbitry`` command: one module per verb group, thin over the library.

Verb modules load only when their command runs (or help lists them): ``rabbitry --version``
imports none of them, and ``validate`` none of the clients, the HTTP client or Spark.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
from typing import Any, NoReturn

import click

from rabbitry import __version__
from rabbitry.cli.common import RabbitryGroup

COMMANDS = {
    "validate": ("spec_commands", "validate"),
    "render": ("spec_commands", "render"),
    "schema": ("spec_commands", "schema"),
    "graph": ("spec_commands", "graph"),
    "asyncapi": ("asyncapi", "asyncapi_command"),
    "plan": ("plan", "plan_command"),  # its own module: its broker reads start before loading
    "apply": ("apply", "apply_command"),  # its own module: it claims its lock before loading
    "reconcile": ("reconcile", "reconcile_command"),
    "show": ("provision", "show_command"),
    "export": ("provision", "export_command"),
    "import-definitions": ("provision", "import_definitions_command"),
    "status": ("status", "status_command"),
    "shards": ("status", "shards_group"),
    "stacks": ("status", "stacks_command"),
    "worker": ("worker", "worker"),
    "dlq": ("dlq", "dlq"),
    "dev-broker": ("dev_broker", "dev_broker_group"),
    "completion": ("completion", "completion_command"),
}
"""Command name -> (module in rabbitry.cli, attribute), in the order ``--help`` lists them."""


class LazyGroup(RabbitryGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        module = importlib.import_module(f"rabbitry.cli.{where[0]}")
        command: Any = getattr(module, where[1])
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rabbitry")
def cli() -> None:
    """Declarative RabbitMQ topology, delays and retries from one YAML spec."""


def main() -> None:
    """Console entry point (see ``RabbitryGroup`` for exit codes)."""
    try:
        cli.main()
    except SystemExit as exc:
        if isinstance(exc.code, int):
            leave(exc.code)
        raise


def leave(code: int) -> NoReturn:
    """End the process with ``code`` without tearing the interpreter down.

    Freeing every object of a loaded spec one by one costs a tenth of a second at exit for
    the examples and seconds for a spec of 50,000 objects, for memory the operating system
    takes back at once. What the interpreter's exit must still do is done first: the atexit
    handlers (logging's flush, temporary files, coverage), then stdout and stderr flushed.
    While another thread runs, the normal exit (which waits for it) is kept.
    """
    if threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (`| head`), or a stream closed
            code = code or 120  # what the interpreter's exit reports for a failed flush
    os._exit(code)
