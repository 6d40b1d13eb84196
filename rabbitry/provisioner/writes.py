"""One object written to the broker, or deleted from it, through the management API: what an
apply does for everything it does not import (updates, deletions, users, vhosts, permissions,
the queues declared apart)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.apply_options import MessageCounter
from rabbitry.provisioner.broker_documents import exchange_doc, policy_body, queue_doc
from rabbitry.provisioner.plans import Change
from rabbitry.topology.primitives import (
    Binding,
    Exchange,
    GlobalParameter,
    OperatorPolicy,
    Parameter,
    Permission,
    Policy,
    Primitive,
    Queue,
    QueueType,
    TopicPermission,
    User,
    Vhost,
)

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


def _limits(
    client: ManagementClient, path: str, limits: dict[str, int], known: tuple[str, ...]
) -> None:
    """Set the limits given, lift the others (a limit left out of the spec is none)."""
    for name in known:
        if name in limits:
            client.put(f"{path}/{name}", {"value": limits[name]})
        else:
            client.delete(f"{path}/{name}")


def _protection(client: ManagementClient, vhost: Vhost, observed: Primitive | None) -> None:
    """Deletion protection has its own endpoint (RabbitMQ 4.0.6+): set or lifted only when it
    differs. A broker without it answers 404 or 405 (the plan warned of it): no change."""
    had = getattr(observed, "protected_from_deletion", False)
    if had is None or bool(had) == bool(vhost.protected_from_deletion):
        return
    path = f"/vhosts/{q(vhost.name)}/deletion/protection"
    client.request("POST" if vhost.protected_from_deletion else "DELETE", path, allow=(404, 405))


def put(
    client: ManagementClient, vhost: str, resource: Primitive, observed: Primitive | None = None
) -> None:
    """Create or update ``resource``; ``observed``: what the broker has of it, if anything
    (limits are touched only where either side has some)."""
    c, v = client, q(vhost)
    had_limits = bool(getattr(observed, "limits", None))
    if isinstance(resource, Vhost):
        body: dict[str, Any] = {
            "description": resource.description,
            "tags": ",".join(resource.tags),
        }
        # Always explicit: unset means classic here, whatever the node's own default is.
        body["default_queue_type"] = (resource.default_queue_type or QueueType.CLASSIC).value
        c.put(f"/vhosts/{q(resource.name)}", body)
        _protection(c, resource, observed)
        if resource.limits or had_limits:
            _limits(c, f"/vhost-limits/{q(resource.name)}", resource.limits, VHOST_LIMITS)
    elif isinstance(resource, User):
        body = {"tags": ",".join(resource.tags)}
        if resource.password is not None:
            body["password"] = resource.password.get_secret_value()
        elif resource.password_hash is not None:
            body["password_hash"] = resource.password_hash
            body["hashing_algorithm"] = resource.hashing_algorithm
        else:
            body["password_hash"] = ""  # no password: the user can only use other mechanisms
        c.put(f"/users/{q(resource.name)}", body)
        if resource.limits or had_limits:
            _limits(c, f"/user-limits/{q(resource.name)}", resource.limits, USER_LIMITS)
    elif isinstance(resource, Permission):
        c.put(
            f"/permissions/{v}/{q(resource.user)}",
            {"configure": resource.configure, "write": resource.write, "read": resource.read},
        )
    elif isinstance(resource, TopicPermission):
        c.put(
            f"/topic-permissions/{v}/{q(resource.user)}",
            {"exchange": resource.exchange, "write": resource.write, "read": resource.read},
        )
    elif isinstance(resource, OperatorPolicy):
        c.put(f"/operator-policies/{v}/{q(resource.name)}", policy_body(resource))
    elif isinstance(resource, Policy):
        c.put(f"/policies/{v}/{q(resource.name)}", policy_body(resource))
    elif isinstance(resource, Parameter):
        c.put(
            f"/parameters/{q(resource.component)}/{v}/{q(resource.name)}",
            {
                "component": resource.component,
                "vhost": vhost,
                "name": resource.name,
                "value": resource.value,
            },
        )
    elif isinstance(resource, GlobalParameter):
        c.put_global_parameter(resource.name, resource.value)
    elif isinstance(resource, Exchange):
        body = exchange_doc(resource)
        del body["name"]
        c.put(f"/exchanges/{v}/{q(resource.name)}", body)
    elif isinstance(resource, Queue):
        body = queue_doc(resource)
        del body["name"]
        c.put(f"/queues/{v}/{q(resource.name)}", body)
    elif isinstance(resource, Binding):
        kind = "q" if resource.destination_type.value == "queue" else "e"
        c.request(
            "POST",
            f"/bindings/{v}/e/{q(resource.source)}/{kind}/{q(resource.destination)}",
            json={"routing_key": resource.routing_key, "arguments": resource.arguments},
        )
    else:
        raise TypeError(f"cannot apply {type(resource).__name__}")


def delete(
    client: ManagementClient,
    change: Change,
    force: bool,
    count_messages: MessageCounter | None = None,
) -> None:
    """Delete what ``change`` observed; a queue only when empty unless ``force`` (counted
    by ``count_messages`` when the broker cannot delete it only-if-empty)."""
    vhost, observed = change.vhost, change.observed
    if isinstance(observed, TopicPermission):
        _delete_topic_permission(client, vhost, observed)
    elif isinstance(observed, Queue):
        _delete_queue(client, vhost, observed, force, count_messages)
    elif isinstance(observed, Binding):
        _delete_binding(client, vhost, observed)
    else:
        client.delete(_path_of(observed, q(vhost)))


_PATHS: dict[type[Primitive], Callable[[Any, str], str]] = {
    Vhost: lambda o, _v: f"/vhosts/{q(o.name)}",
    User: lambda o, _v: f"/users/{q(o.name)}",
    Permission: lambda o, v: f"/permissions/{v}/{q(o.user)}",
    OperatorPolicy: lambda o, v: f"/operator-policies/{v}/{q(o.name)}",
    Policy: lambda o, v: f"/policies/{v}/{q(o.name)}",
    Parameter: lambda o, v: f"/parameters/{q(o.component)}/{v}/{q(o.name)}",
    GlobalParameter: lambda o, _v: f"/global-parameters/{q(o.name)}",
    Exchange: lambda o, v: f"/exchanges/{v}/{q(o.name)}",
}
"""The API path of an object deleted by one request, by kind (``v``: its vhost, quoted)."""


def _path_of(observed: Primitive | None, v: str) -> str:
    for kind in type(observed).__mro__:  # the most specific first: an operator policy's own
        if kind in _PATHS:
            return _PATHS[kind](observed, v)
    raise TypeError(f"cannot delete {type(observed).__name__}")


def _delete_topic_permission(
    client: ManagementClient, vhost: str, observed: TopicPermission
) -> None:
    # The API deletes all of a user's topic permissions in a vhost at once; put back the
    # ones for other exchanges.
    v = q(vhost)
    others = [
        p
        for p in client.topic_permissions(vhost)
        if p["user"] == observed.user and p["exchange"] != observed.exchange
    ]
    client.delete(f"/topic-permissions/{v}/{q(observed.user)}")
    for p in others:
        client.put(
            f"/topic-permissions/{v}/{q(observed.user)}",
            {k: p[k] for k in ("exchange", "write", "read")},
        )


def _delete_queue(
    client: ManagementClient,
    vhost: str,
    queue: Queue,
    force: bool,
    count_messages: MessageCounter | None,
) -> None:
    path = f"/queues/{q(vhost)}/{q(queue.name)}"
    if force:
        client.delete(path)
        return
    if queue.type is QueueType.CLASSIC:
        # Atomic on the broker: refuses if a message arrived since the plan was made.
        response = client.request("DELETE", path, params={"if-empty": "true"}, allow=(400, 404))
        if response.status_code == 400:
            raise BrokerError(
                f"queue {vhost}/{queue.name} is not empty (a message arrived after the plan);"
                " nothing was deleted: drain it or use --force"
            )
        return
    if count_messages is None:
        raise BrokerError(
            f"queue {vhost}/{queue.name} is a {queue.type.value} queue, which the broker cannot"
            " delete only-if-empty; give an AMQP URL (--url or RABBITRY_URL) so rabbitry can"
            " count its messages exactly, or use --force"
        )
    messages, _consumers = count_messages(vhost, queue.name)
    if messages:
        raise BrokerError(
            f"queue {vhost}/{queue.name} holds {messages} message(s); nothing was deleted:"
            " drain it or use --force"
        )
    client.delete(path)


def _delete_binding(client: ManagementClient, vhost: str, binding: Binding) -> None:
    kind = "q" if binding.destination_type.value == "queue" else "e"
    base = f"/bindings/{q(vhost)}/e/{q(binding.source)}/{kind}/{q(binding.destination)}"
    want = Binding(
        source=binding.source,
        destination=binding.destination,
        destination_type=binding.destination_type,
        routing_key=binding.routing_key,
        arguments=binding.arguments,
    ).identity()
    for item in client.get(base):
        found = Binding(
            source=item["source"],
            destination=item["destination"],
            destination_type=item["destination_type"],
            routing_key=item.get("routing_key", ""),
            arguments=item.get("arguments") or {},
        ).identity()
        if found == want:
            # Bindings with arguments are addressed by the broker's properties key (a hash
            # of the arguments), never by the routing key alone.
            client.delete(f"{base}/{q(item['properties_key'])}")
            return


__all__ = ["USER_LIMITS", "VHOST_LIMITS", "delete", "put"]
