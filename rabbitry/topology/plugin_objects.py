"""Queues and exchanges the broker makes for its own plugins, told apart from what users declare.

A vhost holds, beside what its users declared, what plugins declared for their own work: a
client of the MQTT plugin that subscribes gets a queue, bound from ``amq.topic``; a federation
link gets a queue and an exchange upstream. None of it is the user's to declare: export and
import-definitions leave it out and name it, and the planner reads past it (never planned,
recorded or pruned). ``plugin_queue`` and ``plugin_exchange`` are the one place that says which
objects these are, and why, from the management API's answer alone (no I/O).

What the plugins make, as seen on RabbitMQ 4.0.5 (3.x makes the same names):

- federation: link queues and exchanges marked with the argument ``x-internal-purpose``.
- sharding: the shard queues ``sharding: <exchange> - <node> - <n>``, on each node.
- MQTT: a client's subscriptions share one queue per QoS, ``mqtt-subscription-<client id>qos0``
  or ``...qos1``; for a session that outlives its connection (clean session false, or an MQTT
  5 session expiry) it is durable and expires with the session (``x-expires``), otherwise it is
  exclusive (QoS 0 of type ``rabbit_mqtt_qos0_queue``). An MQTT 5 will message with a delay
  waits in ``mqtt-will-<client id>``, dead-lettered to ``amq.topic`` when due. Retained
  messages live in files of each node: no object.
- STOMP: a subscription to a ``/topic/`` destination gets ``stomp-subscription-<id>`` (durable
  for a durable subscription, auto-delete otherwise), bound from ``amq.topic``. Queues named in
  ``/queue/<name>`` and ``/amq/queue/<name>`` destinations are the client's own (kept), and
  subscriptions to ``/exchange/`` and ``/temp-queue/`` are exclusive queues, gone with their
  connection.

Queues and exchanges named ``amq.*`` are the broker's: a queue declared without a name gets
``amq.gen-...``, and the broker's definitions import (RabbitMQ 4.0.5, checked) skips every
``amq.*`` queue and exchange of a file, with a log line. They are left out the same way.

Exclusive queues are left out anyway (``ManagementClient.vhost_objects``). A spec may not
declare queues under the plugins' prefixes (``reserved_queue_prefix``): the broker would treat
them as the plugin's, and the planner could never see them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rabbitry.topology.patterns.sharding import PLUGIN_SHARD_QUEUE_PREFIX

__all__ = [
    "FEDERATION_INTERNAL",
    "RESERVED_QUEUE_PREFIXES",
    "plugin_exchange",
    "plugin_queue",
    "reserved_queue_prefix",
]

FEDERATION_INTERNAL = "x-internal-purpose"
"""The argument the federation plugin marks its link queues and exchanges with."""

MQTT_QOS0_QUEUE_TYPE = "rabbit_mqtt_qos0_queue"
"""The queue type the MQTT plugin (3.12 and newer) gives a clean session's QoS 0 subscriptions."""

RESERVED_QUEUE_PREFIXES: Mapping[str, str] = {
    "mqtt-subscription-": "made by the MQTT plugin for an MQTT client's subscriptions",
    "mqtt-will-": "made by the MQTT plugin to hold an MQTT client's delayed will message",
    "stomp-subscription-": "made by the STOMP plugin for a client's /topic/ subscription",
    PLUGIN_SHARD_QUEUE_PREFIX: "made by the sharding plugin on each node",
}
"""Queue name prefixes the plugins make queues under, and what each such queue is."""

FEDERATION_WHY = "internal to the federation plugin"

RESERVED_PREFIX = "amq."
"""The prefix of the names the broker keeps for itself: its own exchanges (``amq.topic``...)
and the names it gives queues declared without one (``amq.gen-...``)."""

SERVER_NAMED_WHY = (
    "named by the broker (amq.*) for a client that declared it without a name; the client"
    " declares it again, and the broker's definitions import skips such queues"
)
BROKER_EXCHANGES = frozenset(
    {"amq.direct", "amq.fanout", "amq.headers", "amq.match", "amq.topic", "amq.rabbitmq.trace"}
)
"""The exchanges the broker declares in every vhost (bindings from them are the users')."""
BROKER_EXCHANGE_WHY = "the broker's own, declared in every vhost"
RESERVED_EXCHANGE_WHY = (
    "named under the broker's reserved prefix amq.*: the broker's definitions import skips"
    " such exchanges, and no client may declare one"
)


def plugin_queue(name: str, arguments: Mapping[str, Any], queue_type: str = "") -> str | None:
    """Why a plugin made the queue ``name`` (its arguments and type as the broker reports
    them), or None for a queue of the broker's users."""
    if FEDERATION_INTERNAL in arguments:
        return FEDERATION_WHY
    if name.startswith(RESERVED_PREFIX):
        return SERVER_NAMED_WHY
    if queue_type == MQTT_QOS0_QUEUE_TYPE:
        return "made by the MQTT plugin for an MQTT client's QoS 0 subscriptions"
    prefix = reserved_queue_prefix(name)
    return None if prefix is None else RESERVED_QUEUE_PREFIXES[prefix]


def plugin_exchange(arguments: Mapping[str, Any], name: str = "") -> str | None:
    """Why a plugin (or the broker) made an exchange ``name`` with these ``arguments``, or None
    for a user's exchange."""
    if FEDERATION_INTERNAL in arguments:
        return FEDERATION_WHY
    if name in BROKER_EXCHANGES:
        return BROKER_EXCHANGE_WHY
    if name.startswith(RESERVED_PREFIX):
        return RESERVED_EXCHANGE_WHY
    return None


def reserved_queue_prefix(name: str) -> str | None:
    """The plugin prefix ``name`` starts with, if any."""
    if not name.startswith(_PREFIXES):  # the usual answer, in one call for 50,000 queues
        return None
    return next((p for p in RESERVED_QUEUE_PREFIXES if name.startswith(p)), None)


_PREFIXES = tuple(RESERVED_QUEUE_PREFIXES)
