"""A cluster-wide runtime parameter (the stacks' ownership records are ones too, kept apart)."""

from __future__ import annotations

from rabbitry.topology.kinds.kind import Document, Kind, Write, segment
from rabbitry.topology.primitives import GlobalParameter, Primitive, Vhost


class GlobalParameterKind(Kind):
    name = "global_parameter"
    primitive = GlobalParameter

    def puts(self, resource: Primitive, vhost: str, observed: Primitive | None) -> list[Write]:
        assert isinstance(resource, GlobalParameter)
        body = {"name": resource.name, "value": resource.value}
        return [Write("PUT", f"/global-parameters/{segment(resource.name)}", body)]

    def deletion(self, observed: Primitive, vhost: str) -> Write:
        assert isinstance(observed, GlobalParameter)
        return Write("DELETE", f"/global-parameters/{segment(observed.name)}", allow=(404,))

    def exported(self, resource: Primitive, vhost: Vhost | None) -> Document:
        assert isinstance(resource, GlobalParameter)
        return {"name": resource.name, "value": resource.value}


KIND = GlobalParameterKind()
