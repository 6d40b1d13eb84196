"""A vhost-scoped runtime parameter (federation upstreams and upstream sets, shovels). The
broker's vhost limits are a parameter too: read as the vhost's limits, not as one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, Write, segment
from rabbitry.topology.primitives import Parameter, Primitive, ResourceKey, Vhost

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


def parameter_path(vhost: str, parameter: Parameter) -> str:
    return f"/parameters/{segment(parameter.component)}/{segment(vhost)}/{segment(parameter.name)}"


class ParameterKind(Kind):
    name = "parameter"
    primitive = Parameter
    vhost_field = "parameters"
    section = "parameters"
    imported = True
    import_rank = 0

    def describe(self, key: ResourceKey) -> str:
        component, name = key.identity
        where = f"{key.vhost}/" if key.vhost else ""
        return f"parameter {where}{component}/{name}"

    def declare(self, draft: VhostDraft) -> None:
        for param in draft.spec.parameters:
            draft.parameters.append(
                Parameter(component=param.component, name=param.name, value=param.value)
            )

    def reads(self, item: JSONDict) -> bool:
        return item.get("component") not in ("operator_policy", "vhost-limits")

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Primitive]:
        for item in items:
            yield Parameter(component=item["component"], name=item["name"], value=item.get("value"))

    def puts(self, resource: Primitive, vhost: str, observed: Primitive | None) -> list[Write]:
        assert isinstance(resource, Parameter)
        body = {
            "component": resource.component,
            "vhost": vhost,
            "name": resource.name,
            "value": resource.value,
        }
        return [Write("PUT", parameter_path(vhost, resource), body)]

    def deletion(self, observed: Primitive, vhost: str) -> Write:
        assert isinstance(observed, Parameter)
        return Write("DELETE", parameter_path(vhost, observed), allow=(404,))

    def definitions_entry(self, resource: Primitive) -> JSONDict:
        assert isinstance(resource, Parameter)
        return {"component": resource.component, "name": resource.name, "value": resource.value}

    def exported(self, resource: Primitive, vhost: Vhost | None) -> Document:
        assert isinstance(resource, Parameter)
        return {"component": resource.component, "name": resource.name, "value": resource.value}


KIND = ParameterKind()
