"""The planner's rules, on hand-made desired and observed topologies (no broker)."""

from __future__ import annotations

import base64
import hashlib

from rabbitry.provisioner.applier import ApplyOptions, definitions_for, refusals
from rabbitry.provisioner.display import render_plan
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import Action, managed_after, plan
from rabbitry.provisioner.state import BrokerState, QueueStats, observed_vhost
from rabbitry.topology.primitives import (
    ApplyTo,
    Binding,
    Exchange,
    ExchangeType,
    Parameter,
    Policy,
    Queue,
    QueueType,
    Topology,
    User,
    Vhost,
)
from rabbitry.topology.spec.passwords import password_matches
from tests.unit.provisioner.hand_made import BIND, ORDERS, WORK, V, owned, state


def topo(**vhost_fields: object) -> Topology:
    users = vhost_fields.pop("users", ())
    return Topology(name="shop", vhosts=(Vhost(name=V, **vhost_fields),), users=users)  # type: ignore[arg-type]


def test_empty_broker_plans_creations_in_dependency_order() -> None:
    desired = topo(exchanges=(ORDERS,), queues=(WORK,), bindings=(BIND,))
    p = plan(desired, state(Topology(name="shop")))
    assert [c.action for c in p.changes] == [Action.CREATE] * 4
    assert [c.kind for c in p.changes] == ["vhost", "exchange", "queue", "binding"]


def test_matching_broker_plans_nothing() -> None:
    desired = topo(exchanges=(ORDERS,), queues=(WORK,), bindings=(BIND,))
    p = plan(desired, state(desired, owned(desired)))
    assert not p.has_changes
    assert p.summary().startswith("No changes")


def test_numbers_compare_as_json_values() -> None:
    desired = topo(queues=(Queue(name="q", arguments={"x-message-ttl": 1000}),))
    observed = topo(queues=(Queue(name="q", arguments={"x-message-ttl": 1000.0}),))
    assert not plan(desired, state(observed, owned(desired))).has_changes


def test_unrecorded_matching_object_is_adopted() -> None:
    desired = topo(queues=(WORK,))
    p = plan(desired, state(desired))
    assert {c.action for c in p.changes} == {Action.ADOPT}


def test_argument_change_is_a_replace_with_reason_and_rebinds() -> None:
    desired = topo(exchanges=(ORDERS,), queues=(WORK,), bindings=(BIND,))
    old_work = Queue(name="work", type=QueueType.QUORUM, arguments={"x-delivery-limit": 3})
    observed = topo(exchanges=(ORDERS,), queues=(old_work,), bindings=(BIND,))
    p = plan(
        desired,
        state(
            observed,
            owned(observed),
            queue_stats={("queue", V, "work"): QueueStats(messages=12, consumers=0)},
        ),
    )
    replace = p.by_action(Action.REPLACE)
    assert [c.title for c in replace] == ["queue shop/work"]
    assert replace[0].reasons[0] == "arguments.x-delivery-limit: 3 -> 5"
    assert "migrate through work.rabbitry-migration: 12 message(s)" in replace[0].reasons[1]
    assert replace[0].messages == 12
    # the migration binds the new queue itself: no separate binding changes
    assert p.by_action(Action.CREATE) == []
    assert any("default exchange" in w for w in p.warnings)


def test_exchange_replace_declares_its_bindings_again() -> None:
    desired = topo(exchanges=(ORDERS,), queues=(WORK,), bindings=(BIND,))
    old = Exchange(name="orders", type=ExchangeType.DIRECT)
    observed = topo(exchanges=(old,), queues=(WORK,), bindings=(BIND,))
    p = plan(desired, state(observed, owned(observed)))
    assert [c.key for c in p.by_action(Action.CREATE)] == [BIND.key(V)]


def test_interrupted_migration_plans_its_resumption() -> None:
    desired = topo(queues=(WORK,))
    record = OwnershipRecord(
        "shop",
        owned(desired),
        ({"kind": "migrate-queue", "vhost": V, "queue": "work", "step": "move-back"},),
    )
    p = plan(desired, BrokerState(topology=topo(), record=record))
    (change,) = p.changes
    assert change.action is Action.REPLACE and "'move-back'" in change.reasons[0]


def test_queue_type_change_is_a_replace() -> None:
    desired = topo(queues=(Queue(name="q", type=QueueType.QUORUM),))
    observed = topo(queues=(Queue(name="q"),))
    (change,) = plan(desired, state(observed, owned(observed))).changes
    assert change.action is Action.REPLACE
    assert change.reasons[0] == 'type: "classic" -> "quorum"'
    assert change.reasons[1].startswith("migrate through q.rabbitry-migration")


