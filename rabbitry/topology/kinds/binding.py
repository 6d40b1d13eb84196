"""A binding: its key is all of it (arguments as canonical JSON), so a changed binding is a
delete and a create. The API addresses one with arguments by the broker's properties key:
``provisioner.writes`` reads it before deleting."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.kind import JSONDict, Kind, Reading, Write, segment
from rabbitry.topology.primitives import Binding, DestinationType, Primitive, ResourceKey

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


class BindingKind(Kind[Binding], name="binding", field="bindings", imported=3):
    primitive = Binding
    entry_fields = ("source", "destination", "destination_type", "routing_key", "arguments")
    compares_fields = False

    def describe(self, key: ResourceKey) -> str:
        source, dtype, dest, rk, args = key.identity
        where = f"{key.vhost}/" if key.vhost else ""
        shown_source = source or "(default exchange)"
        extra = f" {args}" if args != "{}" else ""
        return f"binding {where}{shown_source} -> {dtype} {dest} [{rk}]{extra}"

    def needs(self, key: ResourceKey) -> list[ResourceKey]:
        """Its source exchange and its destination."""
        source, destination_type, destination, *_ = key.identity
        return [
            ResourceKey.of("exchange", key.vhost, source),
            ResourceKey.of(destination_type, key.vhost, destination),
        ]

    def declare(self, draft: VhostDraft) -> None:
        for spec in draft.spec.bindings:
            ends = {name: getattr(spec, name) for name in self.entry_fields[:-1]}
            draft.bindings.append(Binding.trusted(**ends, arguments=dict(spec.arguments)))

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Binding]:
        """All but those of the default exchange and those to or from what was left out."""
        gone_exchanges = reading.gone.get("exchange", set())
        gone_queues = reading.gone.get("queue", set())
        for item in items:
            source = item.get("source")
            if not source:
                continue  # the default exchange's implicit bindings are not declared
            to_queue = item.get("destination_type", "queue") == "queue"
            destination = item["destination"]
            gone = source in gone_exchanges or destination in (
                gone_queues if to_queue else gone_exchanges
            )
            if gone:
                line = f"binding {reading.vhost}/{source} -> {destination}"
                reading.left_out.append(f"{line}: to or from an object left out")
                continue
            yield Binding.trusted(
                source=source,
                destination=destination,
                destination_type=DestinationType(item.get("destination_type", "queue")),
                routing_key=item.get("routing_key", ""),
                arguments=dict(item.get("arguments") or {}),
            )

    def path(self, resource: Binding, vhost: str) -> str:
        """Where the API lists (and takes) the bindings between the binding's two ends."""
        to = "q" if resource.destination_type.value == "queue" else "e"
        ends = f"e/{segment(resource.source)}/{to}/{segment(resource.destination)}"
        return f"/bindings/{segment(vhost)}/{ends}"

    def puts(self, resource: Binding, vhost: str, observed: Primitive | None) -> list[Write]:
        body = {"routing_key": resource.routing_key, "arguments": resource.arguments}
        return [Write("POST", self.path(resource, vhost), body)]


KIND = BindingKind()
