"""``rabbitry apply --json`` of a refused plan prints its refusals as a list of diagnostics on
stderr, one per refusal, beside the message it always printed (no broker: ``rabbitry.apply``
raises what the refusal rule refuses)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.provisioner import stack
from rabbitry.provisioner.apply_options import ApplyOptions
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.plans import Action, Change, Plan
from rabbitry.provisioner.refusals import refuse

SPEC = str(Path(__file__).parents[2] / "examples" / "shop.yaml")
BROKER = ["--management-url", "http://admin:pw@127.0.0.1:1", "--url", "amqp://127.0.0.1:1/"]
REFUSED = Plan(
    stack="shop",
    changes=(
        Change(Action.DELETE, ("queue", "shop", "keep"), protected=True),
        Change(Action.REPLACE, ("queue", "shop", "orders"), reasons=("type differs",)),
        Change(Action.UPDATE, ("exchange", "shop", "events"), owners=("billing",)),
    ),
    record=OwnershipRecord("shop"),
)


def test_apply_json_lists_one_diagnostic_per_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    def apply(spec: str, **options: Any) -> None:
        refuse(REFUSED, ApplyOptions(prune=options["prune"]))

    monkeypatch.setattr(stack, "apply", apply)
    result = CliRunner().invoke(
        cli, ["apply", SPEC, "--auto-approve", "--prune", "--json", *BROKER]
    )
    assert result.exit_code == 1
    error = json.loads(result.stderr)["error"]
    assert error["type"] == "PlanError"
    assert error["message"].startswith("nothing was applied:\n  ")
    diagnostics = error["diagnostics"]
    assert len(diagnostics) == 3 == len(error["message"].splitlines()) - 1
    assert [(d["address"]["kind"], d["address"]["name"]) for d in diagnostics] == [
        ("queue", "keep"),
        ("exchange", "events"),
        ("queue", "orders"),
    ]
    assert {d["severity"] for d in diagnostics} == {"error"}
    assert ["  " + d["detail"] for d in diagnostics] == error["message"].splitlines()[1:]


def test_without_json_the_refusal_reads_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack, "apply", lambda spec, **o: refuse(REFUSED, ApplyOptions(prune=True)))
    result = CliRunner().invoke(cli, ["apply", SPEC, "--auto-approve", *BROKER])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: nothing was applied:\n  queue shop/keep is protected")


def test_a_spec_error_keeps_its_problems_and_lists_them_as_diagnostics(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("version: 1\nname: s\nvhosts:\n  - name: v\n    queues: [{name: q, typo: 1}]\n")
    result = CliRunner().invoke(cli, ["plan", str(spec), "--json", *BROKER])
    assert result.exit_code == 1
    error = json.loads(result.stderr)["error"]
    assert error["type"] == "SpecError"
    (problem,) = error["problems"]
    (diagnostic,) = error["diagnostics"]
    assert diagnostic["summary"] == problem["message"] and diagnostic["address"] is None
    where = {k: problem[k] for k in ("file", "line", "column", "path")}
    assert diagnostic["source"] == where and where["line"] == 5


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (["plan", SPEC, "--json", *BROKER], "BrokerError"),
        (["plan", "--json", "--no-such"], "UsageError"),
    ],
)
def test_any_other_error_is_one_diagnostic_of_its_message(args: list[str], kind: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    error = json.loads(result.stderr)["error"]
    assert error["type"] == kind
    assert error["diagnostics"] == [
        {
            "severity": "error",
            "summary": error["message"],
            "detail": "",
            "address": None,
            "source": None,
        }
    ]