def test_policy_change_is_in_place_and_drift_is_flagged() -> None:
    desired_policy = Policy(name="cap", pattern="^work$", definition={"max-length": 10})
    desired = topo(policies=(desired_policy,))
    hand_edited = desired_policy.model_copy(update={"definition": {"max-length": 5}})
    observed = topo(policies=(hand_edited,))
    (change,) = plan(desired, state(observed, owned(desired))).changes
    assert change.action is Action.UPDATE
    assert change.drift, "the broker differs from what rabbitry last applied"
    assert change.reasons == ("definition.max-length: 5 -> 10",)


def test_spec_change_is_not_drift() -> None:
    old = Policy(name="cap", pattern="^work$", definition={"max-length": 5})
    observed = topo(policies=(old,))
    desired = topo(policies=(old.model_copy(update={"definition": {"max-length": 10}}),))
    (change,) = plan(desired, state(observed, owned(observed))).changes
    assert change.action is Action.UPDATE and not change.drift


def test_object_deleted_by_hand_is_recreated_as_drift() -> None:
    desired = topo(queues=(WORK,))
    observed = topo()
    (change,) = plan(desired, state(observed, owned(desired))).changes
    assert change.action is Action.CREATE and change.drift


def test_changed_binding_is_delete_plus_create() -> None:
    observed = topo(exchanges=(ORDERS,), queues=(WORK,), bindings=(BIND,))
    new_bind = BIND.model_copy(update={"routing_key": "order.#"})
    desired = topo(exchanges=(ORDERS,), queues=(WORK,), bindings=(new_bind,))
    p = plan(desired, state(observed, owned(observed)))
    assert [(c.action, c.key) for c in p.changes] == [
        (Action.CREATE, new_bind.key(V)),
        (Action.DELETE, BIND.key(V)),
    ]


def test_binding_arguments_are_part_of_identity_in_any_key_order() -> None:
    a = Binding(source="h", destination="q", arguments={"x-match": "all", "k": 1})
    b = Binding(source="h", destination="q", arguments={"k": 1.0, "x-match": "all"})
    assert a.key(V) == b.key(V)


def test_prune_only_touches_recorded_objects() -> None:
    stranger = Queue(name="someone-elses")
    ours_gone = Queue(name="old")
    observed = topo(queues=(WORK, stranger, ours_gone))
    desired = topo(queues=(WORK,))
    managed = owned(topo(queues=(WORK, ours_gone)))
    p = plan(desired, state(observed, managed))
    assert [c.key for c in p.by_action(Action.DELETE)] == [("queue", V, "old")]


def test_vhost_with_unmanaged_objects_is_never_pruned() -> None:
    observed = topo(queues=(WORK, Queue(name="theirs")))
    managed = owned(topo(queues=(WORK,)))
    p = plan(Topology(name="shop"), state(observed, managed))
    deleted = [c.key for c in p.by_action(Action.DELETE)]
    assert ("queue", V, "work") in deleted
    assert ("vhost", V) not in deleted
    assert any("does not manage" in w for w in p.warnings)


def test_refusals_name_the_flag_to_use() -> None:
    desired = topo(queues=(Queue(name="q", type=QueueType.QUORUM),))
    observed = topo(queues=(Queue(name="q"),))
    stats = {("queue", V, "q"): QueueStats(messages=3, consumers=1)}
    p = plan(desired, state(observed, owned(observed), queue_stats=stats))
    (no_flag,) = refusals(p, ApplyOptions())
    assert "--allow-replace" in no_flag
    # Messages are migrated, not lost; consumers would be cancelled.
    (with_flag,) = refusals(p, ApplyOptions(allow_replace=True))
    assert "1 consumer(s)" in with_flag
    assert refusals(p, ApplyOptions(allow_replace=True, force=True)) == []


def test_prune_of_non_empty_queue_needs_force() -> None:
    observed = topo(queues=(Queue(name="old"),))
    stats = {("queue", V, "old"): QueueStats(messages=7, consumers=0)}
    p = plan(topo(), state(observed, owned(observed), queue_stats=stats))
    assert refusals(p, ApplyOptions()) == []  # without --prune nothing is deleted
    assert "7 message(s)" in refusals(p, ApplyOptions(prune=True))[0]
    assert refusals(p, ApplyOptions(prune=True, force=True)) == []


