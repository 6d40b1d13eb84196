"""Stacks on one broker: another stack's objects are marked in the plan and refused by apply
unless taken over; the records of every stack come from one read (no broker here)."""

from __future__ import annotations

import json

import pytest

from rabbitry.errors import BrokerError
from rabbitry.provisioner.applier import ApplyOptions, refusals, taken_over
from rabbitry.provisioner.display import render_plan
from rabbitry.provisioner.ownership import (
    PENDING,
    RECORD_PREFIX,
    OwnershipRecord,
    digest,
    owners_by_key,
    records_from,
    stacks_on,
)
from rabbitry.provisioner.plan_schema import PlanDocument
from rabbitry.provisioner.planfile import BrokerIdentity, SavedPlan
from rabbitry.provisioner.planner import Action, Plan, plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import Queue, ResourceKey, Topology, User, Vhost

V = "shared"
SHARED_Q = ResourceKey.of("queue", V, "qshared")
VHOST = ResourceKey.of("vhost", V)


def topology(stack: str, *queues: str) -> Topology:
    vhost = Vhost(name=V, queues=tuple(Queue(name=q) for q in queues))
    return Topology(name=stack, vhosts=(vhost,))


def record(stack: str, *keys: ResourceKey) -> OwnershipRecord:
    return OwnershipRecord(stack, dict.fromkeys(keys, "0123456789abcdef"))


def records(**by_stack: OwnershipRecord) -> dict[str, OwnershipRecord]:
    return dict(by_stack)


def state_of(observed: Topology, own: OwnershipRecord, *others: OwnershipRecord) -> BrokerState:
    every = {r.stack: r for r in (own, *others)}
    return BrokerState(
        topology=observed, record=own, other_owners=owners_by_key(every, but=own.stack)
    )


def b_plan(b_wants: Topology, a_owns: OwnershipRecord, b_owns: OwnershipRecord) -> Plan:
    observed = topology("broker", "qshared", "qb")
    return plan(b_wants, state_of(observed, b_owns, a_owns))


A_RECORD = record("A", VHOST, SHARED_Q)


def test_adopting_another_stacks_queue_is_marked_with_its_owner() -> None:
    p = b_plan(topology("B", "qshared"), A_RECORD, record("B"))
    (change,) = [c for c in p.changes if c.key == SHARED_Q]
    assert change.action is Action.ADOPT and change.owners == ("A",)
    assert "1 owned by another stack" in p.summary()
    assert any("--take-over A" in w for w in p.warnings)


def test_a_vhost_both_stacks_declare_is_shared_not_contested() -> None:
    p = b_plan(topology("B", "qb"), A_RECORD, record("B"))
    assert all(not c.owners for c in p.changes)
    assert any(c.key == VHOST and c.action is Action.ADOPT for c in p.changes)


def test_pruning_an_object_another_stack_also_owns_is_marked() -> None:
    # B adopted A's queue before rabbitry refused that; now B's spec leaves it out
    p = b_plan(topology("B"), A_RECORD, record("B", VHOST, SHARED_Q))
    (change,) = [c for c in p.changes if c.key == SHARED_Q]
    assert change.action is Action.DELETE and change.owners == ("A",)


def test_apply_refuses_another_stacks_object_and_says_how_to_take_it_over() -> None:
    p = b_plan(topology("B", "qshared"), A_RECORD, record("B"))
    (problem,) = refusals(p, ApplyOptions())
    assert "stack 'A'" in problem and "--take-over A" in problem and "adopt it" in problem
    assert refusals(p, ApplyOptions(take_over=frozenset({"A"}))) == []
    assert taken_over(p, ApplyOptions(take_over=frozenset({"A"}))) == {"A": {SHARED_Q}}
    # naming another stack takes nothing and allows nothing
    assert len(refusals(p, ApplyOptions(take_over=frozenset({"C"})))) == 1
    assert taken_over(p, ApplyOptions(take_over=frozenset({"C"}))) == {}


def test_a_deletion_left_for_prune_is_refused_only_when_prune_would_run_it() -> None:
    p = b_plan(topology("B"), A_RECORD, record("B", VHOST, SHARED_Q))
    assert refusals(p, ApplyOptions()) == []
    (problem,) = refusals(p, ApplyOptions(prune=True))
    assert "delete it" in problem
    assert taken_over(p, ApplyOptions()) == {}


def test_plan_json_and_text_name_the_owner() -> None:
    p = b_plan(topology("B", "qshared"), A_RECORD, record("B"))
    as_json = p.to_json()
    PlanDocument.model_validate(as_json)
    (marked,) = [c for c in as_json["changes"] if c.get("owners")]
    assert marked["owners"] == ["A"] and marked["key"] == list(SHARED_Q)
    text = render_plan(p)
    assert "qshared  (owned by stack 'A': refused without --take-over)" in text


