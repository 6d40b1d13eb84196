"""Each object kind a broker holds, on a real broker: created, updated in place, drift seen,
lifted or pruned, and exported back."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import Broker

# Limits, shovels and super streams: made and exported differently across releases.
pytestmark = pytest.mark.versions

LIMITS = """
version: 1
name: "{{ vars.stack }}"
users:
  - name: "{{ vars.stack }}-app"
    password: app-pw
    limits: {max-connections: 10, max-channels: 50}
vhosts:
  - name: "{{ vars.vhost }}"
    limits: {max-connections: 100, max-queues: 200}
"""


def vhost_limits(broker: Broker) -> dict[str, int]:
    found = broker.get("/vhost-limits/{vhost}") or []
    return found[0]["value"] if found else {}


def user_limits(broker: Broker) -> dict[str, int]:
    found = broker.get(f"/user-limits/{broker.stack}-app") or []
    return found[0]["value"] if found else {}


def plan_changes(broker: Broker, body: str) -> list[dict[str, object]]:
    result = broker.run("plan", str(broker.spec(body, "plan.yaml")), "--json")
    assert result.exit_code == 0, result.output
    return list(json.loads(result.output)["changes"])


def test_vhost_and_user_limits_are_set_changed_in_place_lifted_and_exported(
    broker: Broker,
) -> None:
    broker.apply(LIMITS)
    assert vhost_limits(broker) == {"max-connections": 100, "max-queues": 200}
    assert user_limits(broker) == {"max-connections": 10, "max-channels": 50}
    assert plan_changes(broker, LIMITS) == []

    changed = LIMITS.replace("max-queues: 200", "max-queues: 300").replace(
        "{max-connections: 10, max-channels: 50}", "{max-channels: 5}"
    )
    (user, vhost) = sorted(plan_changes(broker, changed), key=lambda c: str(c["kind"]))
    assert (user["kind"], user["action"]) == ("user", "update")
    assert "limits.max-connections: 10 -> (unset)" in user["reasons"]  # type: ignore[operator]
    assert vhost["reasons"] == ["limits.max-queues: 200 -> 300"]
    broker.apply(changed)
    assert vhost_limits(broker) == {"max-connections": 100, "max-queues": 300}
    assert user_limits(broker) == {"max-channels": 5}

    # drift: a limit set by hand shows in the plan, and apply puts it back
    broker.http.put(
        f"/vhost-limits/{broker.vhost}/max-queues", json={"value": 1}
    ).raise_for_status()
    (drifted,) = plan_changes(broker, changed)
    assert drifted["drift"] is True and drifted["reasons"] == ["limits.max-queues: 1 -> 300"]

    exported = broker.run("export", "--vhost", broker.vhost, "--users")
    assert exported.exit_code == 0, exported.output
    assert "limits:" in exported.output and "max-queues: 1" in exported.output

    lifted = LIMITS.replace("    limits: {max-connections: 100, max-queues: 200}\n", "")
    broker.apply(lifted)
    assert vhost_limits(broker) == {}


SHOVEL = """
version: 1
name: "{{ vars.stack }}"
vhosts:
  - name: "{{ vars.vhost }}"
    queues:
      - {name: outbox}
      - {name: inbox}
    shovels:
      - name: move
        source: {uri: "amqp:///{{ vars.vhost }}", queue: outbox}
        destination: {uri: "amqp:///{{ vars.vhost }}", queue: inbox}
        prefetch: 100
"""


def test_a_shovel_moves_messages_shows_its_state_and_changes_in_place(broker: Broker) -> None:
    broker.apply(SHOVEL)
    status = broker.run("status", str(broker.spec(SHOVEL, "status.yaml")), "--json")
    assert status.exit_code == 0, status.output
    (state,) = json.loads(status.output)["shovels"]
    assert (state["name"], state["declared"]) == ("move", True)
    assert state["status"] in ("running", "starting")
    broker.publish("outbox", 20)
    deadline = time.monotonic() + 30
    while broker.count("inbox") < 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert broker.count("inbox") == 20 and broker.count("outbox") == 0
    text = broker.run("status", str(broker.spec(SHOVEL, "status.yaml"))).output
    assert f"running    shovel {broker.vhost}/move" in text

    faster = SHOVEL.replace("prefetch: 100", "prefetch: 500")
    (change,) = plan_changes(broker, faster)
    assert (change["action"], change["kind"]) == ("update", "parameter")
    assert change["reasons"] == ["value.src-prefetch-count: 100 -> 500"]
    broker.apply(faster)
    value = broker.get(f"/parameters/shovel/{broker.vhost}/move")["value"]
    assert value["src-prefetch-count"] == 500

    gone = SHOVEL.split("    shovels:")[0]
    pruned = broker.run("apply", str(broker.spec(gone)), "--auto-approve", "--prune")
    assert pruned.exit_code == 0, pruned.output
    assert broker.get(f"/parameters/shovel/{broker.vhost}/move") is None
    stopped = broker.run("status", str(broker.spec(SHOVEL, "status.yaml")), "--json")
    assert stopped.exit_code == 3
    assert json.loads(stopped.output)["shovels"][0]["status"] == "missing"


SUPER = """
version: 1
name: "{{ vars.stack }}"
vhosts:
  - name: "{{ vars.vhost }}"
    super_streams:
      - name: events
        partitions: 3
        arguments: {x-max-age: 1D}
"""


def test_a_super_stream_is_made_as_add_super_stream_makes_it_and_exports_as_one(
    broker: Broker,
) -> None:
    broker.apply(SUPER)
    exchange = broker.get("/exchanges/{vhost}/events")
    assert (exchange["type"], exchange["arguments"]) == ("direct", {"x-super-stream": True})
    for i in range(3):
        stream = broker.get(f"/queues/{{vhost}}/events-{i}")
        assert stream["type"] == "stream" and stream["arguments"]["x-max-age"] == "1D"
    bound = broker.get("/exchanges/{vhost}/events/bindings/source")
    assert sorted((b["destination"], b["routing_key"], b["arguments"]) for b in bound) == [
        (f"events-{i}", str(i), {"x-stream-partition-order": i}) for i in range(3)
    ]
    assert plan_changes(broker, SUPER) == []

    exported = broker.run("export", "--vhost", broker.vhost)
    assert exported.exit_code == 0, exported.output
    assert "super_streams:" in exported.stdout and "partitions: 3" in exported.stdout
    assert "x-super-stream" not in exported.stdout and "events-0" not in exported.stdout
