"""What the broker makes for its own plugins is told apart from what users declare, from the
management API's answers as RabbitMQ 4.0.5 gives them with MQTT and STOMP clients connected."""

from __future__ import annotations

import pytest

from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology.plugin_objects import plugin_exchange, plugin_queue

from .conftest import check, vhost_spec

# recorded from a 4.0.5 broker: a persistent MQTT 3.1.1 session subscribed at QoS 1 and 0,
# an MQTT 5 client with a delayed will, a durable and a plain STOMP /topic/ subscription,
# a STOMP /queue/ destination, and the user's own queue bound from amq.topic
QUEUES = [
    {"name": "mqtt-subscription-c1qos1", "type": "classic", "arguments": {"x-expires": 86400000}},
    {"name": "mqtt-subscription-c0qos0", "type": "classic", "arguments": {"x-expires": 86400000}},
    {
        "name": "mqtt-will-w5",
        "type": "classic",
        "arguments": {
            "x-dead-letter-exchange": "amq.topic",
            "x-dead-letter-routing-key": "last.will",
            "x-expires": 3600000,
        },
    },
    {
        "name": "stomp-subscription-0c7__NARwmdMMFi_On6y8w",
        "type": "classic",
        "arguments": {"x-queue-type": "classic"},
    },
    {
        "name": "stomp-subscription-IunOkPB0OtdkyhmTUlcwKg",
        "type": "classic",
        "auto_delete": True,
        "durable": False,
        "arguments": {"x-queue-type": "classic"},
    },
    {"name": "stompq", "type": "classic", "arguments": {"x-queue-type": "classic"}},
    {"name": "readings", "type": "classic", "arguments": {}},
]
BINDINGS = [
    {"source": "amq.topic", "destination": "mqtt-subscription-c1qos1", "routing_key": "a.*.t"},
    {"source": "amq.topic", "destination": "mqtt-subscription-c0qos0", "routing_key": "a.*.t"},
    {
        "source": "amq.topic",
        "destination": "stomp-subscription-0c7__NARwmdMMFi_On6y8w",
        "routing_key": "news.*",
    },
    {"source": "amq.topic", "destination": "readings", "routing_key": "sensors.#"},
]


@pytest.mark.parametrize(
    ("name", "arguments", "queue_type", "why"),
    [
        ("mqtt-subscription-c1qos1", {"x-expires": 86400000}, "classic", "MQTT client's subs"),
        ("mqtt-subscription-kqos0", {}, "rabbit_mqtt_qos0_queue", "QoS 0 subscriptions"),
        ("mqtt-will-w5", {"x-dead-letter-exchange": "amq.topic"}, "classic", "delayed will"),
        ("stomp-subscription-0c7__NA", {}, "classic", "STOMP plugin"),
        ("federation: up -> rabbit@b", {"x-internal-purpose": "federation"}, "classic", "fede"),
        ("sharding: images - rabbit@a - 0", {}, "classic", "sharding plugin"),
        # an MQTT 3.12+ QoS 0 queue is known by its type, whatever its name
        ("anything", {}, "rabbit_mqtt_qos0_queue", "QoS 0"),
        ("amq.gen-x", {}, "classic", "named by the broker (amq.*)"),
    ],
)
def test_each_plugin_queue_is_named_with_why(
    name: str, arguments: dict[str, object], queue_type: str, why: str
) -> None:
    found = plugin_queue(name, arguments, queue_type)
    assert found is not None and why in found


@pytest.mark.parametrize(
    "name",
    ["stompq", "readings", "mqtt", "subscription-mqtt-x", "my-mqtt-subscription-1", "amqgen-x"],
)
def test_queues_users_name_are_theirs(name: str) -> None:
    assert plugin_queue(name, {"x-expires": 1000}, "classic") is None
    assert plugin_queue(name, {}, "quorum") is None


def test_only_the_federation_marker_makes_an_exchange_a_plugin_s() -> None:
    assert plugin_exchange({"x-internal-purpose": "federation"}) == (
        "internal to the federation plugin"
    )
    assert plugin_exchange({"alternate-exchange": "ae"}) is None


def test_the_broker_answer_leaves_mqtt_and_stomp_internals_and_their_bindings_out() -> None:
    left: list[str] = []
    vhost = observed_vhost(
        "iot", {}, {"queues": list(QUEUES), "bindings": list(BINDINGS)}, left_out=left
    )
    assert sorted(q.name for q in vhost.queues) == ["readings", "stompq"]
    assert [(b.source, b.destination) for b in vhost.bindings] == [("amq.topic", "readings")]
    assert left == [
        "queue iot/mqtt-subscription-c1qos1: made by the MQTT plugin for an MQTT client's"
        " subscriptions",
        "queue iot/mqtt-subscription-c0qos0: made by the MQTT plugin for an MQTT client's"
        " subscriptions",
        "queue iot/mqtt-will-w5: made by the MQTT plugin to hold an MQTT client's delayed will"
        " message",
        "queue iot/stomp-subscription-0c7__NARwmdMMFi_On6y8w: made by the STOMP plugin for a"
        " client's /topic/ subscription",
        "queue iot/stomp-subscription-IunOkPB0OtdkyhmTUlcwKg: made by the STOMP plugin for a"
        " client's /topic/ subscription",
        "binding iot/amq.topic -> mqtt-subscription-c1qos1: to or from an object left out",
        "binding iot/amq.topic -> mqtt-subscription-c0qos0: to or from an object left out",
        "binding iot/amq.topic -> stomp-subscription-0c7__NARwmdMMFi_On6y8w: to or from an"
        " object left out",
    ]


@pytest.mark.parametrize("name", ["mqtt-subscription-x", "mqtt-will-x", "stomp-subscription-x"])
def test_a_spec_declaring_a_plugin_queue_name_is_refused_where_it_is(name: str) -> None:
    problems = check(vhost_spec(f"queues:\n  - name: keep\n  - name: {name}\n"))
    (problem,) = problems
    assert problem.path == "vhosts[0].queues[1].name"
    assert f"{name!r}" in problem.message and "rename it" in problem.message
