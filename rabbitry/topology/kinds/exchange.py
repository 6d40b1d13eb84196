"""An exchange: read from the broker (a plugin's own left out), declared, exported with its
``alternate-exchange`` as ``alternate_exchange``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.exported_arguments import flags, split_arguments
from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, enum_or_none, segment
from rabbitry.topology.plugin_objects import BROKER_EXCHANGE_WHY, plugin_exchange
from rabbitry.topology.primitives import JSON, Exchange, ExchangeType, Vhost
from rabbitry.topology.spec.arguments import ExchangeArguments

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


class ExchangeKind(Kind[Exchange], name="exchange", field="exchanges", imported=2):
    primitive = Exchange
    entry_fields = ("name", "type", "durable", "auto_delete", "internal", "arguments")

    def declare(self, draft: VhostDraft) -> None:
        for spec in draft.spec.exchanges:
            arguments: dict[str, JSON] = {
                **spec.arguments.as_broker_dict(),
                **spec.unchecked_arguments,
            }
            if spec.alternate_exchange is not None:
                arguments["alternate-exchange"] = spec.alternate_exchange
            declared = {name: getattr(spec, name) for name in self.entry_fields[:-1]}
            draft.exchanges.append(Exchange.trusted(**declared, arguments=arguments))
            draft.guard("exchange", spec.name, spec.protect, spec.on_remove)

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Exchange]:
        for item in items:
            arguments = item.get("arguments") or {}
            why = plugin_exchange(arguments, item["name"])
            if why:
                line = f"exchange {reading.vhost}/{item['name']}: {why}"
                if why is not BROKER_EXCHANGE_WHY:  # bindings from the broker's own stay
                    reading.leave_out("exchange", item["name"], line)
                else:
                    reading.left_out.append(line)
                continue
            # a type rabbitry does not know (a plugin's) is kept as its name: it round-trips
            exchange_type = enum_or_none(ExchangeType, item.get("type")) or str(item.get("type"))
            yield Exchange.trusted(
                name=item["name"],
                type=exchange_type,
                durable=bool(item.get("durable", True)),
                auto_delete=bool(item.get("auto_delete", False)),
                internal=bool(item.get("internal", False)),
                arguments=dict(arguments),
            )

    def path(self, resource: Exchange, vhost: str) -> str:
        return f"/exchanges/{segment(vhost)}/{segment(resource.name)}"

    def exported(self, resource: Exchange, vhost: Vhost | None) -> Document:
        out: Document = {"name": resource.name}
        if resource.type is not ExchangeType.DIRECT:
            out["type"] = str(resource.type)
        flags(out, resource.durable, resource.auto_delete)
        if resource.internal:
            out["internal"] = True
        arguments = dict(resource.arguments)
        alternate = arguments.get("alternate-exchange")
        if isinstance(alternate, str):
            out["alternate_exchange"] = alternate
            del arguments["alternate-exchange"]
        split_arguments(out, arguments, ExchangeArguments, "arguments", "unchecked_arguments")
        return out


KIND = ExchangeKind()