def test_password_checked_against_broker_hash_without_sending_it() -> None:
    salt = b"\x01\x02\x03\x04"
    stored = base64.b64encode(salt + hashlib.sha256(salt + b"right").digest()).decode()
    algo = "rabbit_password_hashing_sha256"
    assert password_matches("right", stored, algo) is True
    assert password_matches("wrong", stored, algo) is False
    desired = topo(users=(User(name="app", password="wrong"),))
    observed = topo(users=(User(name="app"),))
    p = plan(desired, state(observed, owned(observed), password_hashes={"app": (stored, algo)}))
    (change,) = p.changes
    assert change.action is Action.UPDATE and change.reasons == ("password differs",)
    assert "wrong" not in render_plan(p) and "wrong" not in str(p.to_json())


def test_secrets_in_parameter_values_are_masked_in_reasons() -> None:
    old = Parameter(component="federation-upstream", name="up", value={"uri": "amqp://u:old@a"})
    new = Parameter(component="federation-upstream", name="up", value={"uri": "amqp://u:new@b"})
    p = plan(
        topo(parameters=(new,)), state(topo(parameters=(old,)), owned(topo(parameters=(old,))))
    )
    text = render_plan(p) + str(p.to_json())
    assert "old" not in text and "new@" not in text and "***" in text


def test_managed_after_keeps_unpruned_and_drops_deleted() -> None:
    kept, pruned = Queue(name="kept"), Queue(name="pruned")
    observed = topo(queues=(WORK, kept, pruned))
    p = plan(topo(queues=(WORK,)), state(observed, owned(observed)))
    after = managed_after(p, deleted=[pruned.key(V)], still_present=[kept.key(V)])
    assert set(after) == {("vhost", V), WORK.key(V), kept.key(V)}


def test_ownership_record_round_trips() -> None:
    record = OwnershipRecord("shop", {("queue", "v", "q"): "abc", ("user", "", "u"): "def"})
    assert OwnershipRecord.from_value("shop", record.to_value()) == record


def test_observed_vhost_reads_management_answers() -> None:
    definitions = {
        "queues": [
            {
                "name": "q1",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 5},
            },
            {"name": "q2", "durable": True, "auto_delete": False, "arguments": {}},
        ],
        "exchanges": [
            {
                "name": "ex",
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {"alternate-exchange": "ae"},
            }
        ],
        "bindings": [
            {
                "source": "ex",
                "destination": "q2",
                "destination_type": "queue",
                "routing_key": "a.*",
                "arguments": {},
            }
        ],
        "policies": [
            {
                "name": "p",
                "pattern": "^q",
                "apply-to": "queues",
                "priority": 1,
                "definition": {"max-length": 10},
            }
        ],
        "parameters": [
            {
                "component": "operator_policy",
                "name": "op",
                "value": {
                    "pattern": "^q",
                    "definition": {"max-length": 100},
                    "priority": 0,
                    "apply-to": "queues",
                },
            },
            {"component": "federation-upstream", "name": "up", "value": {"uri": "amqp://h"}},
        ],
    }
    meta = {"name": V, "description": "d", "tags": ["a"], "default_queue_type": "undefined"}
    vhost = observed_vhost(V, meta, definitions)
    assert vhost.queues[0] == Queue(
        name="q1", type=QueueType.QUORUM, arguments={"x-delivery-limit": 5}
    )
    assert vhost.queues[1].type is QueueType.CLASSIC
    assert vhost.exchanges[0].arguments == {"alternate-exchange": "ae"}
    assert vhost.policies[0].apply_to is ApplyTo.QUEUES
    assert [p.name for p in vhost.operator_policies] == ["op"]
    assert [p.name for p in vhost.parameters] == ["up"]
    assert vhost.default_queue_type is None and vhost.tags == ("a",)


def test_definitions_document_carries_queue_type() -> None:
    doc = definitions_for([WORK, ORDERS, BIND])
    assert doc["queues"][0]["arguments"] == {"x-delivery-limit": 5, "x-queue-type": "quorum"}
    assert doc["exchanges"][0]["type"] == "topic"
    assert doc["bindings"][0]["routing_key"] == "order.*"


def test_intent_recorded_by_an_interrupted_apply_is_neither_drift_nor_done() -> None:
    desired = topo(queues=(WORK, Queue(name="made")))
    observed = topo(queues=(Queue(name="made"),))  # the run died after creating "made"
    pending = {key: "" for key in desired.resources()}
    p = plan(desired, state(observed, pending))
    by_key = {c.key: c for c in p.changes}
    assert by_key[WORK.key(V)].action is Action.CREATE and not by_key[WORK.key(V)].drift
    made = by_key[("queue", V, "made")]
    assert made.action is Action.ADOPT and "stopped half-way" in made.reasons[0]


