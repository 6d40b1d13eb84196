"""``rabbitry completion bash|zsh|fish``: the shell's completion script, from click's own."""

from __future__ import annotations

import click

from rabbitry.cli.common import command

COMPLETE_VAR = "_RABBITRY_COMPLETE"


@command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_command(shell: str) -> None:
    """Print the completion script for SHELL (commands, options, choices and files).

    \b
    bash:  eval "$(rabbitry completion bash)"         in ~/.bashrc
    zsh:   eval "$(rabbitry completion zsh)"          in ~/.zshrc
    fish:  rabbitry completion fish > ~/.config/fish/completions/rabbitry.fish
    """
    from click.shell_completion import get_completion_class

    from rabbitry.cli import cli

    completer = get_completion_class(shell)
    assert completer is not None  # the Choice above allows only shells click knows
    click.echo(completer(cli, {}, "rabbitry", COMPLETE_VAR).source())
