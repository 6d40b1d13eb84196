"""The ``rabbitry`` command: one module per verb group, thin over the library."""

from __future__ import annotations

import click

from rabbitry import __version__
from rabbitry.cli import dev_broker, dlq, provision, spec_commands, status, worker
from rabbitry.cli.common import RabbitryGroup


@click.group(cls=RabbitryGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rabbitry")
def cli() -> None:
    """Declarative RabbitMQ topology, delays and retries from one YAML spec."""


for _module in (spec_commands, provision, dev_broker, status, worker, dlq):
    for _command in _module.commands:
        cli.add_command(_command)


def main() -> None:
    """Console entry point (see ``RabbitryGroup`` for exit codes)."""
    cli.main()