def test_a_saved_plan_keeps_the_owner_and_is_stale_when_ownership_moves() -> None:
    p = b_plan(topology("B", "qshared"), A_RECORD, record("B"))
    broker = BrokerIdentity("rabbitmq-cluster-id-x", "cluster", ("http://broker",))
    saved = SavedPlan.of(p, broker, "http://broker")
    again = SavedPlan.from_json(json.loads(saved.to_text()), "plan.json")
    assert [c.owners for c in again.plan.changes] == [c.owners for c in p.changes]
    observed = topology("broker", "qshared", "qb")
    assert again.stale(state_of(observed, record("B"), A_RECORD), broker) == []
    # stack A let go of the queue since: the reviewed plan no longer says what apply would do
    moved = again.stale(state_of(observed, record("B"), record("A", VHOST)), broker)
    assert moved == [
        "queue shared/qshared changed hands since the plan was made (now owned by no other stack)"
    ]


def test_records_come_from_the_global_parameters_and_skip_other_parameters() -> None:
    a = record("A", VHOST, SHARED_Q)
    answer = [
        {"name": RECORD_PREFIX + "A", "value": a.to_value()},
        {"name": "rabbitry.lock.A", "value": {"holder": "x"}},
        {"name": "cluster_name", "value": "rabbit@node"},
    ]
    found = records_from(answer)
    assert list(found) == ["A"] and found["A"].managed == a.managed


def test_stacks_are_listed_per_vhost_with_counts_and_contested_objects() -> None:
    user = ResourceKey.of("user", "", "app")
    every = records(
        A=record("A", VHOST, SHARED_Q, ResourceKey.of("queue", V, "qa"), user),
        B=OwnershipRecord(
            "B", {VHOST: "x", SHARED_Q: "x", ResourceKey.of("queue", "other", "q"): ""}
        ),
    )
    listed = stacks_on(every).to_json()
    assert listed["format_version"] == 1
    a, b = listed["stacks"]
    assert a["stack"] == "A" and a["objects"] == 4
    assert a["vhosts"] == [
        {"vhost": None, "counts": {"user": 1}},
        {"vhost": V, "counts": {"queue": 2, "vhost": 1}},
    ]
    assert b["pending"] == 1
    assert listed["contested"] == [
        {"key": list(SHARED_Q), "title": "queue shared/qshared", "stacks": ["A", "B"]}
    ]
    # only one vhost: B's objects elsewhere are not counted, and a stack with none there goes
    only_other = stacks_on(every, ["other"]).to_json()
    assert [s["stack"] for s in only_other["stacks"]] == ["B"]
    assert only_other["stacks"][0]["vhosts"] == [{"vhost": "other", "counts": {"queue": 1}}]


def test_owners_are_found_in_one_pass_over_every_record() -> None:
    user = User(name="app")
    every = records(
        A=record("A", user.key("")),
        B=record("B", user.key(""), SHARED_Q),
        C=OwnershipRecord("C", {SHARED_Q: digest(Queue(name="qshared"))}),
    )
    assert owners_by_key(every, but="C") == {user.key(""): ("A", "B"), SHARED_Q: ("B",)}


def test_a_record_no_rabbitry_can_read_stops_the_plan_naming_it() -> None:
    with pytest.raises(BrokerError) as info:
        records_from([{"name": RECORD_PREFIX + "other", "value": {"format_version": 9}}])
    message = str(info.value)
    assert "'rabbitry.stack.other' is not a rabbitry record of a format" in message
    assert "reads (1, 2, 3)" in message
    assert "upgrade rabbitry" in message and "remove that parameter" in message


def test_a_record_written_in_format_1_is_still_read() -> None:
    old = {
        "format_version": 1,
        "stack": "A",
        "managed": [["abc", *SHARED_Q], ["", "vhost", "", "v"]],
        "operations": [{"vhost": "v", "queue": "q"}],
    }
    got = OwnershipRecord.from_value("A", old)
    assert got.managed == {SHARED_Q: "abc", ("vhost", "", "v"): ""}
    assert got.operations == ({"vhost": "v", "queue": "q"},)
    assert OwnershipRecord.from_value("A", got.to_value()) == got  # written again in format 2


def test_a_large_record_is_stored_compact_and_reads_back_the_same() -> None:
    managed = {("queue", "v", f"orders.{i}\t\n\u00e9"): f"{i:016x}" for i in range(20_000)}
    managed[("exchange", "v", "tab\tname")] = PENDING
    record = OwnershipRecord("big", managed)
    value = record.to_value()
    plain = json.dumps(sorted([d, *k] for k, d in managed.items()))
    assert isinstance(value["managed"], str)
    assert len(json.dumps(value)) < len(plain) / 2  # what the broker stores and serves
    assert OwnershipRecord.from_value("big", json.loads(json.dumps(value))) == record


def test_a_record_whose_list_was_damaged_stops_the_plan_naming_it() -> None:
    value = OwnershipRecord("A", {SHARED_Q: "abc"}).to_value()
    value["managed"] = value["managed"][:-8] + "!!!!!!!!"
    with pytest.raises(BrokerError) as info:
        records_from([{"name": RECORD_PREFIX + "A", "value": value}])
    assert "'rabbitry.stack.A' lists its objects in a form rabbitry cannot read" in str(info.value)


@pytest.mark.parametrize("entry", [[], ["abc"]])
def test_a_record_entry_that_names_no_object_stops_the_plan_naming_the_record(
    entry: list[str],
) -> None:
    with pytest.raises(BrokerError) as info:
        OwnershipRecord.from_value("A", {"format_version": 1, "managed": [entry]})
    assert "'rabbitry.stack.A' lists an entry that names no object" in str(info.value)
