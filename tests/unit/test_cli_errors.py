"""Every command fails the same way: ``error: ...`` on stderr (or one JSON object with --json),
exit 1, never a traceback, never a password.

Driven without a broker: malformed URLs, hosts that refuse the connection, unknown options,
option values of the wrong kind, missing files. Wrong passwords on AMQP and HTTP need a broker:
tests/integration/test_cli_errors.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rabbitry.cli import cli

SPEC = str(Path(__file__).parents[2] / "examples" / "shop.yaml")
SECRET = "Sup3r-secret"
CLOSED_AMQP = f"amqp://admin:{SECRET}@127.0.0.1:1/"
CLOSED_HTTP = f"http://admin:{SECRET}@127.0.0.1:1"
MALFORMED = [
    f"http://admin:{SECRET}@[::1",
    f"http://admin:{SECRET}@host:abc",
    f"admin:{SECRET}@host:15672",
    f"ftp://admin:{SECRET}@host",
]

# Each broker command with the arguments it needs besides the broker options.
MANAGEMENT_COMMANDS = {
    "plan": ["plan", SPEC],
    "apply": ["apply", SPEC, "--auto-approve"],
    "export": ["export", "--vhost", "shop"],
    "status": ["status", SPEC],
    "dlq list": ["dlq", "list"],
    "stacks": ["stacks"],
}
AMQP_COMMANDS = {
    "dlq show": ["dlq", "show", "orders.parking"],
    "dlq replay": ["dlq", "replay", "orders.parking", "--all"],
    "dlq purge": ["dlq", "purge", "orders.parking", "--yes"],
    "shards check": ["shards", "check", "{sharded}"],
}
SHARDED = """\
version: 1
name: sharded
vhosts:
  - name: shop
    sharded_exchanges:
      - {name: orders, shards: 2}
