"""An AsyncAPI 3.0 document of a topology and the handlers that consume from it (pure).

``asyncapi_document(topology, handlers=..., servers=...)`` returns the document as plain
JSON data (``rabbitry asyncapi`` prints it):

- a **server** per vhost and broker node the caller names (host and port only: never a
  password), the vhost as its ``pathname``;
- a **channel** per exchange (AMQP channel binding ``is: routingKey`` with the exchange's name,
  type, durability and vhost) and per queue (``is: queue``); the spec's bindings from an
  exchange are listed on its channel in ``x-rabbitry-bindings``, and an exchange type the AMQP
  binding cannot name (``x-consistent-hash``, ...) in ``x-rabbitry-exchange-type``;
- a **message** per handler (``HandlerDoc``): the JSON Schema of a typed handler's body as its
  payload, on the channel of the handler's queue and of every exchange bound straight to it;
- a **receive operation** per handler, on its queue's channel.

Ids (the keys of channels, messages, operations) keep to AsyncAPI's ``[A-Za-z0-9_-]``: other
characters become ``_`` and a clash gets a number. No I/O and no clock; the schemas of typed
bodies come from the caller (``rabbitry.consumer.handler_docs``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rabbitry.errors import AsyncApiError
from rabbitry.topology.primitives import (
    Binding,
    DestinationType,
    Exchange,
    Queue,
    Topology,
    Vhost,
)

__all__ = ["ASYNCAPI_VERSION", "AsyncApiError", "HandlerDoc", "Server", "asyncapi_document"]

ASYNCAPI_VERSION = "3.0.0"
AMQP_BINDING_VERSION = "0.3.0"
_AMQP_EXCHANGE_TYPES = {"topic", "direct", "fanout", "headers"}
"""The exchange types the AMQP channel binding can name ("default" is the nameless one)."""

JSON = dict[str, Any]


@dataclass(frozen=True)
class HandlerDoc:
    """One handler as the document shows it: what it consumes and what body it reads."""

    queue: str
    name: str
    """The handler's qualified name (the operation's title)."""
    vhost: str | None = None
    """The vhost of its queue (None: the topology's only vhost)."""
    summary: str | None = None
    """The first line of the handler's docstring."""
    body_name: str | None = None
    """The body type's name (None: an untyped handler, which reads the body as bytes)."""
    payload: JSON | None = None
    """The JSON Schema of the body, its references pointing into ``definitions``."""
    definitions: Mapping[str, JSON] = field(default_factory=dict)
    """Schemas the payload refers to, as ``#/components/schemas/<name>``."""
    content_type: str = "application/json"


@dataclass(frozen=True)
class Server:
    """One broker node: ``amqp`` or ``amqps``, its host and port."""

    protocol: str
    host: str
    port: int | None = None


class _Ids:
    """Unique AsyncAPI ids from names: ``orders.work`` -> ``orders_work`` (then ``_2``)."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def make(self, *parts: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_\-]", "_", "-".join(p for p in parts if p)) or "_"
        name, number = base, 1
        while name in self._taken:
            number += 1
            name = f"{base}_{number}"
        self._taken.add(name)
        return name


def asyncapi_document(
    topology: Topology,
    *,
    title: str | None = None,
    version: str = "1.0.0",
    description: str | None = None,
    handlers: Sequence[HandlerDoc] = (),
    servers: Sequence[Server] = (),
) -> JSON:
    """The AsyncAPI 3.0 document of ``topology`` and ``handlers`` (see the module)."""
    _check_handler_vhosts(topology, handlers)
    info: JSON = {"title": title or topology.name, "version": version}
    if description:
        info["description"] = description
    parts = _Parts(several=len(topology.vhosts) > 1)
    server_ids = parts.add_servers(topology, servers)
    by_vhost = _handlers_by_vhost(topology, handlers)
    for vhost in topology.vhosts:
        refs = [{"$ref": f"#/servers/{key}"} for key in server_ids.get(vhost.name, [])]
        parts.add_vhost(vhost, by_vhost.get(vhost.name, {}), refs)
    document: JSON = {"asyncapi": ASYNCAPI_VERSION, "info": info}
    document["defaultContentType"] = "application/json"
    document.update(_present(servers=parts.servers, channels=parts.channels))
    document.update(_present(operations=parts.operations))
    components = _present(messages=parts.messages, schemas=parts.schemas)
    document.update(_present(components=components))
    return document


def _present(**parts: JSON) -> JSON:
    """The parts that hold something: the document leaves an empty one out."""
    return {key: part for key, part in parts.items() if part}


def _check_handler_vhosts(topology: Topology, handlers: Sequence[HandlerDoc]) -> None:
    """Every vhost a handler names is the spec's."""
    unknown = {h.vhost for h in handlers if h.vhost is not None} - {v.name for v in topology.vhosts}
    if unknown:
        raise AsyncApiError(
            f"the app's handlers consume in vhost {sorted(unknown)[0]!r}, which the spec does"
            " not declare: give the spec the app was built from"
        )


class _Parts:
    """The document's servers, channels, operations, messages and schemas, added vhost by
    vhost; ids are made in the order the parts are added, so a document is the same each time."""

    def __init__(self, *, several: bool) -> None:
        self.several = several
        """More than one vhost: ids start with the vhost's name."""
        self.ids = _Ids()
        self.servers: JSON = {}
        self.channels: JSON = {}
        self.operations: JSON = {}
        self.messages: JSON = {}
        self.schemas: JSON = {}

    def add_servers(self, topology: Topology, servers: Sequence[Server]) -> dict[str, list[str]]:
        """A server per vhost and node; the ids of each vhost's servers."""
        server_ids: dict[str, list[str]] = {}
        for vhost in topology.vhosts:
            for node in servers:
                key = self.ids.make(
                    "server", vhost.name if self.several else "", node.host, str(node.port or "")
                )
                host = node.host if node.port is None else f"{node.host}:{node.port}"
                self.servers[key] = {
                    "host": host,
                    "protocol": node.protocol,
                    "protocolVersion": "0.9.1",
                    "pathname": "/" + vhost.name,
                    "description": f"vhost {vhost.name!r}",
                }
                server_ids.setdefault(vhost.name, []).append(key)
        return server_ids

    def add_vhost(
        self, vhost: Vhost, consumed: Mapping[str, list[HandlerDoc]], refs: list[JSON]
    ) -> None:
        """A channel per queue, then per exchange, with the messages of the handlers that
        consume there (``consumed``: by queue name); ``refs``, the vhost's servers."""
        prefix = vhost.name if self.several else ""
        queue_messages: dict[str, dict[str, str]] = {}
        for queue in vhost.queues:
            channel_id = self.ids.make(prefix, "queue", queue.name)
            mine = self.consumed_on(consumed.get(queue.name, []), prefix, channel_id)
            if mine:
                queue_messages[queue.name] = mine
            self.add_channel(channel_id, _queue_channel(queue, vhost.name), mine, refs)
        _check_consumed_declared(vhost, consumed)
        for exchange in vhost.exchanges:
            channel_id = self.ids.make(prefix, "exchange", exchange.name)
            routes = [b for b in vhost.bindings if b.source == exchange.name]
            bound: dict[str, str] = {}
            for binding in routes:
                if binding.destination_type is DestinationType.QUEUE:
                    bound.update(queue_messages.get(binding.destination, {}))
            # a modulus-sharded exchange's handler consumes the exchange's name itself
            bound.update(self.consumed_on(consumed.get(exchange.name, []), prefix, channel_id))
            channel = _exchange_channel(exchange, vhost.name, routes)
            self.add_channel(channel_id, channel, bound, refs)

    def add_channel(
        self, channel_id: str, channel: JSON, message_ids: Iterable[str], refs: list[JSON]
    ) -> None:
        """``channel`` with the messages it carries and its servers."""
        listed = {m: {"$ref": f"#/components/messages/{m}"} for m in message_ids}
        if listed:
            channel["messages"] = listed
        if refs:
            channel["servers"] = refs
        self.channels[channel_id] = channel

    def consumed_on(
        self, handlers: Iterable[HandlerDoc], prefix: str, channel_id: str
    ) -> dict[str, str]:
        """Each handler's message and receive operation on ``channel_id``; the message ids."""
        message_ids: dict[str, str] = {}
        for handler in handlers:
            message_id = self.ids.make(prefix, handler.queue, handler.body_name or "body")
            self.messages[message_id] = _message(handler)
            for name, schema in handler.definitions.items():
                self.schemas.setdefault(name, schema)
            operation_id = self.ids.make(prefix, "receive", handler.queue)
            self.operations[operation_id] = _operation(handler, channel_id, message_id)
            message_ids[message_id] = message_id
        return message_ids


def _check_consumed_declared(vhost: Vhost, consumed: Mapping[str, list[HandlerDoc]]) -> None:
    """Every queue a handler consumes is the spec's queue or a sharded exchange's name."""
    declared = {queue.name for queue in vhost.queues} | {e.name for e in vhost.exchanges}
    for queue_name in consumed.keys() - declared:
        handler = consumed[queue_name][0]
        raise AsyncApiError(
            f"handler {handler.name} consumes {queue_name!r} in vhost {vhost.name!r},"
            " which the spec does not declare: give the spec the app was built from"
        )


def _handlers_by_vhost(
    topology: Topology, handlers: Iterable[HandlerDoc]
) -> dict[str, dict[str, list[HandlerDoc]]]:
    only = topology.vhosts[0].name if len(topology.vhosts) == 1 else None
    out: dict[str, dict[str, list[HandlerDoc]]] = {}
    for handler in handlers:
        vhost = handler.vhost or only
        if vhost is not None:
            out.setdefault(vhost, {}).setdefault(handler.queue, []).append(handler)
    return out


def _queue_channel(queue: Queue, vhost: str) -> JSON:
    amqp = {
        "is": "queue",
        "queue": {
            "name": queue.name,
            "durable": queue.durable,
            "exclusive": False,
            "autoDelete": queue.auto_delete,
            "vhost": vhost,
        },
        "bindingVersion": AMQP_BINDING_VERSION,
    }
    channel: JSON = {
        "address": queue.name,
        "title": queue.name,
        "description": f"{queue.type.value} queue {queue.name!r} in vhost {vhost!r}",
        "bindings": {"amqp": amqp},
    }
    if queue.arguments:
        channel["x-rabbitry-arguments"] = dict(queue.arguments)
    return channel


def _exchange_channel(exchange: Exchange, vhost: str, routes: Sequence[Binding]) -> JSON:
    kind = str(exchange.type)
    described: JSON = {
        "name": exchange.name,
        "durable": exchange.durable,
        "autoDelete": exchange.auto_delete,
        "vhost": vhost,
    }
    if kind in _AMQP_EXCHANGE_TYPES:
        described["type"] = kind
    amqp = {"is": "routingKey", "exchange": described, "bindingVersion": AMQP_BINDING_VERSION}
    channel: JSON = {
        "address": exchange.name,
        "title": exchange.name,
        "description": f"{kind} exchange {exchange.name!r} in vhost {vhost!r}"
        + (" (internal: only other exchanges publish to it)" if exchange.internal else ""),
        "bindings": {"amqp": amqp},
    }
    if kind not in _AMQP_EXCHANGE_TYPES:
        channel["x-rabbitry-exchange-type"] = kind
    if exchange.arguments:
        channel["x-rabbitry-arguments"] = dict(exchange.arguments)
    if routes:
        channel["x-rabbitry-bindings"] = [_binding(b) for b in routes]
    return channel


def _binding(binding: Binding) -> JSON:
    out: JSON = {
        "destination": binding.destination,
        "destinationType": binding.destination_type.value,
        "routingKey": binding.routing_key,
    }
    if binding.arguments:
        out["arguments"] = dict(binding.arguments)
    return out


def _message(handler: HandlerDoc) -> JSON:
    if handler.payload is None:  # no declared type: nothing is known of the body's format
        return {
            "name": "body",
            "contentType": "application/octet-stream",
            "summary": "the handler takes the message and reads its body as it is",
        }
    return {
        "name": handler.body_name or "body",
        "title": handler.body_name or "body",
        "contentType": handler.content_type,
        "payload": handler.payload,
    }


def _operation(handler: HandlerDoc, channel_id: str, message_id: str) -> JSON:
    operation: JSON = {
        "action": "receive",
        "channel": {"$ref": f"#/channels/{channel_id}"},
        "messages": [{"$ref": f"#/channels/{channel_id}/messages/{message_id}"}],
        "title": handler.name,
    }
    if handler.summary:
        operation["summary"] = handler.summary
    return operation
