"""A refused apply on a real broker: ``--json`` puts each refusal on stderr as a diagnostic
addressed to its queue, and nothing is changed."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_protection import GUARDED

pytestmark = pytest.mark.broker

# what GUARDED declares but archive (retained, so never pruned) leaves the spec
AFTER = one_vhost_spec("        queues: [{name: archive, on_remove: retain}]\n")


def test_apply_json_lists_a_diagnostic_per_refusal_with_its_queue(broker: Broker) -> None:
    broker.apply(GUARDED)
    broker.publish("plain", 2)
    spec = str(broker.spec(AFTER, "after.yaml"))

    refused = broker.run("apply", spec, "--auto-approve", "--prune", "--json")
    assert refused.exit_code == 1, refused.output
    error = json.loads(refused.stderr)["error"]
    assert error["type"] == "PlanError"
    lines = error["message"].splitlines()
    assert lines[0] == "nothing was applied:"
    found = {
        (d["address"]["kind"], d["address"]["vhost"], d["address"]["name"]): d
        for d in error["diagnostics"]
    }
    assert set(found) == {("queue", broker.vhost, "ledger"), ("queue", broker.vhost, "plain")}
    assert found["queue", broker.vhost, "ledger"]["summary"] == "protected (protect: true)"
    plain = found["queue", broker.vhost, "plain"]
    assert plain["summary"] == "a prune of a queue that holds messages"
    assert "holds 2 message(s)" in plain["detail"]
    assert sorted("  " + d["detail"] for d in error["diagnostics"]) == sorted(lines[1:])
    assert {"ledger", "plain", "archive"} <= broker.queue_names()
    assert broker.count("plain") == 2


def test_plan_json_addresses_what_the_broker_s_version_refuses(broker: Broker) -> None:
    if broker.version < (4, 0):
        pytest.skip("ha-mode is refused from RabbitMQ 4.0 on")
    mirrored = one_vhost_spec(
        '        policies: [{name: mirrored, pattern: "^q$", definition: {ha-mode: all}}]\n'
    )
    refused = broker.run("plan", str(broker.spec(mirrored, "mirrored.yaml")), "--json")
    assert refused.exit_code == 1, refused.output
    *warnings, last = (json.loads(line) for line in refused.stderr.splitlines())
    # the spec's warning (ha-mode is deprecated) comes first, a JSON object of its own
    assert warnings and {w["warning"]["severity"] for w in warnings} == {"warning"}, warnings
    error = last["error"]
    assert error["type"] == "CapabilityError"
    (diagnostic,) = error["diagnostics"]
    assert diagnostic["address"] == {"kind": "policy", "vhost": broker.vhost, "name": "mirrored"}
    assert "refuse policy key ha-mode" in diagnostic["detail"]
    assert error["message"].endswith("\n  " + diagnostic["detail"])
