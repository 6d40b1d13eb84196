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

from rabbitry.errors import RabbitryError
from rabbitry.topology.primitives import Binding, DestinationType, Exchange, Queue, Topology

__all__ = ["ASYNCAPI_VERSION", "AsyncApiError", "HandlerDoc", "Server", "asyncapi_document"]

ASYNCAPI_VERSION = "3.0.0"
AMQP_BINDING_VERSION = "0.3.0"
_AMQP_EXCHANGE_TYPES = {"topic", "direct", "fanout", "headers"}
"""The exchange types the AMQP channel binding can name ("default" is the nameless one)."""

JSON = dict[str, Any]


class AsyncApiError(RabbitryError):
    """The app's handlers consume something the spec does not declare."""


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
    several = len(topology.vhosts) > 1
    unknown = {h.vhost for h in handlers if h.vhost is not None} - {v.name for v in topology.vhosts}
    if unknown:
        raise AsyncApiError(
            f"the app's handlers consume in vhost {sorted(unknown)[0]!r}, which the spec does"
            " not declare: give the spec the app was built from"
        )
    ids = _Ids()
    info: JSON = {"title": title or topology.name, "version": version}
    if description:
        info["description"] = description
    document: JSON = {"asyncapi": ASYNCAPI_VERSION, "info": info}
    document["defaultContentType"] = "application/json"
    server_ids: dict[str, list[str]] = {}
    server_objects: JSON = {}
    for vhost in topology.vhosts:
        for node in servers:
            key = ids.make("server", vhost.name if several else "", node.host, str(node.port or ""))
            host = node.host if node.port is None else f"{node.host}:{node.port}"
            server_objects[key] = {
                "host": host,
                "protocol": node.protocol,
                "protocolVersion": "0.9.1",
                "pathname": "/" + vhost.name,
                "description": f"vhost {vhost.name!r}",
            }
            server_ids.setdefault(vhost.name, []).append(key)
    if server_objects:
        document["servers"] = server_objects

    channels: JSON = {}
    operations: JSON = {}
    messages: JSON = {}
    schemas: JSON = {}
    by_vhost = _handlers_by_vhost(topology, handlers)

    def consumed_from(handler: HandlerDoc, prefix: str, channel_id: str) -> str:
        """Add ``handler``'s message and receive operation on ``channel_id``; the message id."""
        message_id = ids.make(prefix, handler.queue, handler.body_name or "body")
        messages[message_id] = _message(handler)
        for name, schema in handler.definitions.items():
            schemas.setdefault(name, schema)
        operation_id = ids.make(prefix, "receive", handler.queue)
        operations[operation_id] = _operation(handler, channel_id, message_id)
        return message_id

    for vhost in topology.vhosts:
        prefix = vhost.name if several else ""
        refs = [{"$ref": f"#/servers/{key}"} for key in server_ids.get(vhost.name, [])]
        queue_ids: dict[str, str] = {}
        queue_messages: dict[str, dict[str, str]] = {}
        for queue in vhost.queues:
            channel_id = queue_ids[queue.name] = ids.make(prefix, "queue", queue.name)
            channel = _queue_channel(queue, vhost.name)
            mine: dict[str, str] = {}
            for handler in by_vhost.get(vhost.name, {}).get(queue.name, []):
                message_id = consumed_from(handler, prefix, channel_id)
                mine[message_id] = message_id
            if mine:
                queue_messages[queue.name] = mine
                channel["messages"] = {m: {"$ref": f"#/components/messages/{m}"} for m in mine}
            if refs:
                channel["servers"] = refs
            channels[channel_id] = channel
        exchange_names = {exchange.name for exchange in vhost.exchanges}
        consumed = by_vhost.get(vhost.name, {})
        for queue_name in consumed.keys() - queue_ids.keys() - exchange_names:
            handler = consumed[queue_name][0]
            raise AsyncApiError(
                f"handler {handler.name} consumes {queue_name!r} in vhost {vhost.name!r},"
                " which the spec does not declare: give the spec the app was built from"
            )
        for exchange in vhost.exchanges:
            channel_id = ids.make(prefix, "exchange", exchange.name)
            routes = [b for b in vhost.bindings if b.source == exchange.name]
            channel = _exchange_channel(exchange, vhost.name, routes)
            bound: dict[str, str] = {}
            for binding in routes:
                if binding.destination_type is DestinationType.QUEUE:
                    bound.update(queue_messages.get(binding.destination, {}))
            # a modulus-sharded exchange's handler consumes the exchange's name itself
            for handler in consumed.get(exchange.name, []):
                message_id = consumed_from(handler, prefix, channel_id)
                bound[message_id] = message_id
            if bound:
                channel["messages"] = {m: {"$ref": f"#/components/messages/{m}"} for m in bound}
            if refs:
                channel["servers"] = refs
            channels[channel_id] = channel
    if channels:
        document["channels"] = channels
    if operations:
        document["operations"] = operations
    components: JSON = {}
    if messages:
        components["messages"] = messages
    if schemas:
        components["schemas"] = schemas
    if components:
        document["components"] = components
    return document


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
