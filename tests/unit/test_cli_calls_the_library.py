"""``rabbitry plan`` and ``rabbitry apply`` parse options and call ``rabbitry.plan`` and
``rabbitry.apply``, the functions a user's code calls: one plan path and one apply path.
Driven without a broker: the library functions are replaced by recorders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.cli.reporting import CommandReporter
from rabbitry.provisioner import stack
from rabbitry.provisioner.apply_options import ApplyResult
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.plans import Plan

SPEC = str(Path(__file__).parents[2] / "examples" / "shop.yaml")
BROKER = [
    "--management-url",
    "http://admin:pw@127.0.0.1:1",
    "--url",
    "amqp://admin:pw@127.0.0.1:1/",
]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, dict[str, Any]]]:
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    empty = Plan(stack="shop", changes=(), record=OwnershipRecord("shop"))

    def plan(spec: str, **options: Any) -> Plan:
        seen["plan"] = (str(spec), options)
        return empty

    def apply(spec: str, **options: Any) -> ApplyResult:
        seen["apply"] = (str(spec), options)
        return ApplyResult(done=["created queue shop/orders"], plan=empty)

    monkeypatch.setattr(stack, "plan", plan)
    monkeypatch.setattr(stack, "apply", apply)
    return seen


def test_apply_passes_every_option_to_rabbitry_apply_and_prints_its_result(
    calls: dict[str, tuple[str, dict[str, Any]]],
) -> None:
    argv = ["apply", SPEC, "--auto-approve", "--json", "--prune", "--force", "--var", "a=b"]
    argv += ["--target", "queue/shop/orders", "--take-over", "other", "--lock-timeout", "3"]
    result = CliRunner().invoke(cli, argv + BROKER)
    assert result.exit_code == 0, result.output
    spec, options = calls["apply"]
    assert spec == SPEC
    assert options["variables"] == {"a": "b"} and options["targets"] == ("queue/shop/orders",)
    assert options["prune"] and options["force"] and not options["allow_replace"]
    assert options["take_over"] == ("other",) and options["lock_timeout"] == 3.0
    assert options["management_url"] == "http://admin:pw@127.0.0.1:1"
    report = options["report"]
    assert isinstance(report, CommandReporter) and report.auto_approve and report.as_json
    printed = json.loads(result.stdout)
    assert printed["done"] == ["created queue shop/orders"] and printed["format_version"] == 1


def test_plan_passes_every_option_to_rabbitry_plan(
    calls: dict[str, tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    out = tmp_path / "saved.plan"
    argv = ["plan", SPEC, "--target-version", "4.3", "-o", str(out), "--detailed-exitcode"]
    result = CliRunner().invoke(cli, argv + BROKER)
    assert result.exit_code == 0, result.output  # no changes
    spec, options = calls["plan"]
    assert spec == SPEC and options["save_to"] == out and options["target_version"] == (4, 3)
    assert options["url"] == "amqp://admin:pw@127.0.0.1:1/"
    assert f"Saved the plan to {out}" in result.stderr


def test_plan_json_says_where_it_saved_the_plan_as_json(
    calls: dict[str, tuple[str, dict[str, Any]]], tmp_path: Path
) -> None:
    out = tmp_path / "saved.plan"
    result = CliRunner().invoke(cli, ["plan", SPEC, "-o", str(out), "--json", *BROKER])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    assert {"saved_plan": {"file": str(out), "apply": f"rabbitry apply {out}"}} in lines
