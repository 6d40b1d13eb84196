"""With ``--json`` a warning is a diagnostic too: one JSON object a line on stderr,
``{"warning": {...}}``, before the ``{"error": ...}`` that ends a failed run, so every line a
reader finds on stderr parses; without ``--json`` it is the ``warning: ...`` line it always was
(no broker: the runs below end at the management API nothing listens on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.errors import BrokerError
from rabbitry.provisioner import stack

BROKER = ["--management-url", "http://admin:pw@127.0.0.1:1", "--url", "amqp://127.0.0.1:1/"]
WARNED = (
    "version: 1\nname: s\nvhosts:\n  - name: v\n    queues:\n      - name: q\n"
    "        type: quorum\n"
    "        arguments: {x-dead-letter-strategy: at-least-once, x-overflow: reject-publish}\n"
)
"""A spec whose only problem is a warning: a dead-letter strategy with no dead-letter exchange."""


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "warned.yaml"
    path.write_text(WARNED)
    return path


def stderr_objects(stderr: str) -> list[dict[str, Any]]:
    """Each line of stderr as the JSON object it must be."""
    return [json.loads(line) for line in stderr.splitlines()]


@pytest.mark.parametrize("command", [["plan"], ["apply", "--auto-approve"], ["status"]], ids=str)
def test_a_spec_warning_is_a_json_diagnostic_on_a_line_of_its_own(
    command: list[str], spec: Path
) -> None:
    result = CliRunner().invoke(cli, [*command, str(spec), "--json", *BROKER])
    assert result.exit_code == 1  # nothing listens on the management port
    *warnings, last = stderr_objects(result.stderr)
    assert set(last) == {"error"}
    (warning,) = (w["warning"] for w in warnings)
    assert warning["severity"] == "warning"
    assert "x-dead-letter-strategy has no effect" in warning["summary"]
    assert warning["source"] == {
        "file": str(spec),
        "line": 8,
        "column": 45,
        "path": "vhosts[0].queues[0].arguments.x-dead-letter-strategy",
    }
    assert warning["address"] is None
    assert result.stdout == ""


def test_a_note_of_the_run_is_a_json_diagnostic_too(
    monkeypatch: pytest.MonkeyPatch, spec: Path
) -> None:
    def apply(spec: str, **options: Any) -> None:
        options["report"].note("the rest of the spec is left as it is")
        raise BrokerError("gone")

    monkeypatch.setattr(stack, "apply", apply)
    result = CliRunner().invoke(cli, ["apply", str(spec), "--auto-approve", "--json", *BROKER])
    assert stderr_objects(result.stderr) == [
        {
            "warning": {
                "severity": "warning",
                "summary": "the rest of the spec is left as it is",
                "detail": "",
                "address": None,
                "source": None,
            }
        },
        {
            "error": {
                "type": "BrokerError",
                "message": "gone",
                "diagnostics": [
                    {
                        "severity": "error",
                        "summary": "gone",
                        "detail": "",
                        "address": None,
                        "source": None,
                    }
                ],
            }
        },
    ]


def test_without_json_the_warning_reads_as_before(spec: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", str(spec), *BROKER])
    first, *_ = result.stderr.splitlines()
    assert first == (
        f"warning: {spec}:8:45: vhosts[0].queues[0].arguments.x-dead-letter-strategy:"
        " x-dead-letter-strategy has no effect without a dead-letter exchange: add"
        " x-dead-letter-exchange"
    )


def test_validate_json_lists_the_warning_as_a_diagnostic_beside_its_problem(spec: Path) -> None:
    result = CliRunner().invoke(cli, ["validate", str(spec), "--json"])
    assert result.exit_code == 0 and result.stderr == ""
    report = json.loads(result.stdout)
    (problem,) = report["problems"]
    (diagnostic,) = report["diagnostics"]
    assert diagnostic["severity"] == problem["severity"] == "warning"
    assert diagnostic["summary"] == problem["message"]
    assert diagnostic["source"]["line"] == problem["line"] == 8
