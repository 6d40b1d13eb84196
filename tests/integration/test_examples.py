"""Every spec under examples/ applies to a real broker, and a second plan has nothing to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import Broker

# The examples use every feature the version table judges.
pytestmark = pytest.mark.versions

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {"shop.yaml", "delays.yaml"}


@pytest.mark.broker
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_applies_and_converges(broker: Broker, example: Path) -> None:
    assert broker.run("validate", str(example)).exit_code == 0
    applied = broker.run("apply", str(example), "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert broker.queue_names(), "the example declared queues in the test's vhost"
    again = broker.run("plan", str(example), "--detailed-exitcode")
    assert again.exit_code == 0, again.output
