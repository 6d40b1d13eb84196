"""One object written to the broker, or deleted from it, through the management API: what an
apply does for everything it does not import (updates, deletions, users, vhosts, permissions,
the queues declared apart)."""

from __future__ import annotations

from rabbitry.errors import BrokerError
from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.apply_options import MessageCounter
from rabbitry.provisioner.plans import Change
from rabbitry.topology.kinds import kind_of_resource
from rabbitry.topology.kinds.kind import Write
from rabbitry.topology.kinds.user import LIMITS as USER_LIMITS
from rabbitry.topology.kinds.vhost import LIMITS as VHOST_LIMITS
from rabbitry.topology.primitives import Binding, Primitive, Queue, QueueType, TopicPermission


def send(client: ManagementClient, write: Write) -> None:
    """One request of a write, as the kind's module made it (through the client's own ``put``
    and ``delete`` where they fit: what a client does around every PUT or delete holds)."""
    if write.method == "PUT" and not write.allow:
        client.put(write.path, write.body)
    elif write.method == "DELETE" and write.allow == (404,) and write.body is None:
        client.delete(write.path)
    else:
        client.request(write.method, write.path, json=write.body, allow=write.allow)


def put(
    client: ManagementClient, vhost: str, resource: Primitive, observed: Primitive | None = None
) -> None:
    """Create or update ``resource``; ``observed``: what the broker has of it, if anything
    (limits are touched only where either side has some)."""
    for write in kind_of_resource(resource).puts(resource, vhost, observed):
        send(client, write)


def delete(
    client: ManagementClient,
    change: Change,
    force: bool,
    count_messages: MessageCounter | None = None,
) -> None:
    """Delete what ``change`` observed; a queue only when empty unless ``force`` (counted
    by ``count_messages`` when the broker cannot delete it only-if-empty)."""
    vhost, observed = change.vhost, change.observed
    if observed is None:
        raise TypeError(f"cannot delete {change.title}: nothing observed")
    if isinstance(observed, TopicPermission):
        _delete_topic_permission(client, vhost, observed)
    elif isinstance(observed, Queue) and not force:
        _delete_queue(client, vhost, observed, count_messages)
    elif isinstance(observed, Binding):
        _delete_binding(client, vhost, observed)
    else:
        send(client, kind_of_resource(observed).deletion(observed, vhost))


def _delete_topic_permission(
    client: ManagementClient, vhost: str, observed: TopicPermission
) -> None:
    # The API deletes all of a user's topic permissions in a vhost at once; put back the
    # ones for other exchanges.
    kind = kind_of_resource(observed)
    others = [
        TopicPermission(user=p["user"], exchange=p["exchange"], write=p["write"], read=p["read"])
        for p in client.topic_permissions(vhost)
        if p["user"] == observed.user and p["exchange"] != observed.exchange
    ]
    send(client, kind.deletion(observed, vhost))
    for other in others:
        for write in kind.puts(other, vhost, None):
            send(client, write)


def _delete_queue(
    client: ManagementClient,
    vhost: str,
    queue: Queue,
    count_messages: MessageCounter | None,
) -> None:
    """Deleted only when empty: at once by the broker for a classic queue, after an exact
    count for the others."""
    path = kind_of_resource(queue).path(queue, vhost)
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
    base = kind_of_resource(binding).path(binding, vhost)
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


__all__ = ["USER_LIMITS", "VHOST_LIMITS", "delete", "put", "send"]
