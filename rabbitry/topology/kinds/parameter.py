"""A vhost-scoped runtime parameter (federation upstreams and upstream sets, shovels). The
broker's vhost limits are a parameter too: read as the vhost's limits, not as one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, segment
from rabbitry.topology.primitives import Parameter, ResourceKey, Vhost

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


class ParameterKind(Kind[Parameter], name="parameter", field="parameters", imported=0):
    primitive = Parameter
    entry_fields = ("component", "name", "value")

    def describe(self, key: ResourceKey) -> str:
        component, name = key.identity
        where = f"{key.vhost}/" if key.vhost else ""
        return f"parameter {where}{component}/{name}"

    def declare(self, draft: VhostDraft) -> None:
        draft.parameters.extend(
            Parameter(component=spec.component, name=spec.name, value=spec.value)
            for spec in draft.spec.parameters
        )

    def reads(self, item: JSONDict) -> bool:
        return item.get("component") not in ("operator_policy", "vhost-limits")

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Parameter]:
        for item in items:
            yield Parameter(component=item["component"], name=item["name"], value=item.get("value"))

    def path(self, resource: Parameter, vhost: str) -> str:
        where = f"{segment(resource.component)}/{segment(vhost)}"
        return f"/parameters/{where}/{segment(resource.name)}"

    def body(self, resource: Parameter, vhost: str) -> JSONDict:
        return {"component": resource.component, "vhost": vhost, **self.exported(resource, None)}

    def exported(self, resource: Parameter, vhost: Vhost | None) -> Document:
        return self.definitions_entry(resource)


KIND = ParameterKind()
