"""The CLI starts fast: a command imports only what it needs, and every command is listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from rabbitry.cli import COMMANDS, cli

HEAVY = [
    "httpx",
    "pika",
    "pyspark",
    "rabbitry.publisher",
    "rabbitry.consumer.app",
    "rabbitry.consumer.engine",
    "rabbitry.amqp",
]
"""What no spec command needs (``validate`` stores the spec's worker view, through
``rabbitry.consumer.view``, but loads no worker)."""
EXAMPLE = Path(__file__).parents[2] / "examples" / "shop.yaml"


def loaded_after(*argv: str) -> list[str]:
    code = (
        "import sys\n"
        "from rabbitry.cli import cli\n"
        "try:\n"
        f"    cli.main({list(argv)!r}, standalone_mode=False)\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print([m for m in {[*HEAVY, 'pydantic']!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(eval(out.stdout.strip().splitlines()[-1]))


def test_version_loads_no_model_client_or_http_library() -> None:
    assert loaded_after("--version") == []


def test_validate_loads_the_spec_model_but_no_client_or_http_library() -> None:
    assert loaded_after("validate", str(EXAMPLE)) == ["pydantic"]


def test_every_listed_command_resolves_under_its_name() -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
    assert cli.get_command(ctx, "nonsense") is None


@pytest.mark.parametrize("verb", ["apply", "plan"])
def test_apply_and_plan_load_nothing_heavy_before_they_start_on_the_broker(verb: str) -> None:
    """`apply` claims the stack's lock and `plan` starts its broker reads before the spec model
    loads (the lock settles, the broker lists the vhost, while it does): the command's own
    module must not pull the model in."""
    code = (
        "import sys\n"
        "from rabbitry.cli import cli\n"
        "import click\n"
        f"cli.get_command(click.Context(cli), {verb!r})\n"
        "print(sorted(m for m in sys.modules if m.startswith(('rabbitry.topology', 'pydantic'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
