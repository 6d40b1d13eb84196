"""The management API's documents of the objects a definitions import creates (pure): the
bodies of one object's PUT and a vhost's definitions document."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rabbitry.topology.primitives import (
    Binding,
    Exchange,
    OperatorPolicy,
    Parameter,
    Policy,
    Primitive,
    Queue,
)


def exchange_doc(e: Exchange) -> dict[str, Any]:
    return {
        "name": e.name,
        "type": str(e.type),
        "durable": e.durable,
        "auto_delete": e.auto_delete,
        "internal": e.internal,
        "arguments": e.arguments,
    }


def queue_doc(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "arguments": queue.wire_arguments(),
    }


def binding_doc(b: Binding) -> dict[str, Any]:
    return {
        "source": b.source,
        "destination": b.destination,
        "destination_type": b.destination_type.value,
        "routing_key": b.routing_key,
        "arguments": b.arguments,
    }


def policy_body(p: Policy) -> dict[str, Any]:
    return {
        "pattern": p.pattern,
        "apply-to": p.apply_to.value,
        "priority": p.priority,
        "definition": p.definition,
    }


def definitions_for(resources: Iterable[Primitive]) -> dict[str, list[dict[str, Any]]]:
    """A per-vhost definitions document creating exactly these objects."""
    doc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in resources:
        if isinstance(r, Exchange):
            doc["exchanges"].append(exchange_doc(r))
        elif isinstance(r, Queue):
            doc["queues"].append(queue_doc(r))
        elif isinstance(r, Binding):
            doc["bindings"].append(binding_doc(r))
        elif isinstance(r, OperatorPolicy):
            raise TypeError("operator policies are not part of a vhost definitions import")
        elif isinstance(r, Policy):
            doc["policies"].append({"name": r.name, **policy_body(r)})
        elif isinstance(r, Parameter):
            doc["parameters"].append({"component": r.component, "name": r.name, "value": r.value})
        else:
            raise TypeError(f"{type(r).__name__} is not part of a vhost definitions import")
    return dict(doc)


__all__ = ["binding_doc", "definitions_for", "exchange_doc", "policy_body", "queue_doc"]
