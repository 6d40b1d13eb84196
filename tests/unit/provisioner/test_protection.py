"""``protect: true`` and ``on_remove: retain``: what the planner and apply's refusals make of
them, with the guards of an object that left the spec coming from the ownership record."""

from __future__ import annotations

from rabbitry.provisioner.applier import ApplyOptions, refusals
from rabbitry.provisioner.display import render_plan
from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.plan_schema import PlanDocument
from rabbitry.provisioner.planner import Action, Plan, managed_after, plan
from rabbitry.provisioner.protection import PROTECT, RETAIN, guards_in_force
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import Queue, QueueType, Topology, Vhost

V = "v"
KEEP = ("queue", V, "keep")
VHOST = ("vhost", V)
EVERYTHING = ApplyOptions(allow_replace=True, prune=True, force=True)


def spec(*queues: Queue, guards: tuple[tuple[str, str, str], ...] = ()) -> Topology:
    return Topology(name="s", vhosts=(Vhost(name=V, queues=queues, guards=guards),))


def broker(*queues: Queue) -> Topology:
    return Topology(name="broker", vhosts=(Vhost(name=V, queues=queues),))


def recorded(
    observed: Topology, guards: dict[tuple[str, ...], frozenset[str]] | None = None
) -> OwnershipRecord:
    managed = {key: digest(r) for key, r in observed.resources().items()}
    return OwnershipRecord("s", managed, (), guards or {})


def plan_of(desired: Topology, observed: Topology, record: OwnershipRecord) -> Plan:
    return plan(desired, BrokerState(topology=observed, record=record))


def test_the_spec_decides_while_it_declares_the_object_and_the_record_after() -> None:
    spec_says = {KEEP: frozenset({PROTECT})}
    record_says = {KEEP: frozenset({RETAIN})}
    assert guards_in_force(KEEP, True, spec_says, record_says) == {PROTECT}
    assert guards_in_force(KEEP, True, {}, record_says) == frozenset()  # protect: false now
    assert guards_in_force(KEEP, False, spec_says, record_says) == {RETAIN}


def test_a_protected_queue_that_left_the_spec_is_refused_to_prune_with_every_flag() -> None:
    observed = broker(Queue(name="keep"))
    made = plan_of(spec(), observed, recorded(observed, {KEEP: frozenset({PROTECT})}))
    (change,) = made.by_action(Action.DELETE)
    assert change.key == KEEP and change.protected
    assert any(
        "ownership record kept from the last apply says protect" in r for r in change.reasons
    )
    problems = refusals(made, EVERYTHING)
    assert any("queue v/keep is protected (protect: true)" in p for p in problems)
    assert made.to_json()["changes"][0]["protected"] is True
    PlanDocument.model_validate(made.to_json())
    assert "protect: true" in render_plan(made)
    # its vhost, also gone from the spec, is kept: deleting it would delete the queue
    assert not any(c.key == VHOST for c in made.by_action(Action.DELETE))


def test_without_the_record_s_guard_the_same_prune_deletes_it() -> None:
    observed = broker(Queue(name="keep"))
    made = plan_of(spec(), observed, recorded(observed))
    assert not [c for c in made.changes if c.protected]
    assert refusals(made, EVERYTHING) == []


def test_a_protected_queue_in_the_spec_is_never_replaced() -> None:
    observed = broker(Queue(name="keep"))
    wanted = spec(Queue(name="keep", type=QueueType.QUORUM), guards=(("queue", "keep", PROTECT),))
    made = plan_of(wanted, observed, recorded(observed, {KEEP: frozenset({PROTECT})}))
    (change,) = made.by_action(Action.REPLACE)
    assert change.protected
    assert any("queue v/keep is protected" in p for p in refusals(made, EVERYTHING))


def test_a_retained_queue_leaves_the_record_and_is_not_deleted() -> None:
    observed = broker(Queue(name="keep"), Queue(name="other"))
    record = recorded(observed, {KEEP: frozenset({RETAIN})})
    made = plan_of(spec(Queue(name="other")), observed, record)
    (change,) = made.by_action(Action.RETAIN)
    assert change.key == KEEP
    assert not made.by_action(Action.DELETE)
    assert refusals(made, EVERYTHING) == []
    after = managed_after(made, (), record.managed)
    assert KEEP not in after and ("queue", V, "other") in after
    assert made.summary().endswith("1 to retain (left on the broker, no longer owned).")


def test_a_guard_added_to_a_matching_queue_is_recorded_by_an_adopt() -> None:
    observed = broker(Queue(name="keep"))
    wanted = spec(Queue(name="keep"), guards=(("queue", "keep", PROTECT),))
    made = plan_of(wanted, observed, recorded(observed))
    (change,) = made.changes
    assert change.action is Action.ADOPT
    assert change.reasons == ("the ownership record keeps protect: true",)
    assert made.guards == {KEEP: frozenset({PROTECT})}


def test_a_record_keeps_its_guards_in_format_3_and_without_them_stays_in_format_2() -> None:
    plain = OwnershipRecord("s", {KEEP: "x"})
    assert plain.to_value()["format_version"] == 2
    guarded = OwnershipRecord("s", {KEEP: "x"}, (), {KEEP: frozenset({PROTECT, RETAIN})})
    value = guarded.to_value()
    assert value["format_version"] == 3
    assert OwnershipRecord.from_value("s", value) == guarded
