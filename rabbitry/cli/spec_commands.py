"""spec_commands commands."""

from __future__ import annotations

import click

commands: list[click.Command] = []
