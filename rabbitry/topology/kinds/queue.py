"""A queue: read from the broker (a plugin's own left out), declared with its type as
``x-queue-type``, exported with the vhost's default type left out. Deleting one only when
empty reads the broker first: ``provisioner.writes`` does it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.exported_arguments import flags, split_arguments
from rabbitry.topology.kinds.kind import (
    Document,
    JSONDict,
    Kind,
    Reading,
    entry_reader,
    enum_or_none,
    segment,
)
from rabbitry.topology.plugin_objects import plugin_queue
from rabbitry.topology.primitives import JSON, Queue, QueueType, Vhost
from rabbitry.topology.spec.arguments import QueueArguments

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft
    from rabbitry.topology.spec.model import QueueSpec


def queue_arguments(spec: QueueSpec) -> dict[str, JSON]:
    """A queue's declared arguments; a periodic queue is consumed by one worker at a time, so
    that one process sees every copy of an occurrence (``rabbitry.consumer.periodic``)."""
    arguments: dict[str, JSON] = {**spec.arguments.as_broker_dict(), **spec.unchecked_arguments}
    if spec.periodic is not None:
        arguments.setdefault("x-single-active-consumer", True)
    return arguments


class QueueKind(Kind[Queue], name="queue", field="queues", imported=2):
    primitive = Queue

    def declare(self, draft: VhostDraft) -> None:
        for spec in draft.spec.queues:
            queue_type = spec.type or draft.default_queue_type
            draft.queues.append(
                Queue.trusted(
                    name=spec.name,
                    type=queue_type,
                    durable=spec.durable,
                    auto_delete=spec.auto_delete,
                    arguments=queue_arguments(spec),
                )
            )
            draft.guard("queue", spec.name, spec.protect, spec.on_remove)

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Queue]:
        for item in items:
            arguments = dict(item.get("arguments") or {})
            why = plugin_queue(item["name"], arguments, str(item.get("type") or ""))
            if why:
                # federation links, shard queues, MQTT and STOMP subscriptions: never rabbitry's
                line = f"queue {reading.vhost}/{item['name']}: {why}"
                reading.leave_out("queue", item["name"], line)
                continue
            queue_type = arguments.pop("x-queue-type", None) or item.get("type") or "classic"
            yield Queue.trusted(
                name=item["name"],
                type=enum_or_none(QueueType, queue_type) or QueueType.CLASSIC,
                durable=bool(item.get("durable", True)),
                auto_delete=bool(item.get("auto_delete", False)),
                arguments=arguments,
            )

    def path(self, resource: Queue, vhost: str) -> str:
        """Deleted there whatever it holds (``--force``)."""
        return f"/queues/{segment(vhost)}/{segment(resource.name)}"

    def definitions_entry(self, resource: Queue) -> JSONDict:
        entry = _FLAGS(resource)
        entry["arguments"] = resource.wire_arguments()  # its type among them, as declared
        return entry

    def exported(self, resource: Queue, vhost: Vhost | None) -> Document:
        default_type = (vhost.default_queue_type if vhost else None) or QueueType.CLASSIC
        out: Document = {"name": resource.name}
        if resource.type is not default_type:
            out["type"] = resource.type.value
        flags(out, resource.durable, resource.auto_delete)
        split_arguments(out, resource.arguments, QueueArguments, "arguments", "unchecked_arguments")
        return out


_FLAGS = entry_reader(Queue, ("name", "durable", "auto_delete"))

KIND = QueueKind()
