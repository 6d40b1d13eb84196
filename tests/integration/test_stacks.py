"""Two stacks in one vhost on a real broker: neither takes the other's objects unless told to,
and ``rabbitry stacks`` lists both."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

import rabbitry
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.lock import StackLock
from rabbitry.provisioner.ownership import OwnershipRecord, record_name
from rabbitry.provisioner.plan_schema import PlanDocument
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

STACK_A = one_vhost_spec("""
        queues:
          - {name: qshared}
          - {name: qa}
""")
# the same vhost, another stack name
STACK_B = one_vhost_spec("""
        queues:
          - {name: qshared}
          - {name: qb}
""").replace('name: "{{ vars.stack }}"', 'name: "{{ vars.stack }}-b"')


def managed_names(broker: Broker, stack: str) -> set[str]:
    found = broker.get(f"/global-parameters/{quote(record_name(stack), safe='')}")
    record = OwnershipRecord.from_value(stack, found["value"])
    return {key[-1] for key in record.managed if key[0] == "queue"}


def stacks_json(broker: Broker) -> dict[str, dict[str, object]]:
    listed = broker.run(
        "stacks", "--vhost", broker.vhost, "--json", "--management-url", broker.management_url
    )
    assert listed.exit_code == 0, listed.output
    out = json.loads(listed.output)
    assert out["format_version"] == 1
    return {s["stack"]: s for s in out["stacks"]}


def test_a_stack_cannot_take_anothers_queue_unless_it_takes_it_over(broker: Broker) -> None:
    a, b = broker.stack, f"{broker.stack}-b"
    broker.apply(STACK_A, "a.yaml")
    spec_b = str(broker.spec(STACK_B, "b.yaml"))
    try:
        # B's plan marks A's queue, in text and in JSON
        text = broker.run("plan", spec_b)
        assert text.exit_code == 0, text.output
        assert f"= queue {broker.vhost}/qshared  (owned by stack {a!r}" in text.output
        assert f"--take-over {a}" in text.output
        as_json = json.loads(broker.run("plan", spec_b, "--json").output)
        PlanDocument.model_validate(as_json)
        marked = {c["title"]: c.get("owners") for c in as_json["changes"]}
        assert marked[f"queue {broker.vhost}/qshared"] == [a]
        assert marked[f"queue {broker.vhost}/qb"] is None

        # B's apply refuses, changing nothing: qb is not made, no record is written for B
        refused = broker.run("apply", spec_b, "--auto-approve")
        assert refused.exit_code == 1, refused.output
        assert "nothing was applied" in refused.output
        assert f"--take-over {a}" in refused.output
        assert broker.queue_names() == {"qshared", "qa"}
        assert set(stacks_json(broker)) == {a}

        # while an apply of A runs, taking its objects over waits for it (here: refuses)
        with ManagementClient(broker.management_url) as client:
            held = StackLock(client, a, settle=0.05)
            with held.held():
                busy = broker.run("apply", spec_b, "--auto-approve", "--take-over", a)
                assert busy.exit_code == 1, busy.output
                assert f"stack {a!r} is being applied by {held.holder}" in busy.output
        assert broker.queue_names() == {"qshared", "qa"}

        # with --take-over, ownership moves from A to B
        taken = broker.run("apply", spec_b, "--auto-approve", "--take-over", a)
        assert taken.exit_code == 0, taken.output
        assert broker.queue_names() == {"qshared", "qa", "qb"}
        assert managed_names(broker, a) == {"qa"}
        assert managed_names(broker, b) == {"qshared", "qb"}

        # now A's plan marks the queue as B's
        back = broker.run("plan", str(broker.spec(STACK_A, "a.yaml")))
        assert f"queue {broker.vhost}/qshared  (owned by stack {b!r}" in back.output

        # rabbitry stacks lists both, with what each owns in the vhost; so does the library
        listed = stacks_json(broker)
        assert set(listed) == {a, b}
        from_python = rabbitry.stacks(management_url=broker.management_url, vhosts=[broker.vhost])
        assert [s.to_json() for s in from_python.stacks] == [listed[a], listed[b]]
        counts = {
            name: {v["vhost"]: v["counts"] for v in s["vhosts"]}  # type: ignore[attr-defined]
            for name, s in listed.items()
        }
        assert counts[a] == {broker.vhost: {"queue": 1, "vhost": 1}}
        assert counts[b] == {broker.vhost: {"queue": 2, "vhost": 1}}
        human = broker.run(
            "stacks", "--vhost", broker.vhost, "--management-url", broker.management_url
        )
        assert human.exit_code == 0, human.output
        assert f"stack {a}: 2 object(s)" in human.output
        assert f"  vhost {broker.vhost}: 2 queues, 1 vhost" in human.output
        assert "owned by stacks" not in human.output  # nothing is owned twice

        # A record written before rabbitry refused: both stacks list qshared. B's spec drops
        # it, and B's prune would delete it from under A: marked, and refused.
        a_record = OwnershipRecord.from_value(
            a, broker.get(f"/global-parameters/{quote(record_name(a), safe='')}")["value"]
        )
        b_record = OwnershipRecord.from_value(
            b, broker.get(f"/global-parameters/{quote(record_name(b), safe='')}")["value"]
        )
        both = {
            **a_record.managed,
            **{k: d for k, d in b_record.managed.items() if k[-1] == "qshared"},
        }
        broker.http.put(
            f"/global-parameters/{quote(record_name(a), safe='')}",
            json={"name": record_name(a), "value": a_record.replace_managed(both).to_value()},
        ).raise_for_status()
        contested = json.loads(
            broker.run(
                "stacks",
                "--json",
                "--vhost",
                broker.vhost,
                "--management-url",
                broker.management_url,
            ).output
        )["contested"]
        assert contested == [
            {
                "key": ["queue", broker.vhost, "qshared"],
                "title": f"queue {broker.vhost}/qshared",
                "stacks": sorted([a, b]),
            }
        ]
        only_qb = str(broker.spec(STACK_B.replace("- {name: qshared}\n", ""), "b.yaml"))
        dropped = broker.run("plan", only_qb)
        (line,) = [x for x in dropped.output.splitlines() if "/qshared  (" in x]
        assert line.startswith(f"  - queue {broker.vhost}/qshared") and f"stack {a!r}" in line
        pruned = broker.run("apply", only_qb, "--auto-approve", "--prune")
        assert pruned.exit_code == 1 and "would delete it" in pruned.output, pruned.output
        assert "qshared" in broker.queue_names()
    finally:
        for stack in (a, b):
            broker.http.delete(f"/global-parameters/{quote(record_name(stack), safe='')}")
