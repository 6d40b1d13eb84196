"""The scripted broker's tiny routing model: exchanges, queues, bindings, and where a publish goes.

Modelled: the default exchange (a routing key names a queue), ``direct`` (the binding key
equals the routing key), ``fanout`` (every bound queue) and ``topic`` (``*`` one word, ``#``
zero or more), plus ``amq.direct``, ``amq.fanout`` and ``amq.topic``. Queues are lists of
messages in order. Arguments (``x-message-ttl``, ``x-dead-letter-exchange``,
``x-max-length``, ``x-delivery-limit``, queue types...) are kept as declared and never acted
on: nothing expires, dead-letters, overflows or counts deliveries here. That is what a real
broker is for (``rabbitry.testing``'s fixtures). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pamqp import commands

from rabbitry.amqp.topic import topic_matches
from rabbitry.errors import NotModelled

__all__ = ["MODELLED_TYPES", "NotModelled", "Routing", "ScriptedMessage", "ScriptedQueue"]

MODELLED_TYPES = ("direct", "fanout", "topic")


@dataclass
class ScriptedMessage:
    """One message as the scripted broker holds it: where it was published, its body and its
    AMQP properties (pamqp's ``Basic.Properties``)."""

    exchange: str
    routing_key: str
    body: bytes
    properties: commands.Basic.Properties = field(default_factory=commands.Basic.Properties)
    redelivered: bool = False

    @property
    def headers(self) -> dict[str, Any]:
        return dict(self.properties.headers or {})

    @property
    def message_id(self) -> str | None:
        return self.properties.message_id


@dataclass
class ScriptedQueue:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    messages: deque[ScriptedMessage] = field(default_factory=deque)
    """Ready messages, the next to deliver first."""


@dataclass
class _Exchange:
    name: str
    type: str
    bindings: list[tuple[str, str]] = field(default_factory=list)
    """(queue, binding key) pairs."""


class Routing:
    """The exchanges and queues of one scripted broker (one vhost's worth: vhosts are not
    told apart)."""

    def __init__(self) -> None:
        self.exchanges: dict[str, _Exchange] = {
            name: _Exchange(name, kind)
            for name, kind in (
                ("amq.direct", "direct"),
                ("amq.fanout", "fanout"),
                ("amq.topic", "topic"),
            )
        }
        self.queues: dict[str, ScriptedQueue] = {}

    def declare_exchange(self, name: str, kind: str) -> str | None:
        """Make the exchange if it is new; the 406 text when it exists with another type."""
        if kind not in MODELLED_TYPES:
            raise NotModelled(
                f"the scripted broker models exchange types {', '.join(MODELLED_TYPES)},"
                f" not {kind!r} (exchange {name!r}): test it on a real broker"
            )
        found = self.exchanges.get(name)
        if found is None:
            self.exchanges[name] = _Exchange(name, kind)
            return None
        if found.type != kind:
            return (
                f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost"
                f" '/': received '{kind}' but current is '{found.type}'"
            )
        return None

    def declare_queue(self, name: str, arguments: dict[str, Any] | None = None) -> ScriptedQueue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = ScriptedQueue(name, dict(arguments or {}))
        return queue

    def bind(self, queue: str, exchange: str, key: str) -> None:
        pair = (queue, key)
        bindings = self.exchanges[exchange].bindings
        if pair not in bindings:
            bindings.append(pair)

    def unbind(self, queue: str, exchange: str, key: str) -> None:
        bindings = self.exchanges[exchange].bindings
        if (queue, key) in bindings:
            bindings.remove((queue, key))

    def delete_queue(self, name: str) -> int:
        queue = self.queues.pop(name, None)
        for exchange in self.exchanges.values():
            exchange.bindings = [b for b in exchange.bindings if b[0] != name]
        return 0 if queue is None else len(queue.messages)

    def route(self, exchange: str, key: str) -> list[ScriptedQueue]:
        """The queues a message published to ``exchange`` with ``key`` lands in (the exchange
        exists: the caller checked)."""
        if exchange == "":
            queue = self.queues.get(key)
            return [] if queue is None else [queue]
        found = self.exchanges[exchange]
        names: list[str] = []
        for queue_name, binding in found.bindings:
            if queue_name in names:
                continue
            if (
                found.type == "fanout"
                or (found.type == "direct" and binding == key)
                or (found.type == "topic" and topic_matches(binding, key))
            ):
                names.append(queue_name)
        return [self.queues[n] for n in names if n in self.queues]
