"""The documentation says what the commands do: docs/cli.md is what ``--help`` says, and every
``rabbitry <command> --flag`` written anywhere in the docs exists on that command."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.cli.reference import commands, reference

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LEAVES = {" ".join(path): command for path, command in commands()}
GROUPS = {"rabbitry dlq", "rabbitry worker", "rabbitry shards", "rabbitry dev-broker"}


def test_docs_cli_md_is_what_the_commands_say() -> None:
    written = (ROOT / "docs" / "cli.md").read_text()
    assert written == reference(), "run: python -m rabbitry.cli.reference > docs/cli.md"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_option_has_plain_help(name: str) -> None:
    command = LEAVES[name]
    assert command.help, f"{name} has no help"
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help"
            assert "``" not in param.help and ":class:" not in param.help, param.help
    assert "``" not in command.help, f"{name}: reST markup in the help"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_options_read_from_the_environment_show_their_variable(name: str) -> None:
    result = CliRunner().invoke(cli, [*name.split()[1:], "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for param in LEAVES[name].params:
        if isinstance(param, click.Option) and param.envvar:
            assert f"[env var: {param.envvar}]" in result.output, (name, param.opts)


def mentioned_flags() -> list[tuple[str, str, str]]:
    """(document, command, flag) for every ``rabbitry <command> ... --flag`` on one line of a
    code span or block; the command is the longest known command name the words start with."""
    found = []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            for match in re.finditer(r"\brabbitry((?: [a-z][a-z-]*)+)([^`|#;&]*)", line):
                words = ("rabbitry" + match[1]).split()
                name = None
                for size in range(len(words), 1, -1):
                    candidate = " ".join(words[:size])
                    if candidate in LEAVES:
                        name = candidate
                        break
                if name is None:
                    continue
                for flag in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", match[0]):
                    found.append((doc.name, name, flag))
    return found


def test_the_docs_mention_flags() -> None:
    assert len(mentioned_flags()) > 40  # the scan below has something to check


@pytest.mark.parametrize(("doc", "name", "flag"), sorted(set(mentioned_flags())))
def test_every_flag_the_docs_mention_exists(doc: str, name: str, flag: str) -> None:
    command = LEAVES[name]
    known = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            known.update(param.opts + param.secondary_opts)
    assert flag in known, f"{doc}: `{name} {flag}`: {name} has no such option"