def test_vhost_type_unset_and_classic_compare_equal_but_quorum_differs() -> None:
    # RabbitMQ 3.x reports no default type for a vhost made without one, 4.x reports "classic".
    desired = topo()
    on_4x = topo(default_queue_type=QueueType.CLASSIC)
    assert not plan(desired, state(on_4x, owned(desired))).has_changes
    assert not plan(on_4x, state(desired, owned(on_4x))).has_changes
    quorum = topo(default_queue_type=QueueType.QUORUM)
    changed = plan(desired, state(quorum, owned(desired)))
    assert [(c.action, c.kind) for c in changed.changes] == [(Action.UPDATE, "vhost")]


def test_settings_that_compare_equal_in_python_but_differ_on_the_wire_are_a_change() -> None:
    """1 and 1.0 are the same JSON number; true and 1 are not, though Python says they are."""
    same = Queue(name="work", arguments={"x-max-length": 10.0})
    assert not plan(
        topo(queues=(same,)), state(topo(queues=(WORK_10,)), owned(topo(queues=(WORK_10,))))
    ).changes
    flag = Queue(name="work", arguments={"x-single-active-consumer": True})
    one = Queue(name="work", arguments={"x-single-active-consumer": 1})
    p = plan(topo(queues=(flag,)), state(topo(queues=(one,)), owned(topo(queues=(one,)))))
    assert [c.action for c in p.changes] == [Action.REPLACE]
    assert "arguments.x-single-active-consumer: 1 -> true" in p.changes[0].reasons[0]


WORK_10 = Queue(name="work", arguments={"x-max-length": 10})


def test_flags_nested_in_lists_and_maps_differ_from_numbers() -> None:
    """The comparison judges values inside lists and maps as it judges top-level ones."""
    for wanted, found in (
        ({"x-a": [True, "b"]}, {"x-a": [1, "b"]}),
        ({"x-a": {"b": [{"c": False}]}}, {"x-a": {"b": [{"c": 0}]}}),
    ):
        broker = topo(queues=(Queue(name="work", arguments=found),))
        observed = state(broker, owned(broker))
        desired = topo(queues=(Queue(name="work", arguments=wanted),))
        assert [c.action for c in plan(desired, observed).changes] == [Action.REPLACE], wanted
        same = topo(queues=(Queue(name="work", arguments=found),))
        assert not plan(same, observed).changes


def test_deletion_protection_is_a_change_of_the_vhost_in_place() -> None:
    wanted = topo(protected_from_deletion=True)
    p = plan(wanted, state(topo(protected_from_deletion=False)))
    (change,) = p.by_action(Action.UPDATE)
    assert change.key == ("vhost", V)
    assert change.reasons == ("protected_from_deletion: (unset) -> true",)
    assert plan(wanted, state(wanted, owned(wanted))).changes == ()


def test_a_broker_without_deletion_protection_is_not_asked_for_it_at_every_plan() -> None:
    # before 4.0.6 the broker keeps no such setting (the version table warns of it)
    kept_none = topo(protected_from_deletion=None)
    p = plan(topo(protected_from_deletion=True), state(kept_none, owned(kept_none)))
    assert p.changes == ()


def test_a_vhost_the_broker_protects_is_never_pruned() -> None:
    guarded = topo(protected_from_deletion=True, queues=(WORK,))
    p = plan(Topology(name="shop"), state(guarded, owned(guarded)))
    assert ("vhost", V) not in [c.key for c in p.by_action(Action.DELETE)]
    assert any("protects it from deletion" in w for w in p.warnings)


def test_deletion_protection_read_from_the_broker_says_when_it_is_not_kept() -> None:
    assert observed_vhost(V, {"protected_from_deletion": True}, {}).protected_from_deletion
    assert (
        observed_vhost(V, {"protected_from_deletion": False}, {}).protected_from_deletion is False
    )
    assert observed_vhost(V, {}, {}).protected_from_deletion is None  # 4.0.5, 3.10
    # an export writes it under metadata, and only when set
    meta = {"metadata": {"protected_from_deletion": True}}
    assert observed_vhost(V, meta, {}).protected_from_deletion is True


def test_deletion_protection_a_broker_does_not_keep_is_no_drift() -> None:
    asked = topo(protected_from_deletion=True)
    kept_none = topo(protected_from_deletion=None)
    p = plan(topo(protected_from_deletion=True, description="new"), state(kept_none, owned(asked)))
    (change,) = p.by_action(Action.UPDATE)
    assert [r.split(":")[0] for r in change.reasons] == ["description"]
    assert not change.drift