"""
BAD_VALUES = {
    "apply": ["apply", SPEC, "--lock-timeout", "-1"],
    "plan": ["plan", "/no/such/spec.yaml"],
    "plan target version": ["plan", SPEC, "--target-version", "4.x"],
    "validate": ["validate", SPEC, "--var", "novalue"],
    "render": ["render", SPEC, "--format", "toml"],
    "graph": ["graph", SPEC, "--format", "png"],
    "export": ["export"],
    "show": ["show", SPEC],  # a spec, not a saved plan
    "import-definitions": ["import-definitions", SPEC],  # YAML, not a definitions file
    "shards check": ["shards", "check", SPEC, "--sample", "0"],
    "worker run": ["worker", "run", "no_such_module:app"],
    "worker log level": ["worker", "run", "x:y", "--log-level", "verbose"],
    "dlq show": ["dlq", "show", "q", "--limit", "many"],
    "dlq replay": ["dlq", "replay", "q"],
    "dev-broker up": ["dev-broker", "up", "--port", "http"],
    "completion": ["completion", "powershell"],
    "schema": ["schema", "extra"],
    "stacks": ["stacks", "--vhost"],  # no value
    "reconcile": ["reconcile", SPEC, "--listen", "nowhere"],
    "asyncapi": ["asyncapi", SPEC, "--app", "no_such_module:app"],
}


def every_command() -> list[list[str]]:
    def walk(command: click.Command, path: list[str]) -> list[list[str]]:
        if not isinstance(command, click.Group):
            return [path]
        ctx = click.Context(command)
        found = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None
            found += walk(sub, [*path, name])
        return found

    return walk(cli, [])


def run(runner: CliRunner, argv: list[str]) -> tuple[int, str, str]:
    if "{sharded}" in argv:
        spec = Path("sharded.yaml")  # in the test's own directory (the runner fixture's cwd)
        spec.write_text(SHARDED)
        argv = [str(spec.resolve()) if arg == "{sharded}" else arg for arg in argv]
    result = runner.invoke(cli, argv, catch_exceptions=False, prog_name="rabbitry")
    return result.exit_code, result.stdout, result.stderr


def assert_one_error(code: int, out: str, err: str) -> str:
    assert code == 1, (code, out, err)
    assert "Traceback" not in out + err
    assert SECRET not in out + err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), err
    return lines[-1]


def assert_json_error(code: int, out: str, err: str) -> dict[str, str]:
    assert code == 1, (code, out, err)
    assert "Traceback" not in out + err and SECRET not in out + err
    error = json.loads(err.strip().splitlines()[-1])["error"]
    assert error["type"] and error["message"], error
    return dict(error)


def test_the_tables_cover_every_command() -> None:
    covered = set(MANAGEMENT_COMMANDS) | set(AMQP_COMMANDS) | set(BAD_VALUES)
    listed = {" ".join(path) for path in every_command()}
    # dev-broker url and env: test_a_missing_dev_broker_is_an_error_with_what_to_do
    assert listed - covered - {"dev-broker down", "dev-broker url", "dev-broker env"} == set()


@pytest.mark.parametrize("url", MALFORMED)
@pytest.mark.parametrize("name", sorted(MANAGEMENT_COMMANDS))
def test_a_malformed_management_url_is_one_error_line(
    runner: CliRunner, name: str, url: str
) -> None:
    line = assert_one_error(*run(runner, [*MANAGEMENT_COMMANDS[name], "--management-url", url]))
    assert "management URL" in line and "http://" in line


@pytest.mark.parametrize("url", [u.replace("http", "amqp", 1) for u in MALFORMED[:2]])
@pytest.mark.parametrize("name", sorted({**MANAGEMENT_COMMANDS, **AMQP_COMMANDS}))
def test_a_malformed_amqp_url_is_one_error_line(runner: CliRunner, name: str, url: str) -> None:
    argv = {**MANAGEMENT_COMMANDS, **AMQP_COMMANDS}[name]
    line = assert_one_error(*run(runner, [*argv, "--url", url]))
    assert "AMQP URL" in line and "amqp://" in line


@pytest.mark.parametrize("name", sorted(MANAGEMENT_COMMANDS))
def test_a_management_api_that_refuses_the_connection_is_named(
    runner: CliRunner, name: str
) -> None:
    line = assert_one_error(
        *run(runner, [*MANAGEMENT_COMMANDS[name], "--management-url", CLOSED_HTTP])
    )
    assert "http://127.0.0.1:1" in line and "--management-url" in line


@pytest.mark.parametrize("name", sorted(AMQP_COMMANDS))
def test_an_amqp_port_that_refuses_the_connection_is_named(runner: CliRunner, name: str) -> None:
    line = assert_one_error(*run(runner, [*AMQP_COMMANDS[name], "--url", CLOSED_AMQP]))
    assert "amqp://admin@127.0.0.1:1/" in line and "Connection refused" in line
    assert "--url" in line


@pytest.mark.parametrize("path", every_command(), ids=" ".join)
def test_an_unknown_option_is_one_error_line_naming_the_command(
    runner: CliRunner, path: list[str]
) -> None:
    line = assert_one_error(*run(runner, [*path, "--no-such-option"]))
    command = " ".join(["rabbitry", *path])
    assert "no such option" in line and f"`{command} --help`" in line


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_option_value_or_argument_is_one_error_line(runner: CliRunner, name: str) -> None:
    assert_one_error(*run(runner, BAD_VALUES[name]))


@pytest.mark.parametrize("name", sorted(MANAGEMENT_COMMANDS))
def test_with_json_an_error_is_one_json_object_on_stderr(runner: CliRunner, name: str) -> None:
    argv = [*MANAGEMENT_COMMANDS[name], "--json", "--management-url", CLOSED_HTTP]
    if name in ("export", "apply"):
        argv.remove("--json")  # commands without --json still fail in text
        assert_one_error(*run(runner, argv))
        return
    error = assert_json_error(*run(runner, argv))
    assert error["type"] == "BrokerError" and "127.0.0.1:1" in error["message"]


def test_with_json_a_usage_error_is_json_too(runner: CliRunner) -> None:
    error = assert_json_error(*run(runner, ["plan", SPEC, "--json", "--lock-timeout", "1"]))
    assert error["type"] == "UsageError" and "--lock-timeout" in error["message"]


def test_with_json_a_spec_error_lists_its_problems(runner: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("version: 1\nname: x\nvhosts:\n  - name: v\n    queues: [{name: q, tpye: x}]\n")
    error = assert_json_error(*run(runner, ["plan", str(spec), "--json"]))
    assert error["type"] == "SpecError"
    (problem,) = json.loads(run(runner, ["plan", str(spec), "--json"])[2])["error"]["problems"]
    assert problem["line"] == 5 and problem["path"] == "vhosts[0].queues[0].tpye"


def test_an_unexpected_exception_is_reported_as_a_bug_without_traceback(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.cli import spec_commands

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(spec_commands, "load_spec_or_definitions", broken)
    line = assert_one_error(*run(runner, ["validate", SPEC]))
    assert "unexpected KeyError" in line and "bug" in line and "-v" in line
    code, _out, err = run(runner, ["validate", SPEC, "-v"])
    assert code == 1 and "Traceback" in err  # -v asks for it


def test_a_missing_dev_broker_is_an_error_with_what_to_do(runner: CliRunner) -> None:
    for verb in ("url", "env"):
        line = assert_one_error(*run(runner, ["dev-broker", verb, "--name", "nothing-here"]))
        assert "rabbitry dev-broker up" in line


def test_an_insecure_flag_that_contradicts_a_ca_file_is_refused(
    runner: CliRunner, tmp_path: Path
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not used")
    argv = ["plan", SPEC, "--ca-file", str(ca), "--insecure"]
    assert "contradict" in assert_one_error(*run(runner, argv))
    missing = ["plan", SPEC, "--ca-file", str(tmp_path / "nope.pem")]
    assert "does not exist" in assert_one_error(*run(runner, missing))


def test_a_ca_file_that_is_not_pem_is_one_error_line(runner: CliRunner, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    argv = ["plan", SPEC, "--ca-file", str(junk), "--management-url", "https://127.0.0.1:1"]
    assert "cannot be used" in assert_one_error(*run(runner, argv))


def test_dev_broker_without_the_containers_extra_says_what_to_install(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.testing import host
    from rabbitry.testing.engine import ContainerEngine

    monkeypatch.setitem(sys.modules, "docker", None)  # as if the extra were not installed
    monkeypatch.setattr(host, "require_engine", lambda: ContainerEngine("unix:///nowhere", True))
    for argv in (["dev-broker", "up"], ["dev-broker", "down"]):
        line = assert_one_error(*run(runner, argv))
        assert "pip install 'rabbitry[containers]'" in line


def test_completion_scripts_complete_commands_and_options(runner: CliRunner) -> None:
    for shell in ("bash", "zsh", "fish"):
        code, out, _ = run(runner, ["completion", shell])
        assert code == 0 and "_RABBITRY_COMPLETE" in out
    # what the shell's function asks for, answered by the command itself
    env = {"_RABBITRY_COMPLETE": "bash_complete", "COMP_WORDS": "rabbitry pl", "COMP_CWORD": "1"}
    done = runner.invoke(cli, [], env=env, prog_name="rabbitry")
    assert "plain,plan" in done.stdout.split()
    env["COMP_WORDS"], env["COMP_CWORD"] = "rabbitry apply spec.yaml --lock", "3"
    assert "--lock-timeout" in runner.invoke(cli, [], env=env, prog_name="rabbitry").stdout


def test_no_color_turns_colour_off_for_everything_the_command_prints(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--no-color`` sets NO_COLOR for the command, which ``color_enabled`` and rich honour."""
    import os

    monkeypatch.delenv("NO_COLOR", raising=False)
    seen: list[str | None] = []

    def summary(topology: object) -> str:
        seen.append(os.environ.get("NO_COLOR"))
        return ""

    monkeypatch.setattr("rabbitry.cli.spec_commands.summary", summary)
    run(runner, ["validate", SPEC])
    run(runner, ["validate", SPEC, "--no-color"])
    assert seen == [None, "1"]
    monkeypatch.delenv("NO_COLOR", raising=False)
