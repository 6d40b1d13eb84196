"""A cluster-wide runtime parameter (the stacks' ownership records are ones too, kept apart)."""

from __future__ import annotations

from rabbitry.topology.kinds.kind import Document, Kind, segment
from rabbitry.topology.primitives import GlobalParameter, Vhost


class GlobalParameterKind(Kind[GlobalParameter], name="global_parameter"):
    primitive = GlobalParameter

    def path(self, resource: GlobalParameter, vhost: str) -> str:
        return f"/global-parameters/{segment(resource.name)}"

    def body(self, resource: GlobalParameter, vhost: str) -> Document:
        return self.exported(resource, None)

    def exported(self, resource: GlobalParameter, vhost: Vhost | None) -> Document:
        return {"name": resource.name, "value": resource.value}


KIND = GlobalParameterKind()
