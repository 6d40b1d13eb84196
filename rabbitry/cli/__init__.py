"""The ``rabbitry`` command: one module per verb group, thin over the library.

Verb modules load only when their command runs (or help lists them): ``rabbitry --version``
imports none of them, and ``validate`` none of the clients, the HTTP client or Spark.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from rabbitry import __version__
from rabbitry.cli.common import RabbitryGroup

_BY_MODULE = {
    "spec_commands": {
        "validate": "validate",
        "render": "render",
        "schema": "schema",
        "graph": "graph",
    },
    "provision": {
        "plan": "plan_command",
        "apply": "apply_command",
        "show": "show_command",
        "export": "export_command",
        "import-definitions": "import_definitions_command",
    },
    "status": {"status": "status_command", "shards": "shards_group", "stacks": "stacks_command"},
    "worker": {"worker": "worker"},
    "dlq": {"dlq": "dlq"},
    "dev_broker": {"dev-broker": "dev_broker_group"},
    "completion": {"completion": "completion_command"},
}
COMMANDS = {
    name: (module, attr) for module, verbs in _BY_MODULE.items() for name, attr in verbs.items()
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
    cli.main()
