"""docs/cli.md, written from the commands themselves: ``python -m rabbitry.cli.reference``.

A unit test compares the file with this output, so the reference cannot drift from ``--help``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator

import click

from rabbitry.cli import cli
from rabbitry.cli.common import COMMON_OPTIONS

HEADER = """\
# Command reference

Written from the commands' own definitions (`python -m rabbitry.cli.reference > docs/cli.md`);
a test keeps it equal to `--help`. Every command also takes `-v`/`--verbose` (log each step and
management API call to stderr, secrets masked; `-vv` for more) and `--no-color` (as does
`NO_COLOR` in the environment).

Exit status: 0 success, 1 any error, 2 changes present (`plan --detailed-exitcode`), 3 not
healthy (`status`, `shards check`). Every error is one `error: ...` line on stderr, or with
`--json` one object `{"error": {"type": ..., "message": ..., "diagnostics": [...]}}`. Each
diagnostic has `severity`, `summary`, `detail`, `address` (`kind`, `vhost`, `name` of the
object, or null) and `source` (`file`, `line`, `column`, `path` in the spec, or null). A
refused plan or apply (a `PlanError` or `CapabilityError`) has one per refusal (`detail`: its
line of the message). A spec error has one per problem (the message as `summary`, the place
as `source`) and `problems`, each with `severity`, `message`, `file`, `line`, `column` and
`path`. Any other error has one, its message as `summary`.
A warning (of the spec, or of the run: `apply --target`) is a `warning: ...` line on stderr,
or with `--json` one object on a line of its own, `{"warning": {...}}`, holding one diagnostic
with `severity` `"warning"` and the fields above. So every line a `--json` run writes on stderr
is one JSON object: its warnings as they arise, `plan -o FILE`'s
`{"saved_plan": {"file": ..., "apply": ...}}`, then the error if one ends it; stdout holds only
the command's result. `validate --json` lists its warnings with its errors, in its result's
`problems` and `diagnostics`.

Broker options resolve in this order: the flag, its environment variable, the spec's `broker:`
section, then `amqp://guest:guest@localhost:5672/`. One URL is enough: the other is derived from
its host and credentials (AMQP 5672 and management 15672; amqps and https 5671 and 15671), and
`-v` says so. The two URLs name one broker: a flag (`--url`) with the other URL from the
environment (`RABBITRY_MANAGEMENT_URL`) naming another host is an error; give both flags, or
unset the variable to derive it. A management URL derived from an AMQP URL on another port than
5672 (5671) is only a guess: commands that need the management API refuse it.

Passwords are never printed: in every message, text or `--json`, whatever looks like
`user:secret@` has the secret masked (`user:***@`), with or without a scheme, in each entry of
a comma-separated list, and `host:5672@user:secret` (the halves swapped) has both masked.
Files that may hold secrets (`plan -o`, `export -o`, `import-definitions -o`) are written
mode 0600 under a fresh name created without following links, then renamed into place.
"""


def commands(
    command: click.Command = cli, path: tuple[str, ...] = ("rabbitry",)
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every leaf command under ``command`` with its full name, in ``--help`` order."""
    if not isinstance(command, click.Group):
        yield path, command
        return
    ctx = click.Context(command)
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        assert sub is not None
        yield from commands(sub, (*path, name))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(option: click.Option, ctx: click.Context) -> str:
    if option.is_flag or option.count:
        return ""
    default = option.get_default(ctx, call=False)
    if default is None or callable(default) or isinstance(default, (tuple, list)):
        return ""
    text = str(default)
    return f"`{text}`" if text and not text.startswith("Sentinel.") else ""


def option_row(option: click.Option, ctx: click.Context) -> str:
    names = ", ".join(f"`{name}`" for name in option.opts + option.secondary_opts)
    if not option.is_flag and not option.count:
        names += f" {_cell(option.make_metavar(ctx))}"
    env = f"`{option.envvar}`" if isinstance(option.envvar, str) and option.show_envvar else ""
    return f"| {names} | {_cell(option.help or '')} | {_default(option, ctx)} | {env} |"


def section(path: tuple[str, ...], command: click.Command) -> str:
    ctx = click.Context(command, info_name=" ".join(path))
    usage = " ".join([*path, *command.collect_usage_pieces(ctx)])
    lines = [f"## `{' '.join(path)}`", "", "```text", usage, "```", ""]
    for paragraph in inspect.cleandoc(command.help or "").split("\n\n"):
        if paragraph.startswith("\b\n"):  # click's "do not rewrap": a block as written
            lines += ["```text", paragraph[2:], "```", ""]
        else:
            lines += [paragraph, ""]
    options = [
        p
        for p in command.params
        if isinstance(p, click.Option) and p not in COMMON_OPTIONS and not p.hidden
    ]
    if options:
        lines += ["| option | meaning | default | environment |", "| --- | --- | --- | --- |"]
        lines += [option_row(option, ctx) for option in options]
        lines.append("")
    return "\n".join(lines)


def reference() -> str:
    return HEADER + "\n" + "\n".join(section(path, cmd) for path, cmd in commands())


if __name__ == "__main__":
    sys.stdout.write(reference())
