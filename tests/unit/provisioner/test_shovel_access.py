"""What the broker would refuse, found in the plan before the first change: a shovel whose URI
without a host connects inside the node as a user not allowed into its vhost; a binding from an
amq.* exchange the broker does not have."""

from __future__ import annotations

import pytest

from rabbitry.provisioner.broker_exchanges import missing_exchanges
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import Action, Change, Plan
from rabbitry.provisioner.shovel_access import direct_vhosts, unreachable_shovels
from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology.primitives import JSON, Binding, Parameter, Vhost


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("amqp:///orders", [("src-uri", "orders")]),
        ("amqp://", [("src-uri", "/")]),
        ("amqp:///%2F", [("src-uri", "/")]),
        ("amqp:///a%2Fb?heartbeat=5", [("src-uri", "a/b")]),
        ("amqp://remote.example/orders", []),
        ("amqp://u:p@remote.example", []),
        (["amqp:///x", "amqp://h/y"], [("src-uri", "x")]),
    ],
)
def test_a_uri_without_a_host_names_the_vhost_it_connects_to(
    uri: JSON, expected: list[tuple[str, str]]
) -> None:
    assert direct_vhosts({"src-protocol": "amqp091", "src-uri": uri}) == expected


def test_amqp_1_0_ends_are_not_direct_connections() -> None:
    value = {"src-protocol": "amqp10", "src-uri": "amqp://", "dest-uri": "amqp:///d"}
    assert direct_vhosts(value) == [("dest-uri", "d")]


def shovel_plan(*changes: Change) -> Plan:
    return Plan(stack="s", changes=changes, record=OwnershipRecord("s"))


SHOVEL = Change(
    Action.CREATE,
    ("parameter", "a", "shovel", "sh"),
    desired=Parameter(
        component="shovel",
        name="sh",
        value={"src-uri": "amqp:///a", "src-queue": "q", "dest-uri": "amqp:///b"},
    ),
)


def test_a_shovel_into_a_vhost_the_user_cannot_reach_is_named() -> None:
    (problem,) = unreachable_shovels(shovel_plan(SHOVEL), "ops", ["a"])
    assert "parameter a/shovel/sh: its dest-uri connects inside the node to vhost 'b'" in problem
    assert "user 'ops' (the one applying) may not connect" in problem


def test_a_vhost_the_plan_creates_or_a_permission_it_grants_makes_it_reachable() -> None:
    created = Change(Action.CREATE, ("vhost", "b"), desired=Vhost(name="b"))
    assert unreachable_shovels(shovel_plan(created, SHOVEL), "ops", ["a"]) == []
    granted = Change(Action.CREATE, ("permission", "b", "ops"))
    assert unreachable_shovels(shovel_plan(granted, SHOVEL), "ops", ["a"]) == []
    someone_else = Change(Action.CREATE, ("permission", "b", "app"))
    assert unreachable_shovels(shovel_plan(someone_else, SHOVEL), "ops", ["a"])


def test_vhost_limits_read_from_the_broker_are_the_vhosts_limits_not_a_parameter() -> None:
    vhost = observed_vhost(
        "v",
        {},
        {
            "parameters": [
                {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 5}}
            ]
        },
        limits={"max-queues": 5},
    )
    assert vhost.parameters == ()
    assert vhost.limits == {"max-queues": 5}


def binding_plan(source: str, vhost_created: bool) -> Plan:
    changes = [
        Change(
            Action.CREATE,
            ("binding", "v", source, "queue", "q", "", "{}"),
            desired=Binding(source=source, destination="q"),
        )
    ]
    if vhost_created:
        changes.insert(0, Change(Action.CREATE, ("vhost", "v"), desired=Vhost(name="v")))
    return shovel_plan(*changes)


def test_a_binding_from_an_amq_exchange_the_broker_lacks_is_named() -> None:
    (problem,) = missing_exchanges(binding_plan("amq.rabbitmq.log", True), lambda v, n: False)
    assert "exchange v/amq.rabbitmq.log: a binding of the plan uses it" in problem
    # whatever the default vhost has, a new vhost has only the broker's own
    assert missing_exchanges(binding_plan("amq.rabbitmq.log", True), lambda v, n: v == "/")
    assert missing_exchanges(binding_plan("amq.rabbitmq.foo", True), lambda v, n: True)
    assert missing_exchanges(binding_plan("amq.topic", True), lambda v, n: False) == []
    # in a vhost that exists, the broker says
    assert missing_exchanges(binding_plan("amq.rabbitmq.event", False), lambda v, n: True) == []
    assert missing_exchanges(binding_plan("amq.rabbitmq.event", False), lambda v, n: False)
