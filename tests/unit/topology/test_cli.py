"""`rabbitry validate`, `render` and `schema` through click's test runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.topology import json_schema

from .test_expand import EXAMPLES

SHOP = str(EXAMPLES / "shop.yaml")


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("SHOP_PASSWORD", raising=False)
    return CliRunner()


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return str(path)


def test_validate_example(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["validate", SHOP])
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"{SHOP}: valid (1 vhost, 3 exchanges, 4 queues, 4 bindings, 1 policy, 1 user)\n"
    )


def test_validate_prints_warnings_and_succeeds(runner: CliRunner, tmp_path: Path) -> None:
    spec = write(tmp_path, "version: 1\nvhosts:\n  - name: v\n    permissions: [{user: x}]\n")
    result = runner.invoke(cli, ["validate", spec])
    assert result.exit_code == 0
    assert f"warning: {spec}:4:26: vhosts[0].permissions[0].user: user 'x'" in result.stderr
    assert "valid (1 vhost)" in result.output


def test_validate_errors_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    spec = write(
        tmp_path, "version: 1\nvhosts:\n  - name: v\n    queues: [{name: q, durabel: 1}]\n"
    )
    result = runner.invoke(cli, ["validate", spec])
    assert result.exit_code == 1
    assert result.stderr == (
        f"error: {spec}:4:24: vhosts[0].queues[0].durabel: unknown key 'durabel' "
        "(did you mean 'durable'?)\n"
    )
    assert result.stdout == ""


def test_validate_semantic_errors_exit_1(runner: CliRunner, tmp_path: Path) -> None:
    spec = write(
        tmp_path, "version: 1\nvhosts:\n  - name: v\n    queues: [{name: q, exclusive: true}]\n"
    )
    result = runner.invoke(cli, ["validate", spec])
    assert result.exit_code == 1
    assert f"error: {spec}:4:35: vhosts[0].queues[0].exclusive: exclusive" in result.stderr


def test_validate_with_vars(runner: CliRunner, tmp_path: Path) -> None:
    spec = write(tmp_path, "version: 1\nvhosts:\n  - name: '{{ vhost }}'\n")
    var_file = tmp_path / "vars.yaml"
    var_file.write_text("vhost: from-file\n")
    assert runner.invoke(cli, ["validate", spec]).exit_code == 1
    assert runner.invoke(cli, ["validate", spec, "--var", "vhost=x"]).exit_code == 0
    assert runner.invoke(cli, ["validate", spec, "--var-file", str(var_file)]).exit_code == 0
    bad = runner.invoke(cli, ["validate", spec, "--var", "novalue"])
    assert bad.exit_code != 0


def test_render_yaml_masks_passwords(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", SHOP, "--var", "vhost=t1"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.output)
    assert data["vhosts"][0]["name"] == "t1"
    assert data["users"][0]["password"] == "***"
    assert "change-me" not in result.output
    queue = next(q for q in data["vhosts"][0]["queues"] if q["name"] == "notifications")
    assert queue["arguments"] == {"x-message-ttl": 300_000, "x-max-length": 10_000}


def test_render_json(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", SHOP, "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["name"] == "shop"
    exchanges = {e["name"]: e for e in data["vhosts"][0]["exchanges"]}
    assert exchanges["shop.events"]["arguments"] == {"alternate-exchange": "shop.unrouted"}


def test_render_masks_uri_passwords(runner: CliRunner, tmp_path: Path) -> None:
    spec = write(
        tmp_path,
        "version: 1\nvhosts:\n  - name: v\n    parameters:\n"
        "      - {component: federation-upstream, name: up, value: {uri: 'amqp://u:topsecret@h'}}\n",
    )
    result = runner.invoke(cli, ["render", spec])
    assert result.exit_code == 0, result.output
    assert "topsecret" not in result.output
    assert "amqp://u:***@h" in result.output


def test_render_template_only(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", SHOP, "--template-only", "--var", "vhost=t2"])
    assert result.exit_code == 0
    assert '  - name: "t2"\n' in result.output
    assert result.output.startswith("# yaml-language-server:")


def test_schema_prints_json_schema(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output) == json_schema()


def test_render_template_only_masks_passwords(runner: CliRunner, tmp_path: Path) -> None:
    spec = write(
        tmp_path,
        "version: 1\nusers:\n  - name: a\n    password: '{{ env.PW }}'\n"
        "  - {name: b, password: plain, tags: []}\n  - {name: c, password_hash: keep}\n",
    )
    result = runner.invoke(cli, ["render", spec, "--template-only"], env={"PW": "s3cret"})
    assert result.exit_code == 0, result.output
    assert "s3cret" not in result.output and "plain" not in result.output
    assert '    password: "***"\n' in result.output
    assert '{name: b, password: "***", tags: []}' in result.output
    assert "password_hash: keep" in result.output
