"""``protect: true`` and ``on_remove: retain`` on a real broker: what they guard still holds
once the object's lines are gone from the spec, because the stack's ownership record keeps them."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Broker, one_vhost_spec
from tests.integration.test_stacks import managed_names

pytestmark = pytest.mark.broker

GUARDED = one_vhost_spec("""
        queues:
          - {name: ledger, protect: true}
          - {name: archive, on_remove: retain}
          - {name: plain}
""")
WITHOUT_THEM = one_vhost_spec("""
        queues:
          - {name: plain}
""")


def test_a_protected_queue_survives_prune_force_after_leaving_the_spec(broker: Broker) -> None:
    broker.apply(GUARDED)
    broker.publish("ledger", 2)
    spec = str(broker.spec(WITHOUT_THEM, "later.yaml"))

    shown = broker.run("plan", spec, "--json")
    changes = {c["title"]: c for c in json.loads(shown.output)["changes"]}
    ledger = changes[f"queue {broker.vhost}/ledger"]
    assert ledger["action"] == "delete" and ledger["protected"] is True
    assert any(
        "ownership record kept from the last apply says protect: true" in r
        for r in ledger["reasons"]
    )
    text = broker.run("plan", spec)
    assert (
        "protected (the ownership record kept from the last apply says protect: true)"
        in text.output
    )

    refused = broker.run("apply", spec, "--auto-approve", "--prune", "--force", "--allow-replace")
    assert refused.exit_code == 1, refused.output
    assert "nothing was applied" in refused.output
    assert f"queue {broker.vhost}/ledger is protected (protect: true)" in refused.output
    assert {"ledger", "archive", "plain"} <= broker.queue_names()
    assert broker.count("ledger") == 2
    assert "ledger" in managed_names(broker, broker.stack)


def test_a_retained_queue_stays_with_its_messages_and_leaves_the_record(broker: Broker) -> None:
    broker.apply(GUARDED)
    broker.publish("archive", 3)
    # ledger stays in the spec here: only archive leaves it
    later = WITHOUT_THEM + "          - {name: ledger, protect: true}\n"

    shown = json.loads(broker.run("plan", str(broker.spec(later, "later.yaml")), "--json").output)
    archive = {c["title"]: c for c in shown["changes"]}[f"queue {broker.vhost}/archive"]
    assert archive["action"] == "retain"

    done = broker.run("apply", str(broker.spec(later, "later.yaml")), "--auto-approve", "--prune")
    assert done.exit_code == 0, done.output
    assert "retained queue" in done.output
    assert "archive" in broker.queue_names()
    assert broker.count("archive") == 3
    assert managed_names(broker, broker.stack) == {"ledger", "plain"}
    # and no later prune of the stack touches it
    again = broker.run("apply", str(broker.spec(later, "later.yaml")), "--auto-approve", "--prune")
    assert again.exit_code == 0, again.output
    assert broker.count("archive") == 3


def test_protection_dropped_in_the_spec_is_recorded_and_then_prune_deletes(broker: Broker) -> None:
    broker.apply(GUARDED)
    unprotected = GUARDED.replace("{name: ledger, protect: true}", "{name: ledger}")
    shown = broker.run("plan", str(broker.spec(unprotected, "u.yaml")))
    assert "the ownership record no longer keeps protect: true" in shown.output
    broker.apply(unprotected, "u.yaml")
    gone = broker.run(
        "apply", str(broker.spec(WITHOUT_THEM, "w.yaml")), "--auto-approve", "--prune"
    )
    assert gone.exit_code == 0, gone.output
    assert "ledger" not in broker.queue_names()
