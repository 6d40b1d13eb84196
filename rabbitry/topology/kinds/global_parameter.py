"""A cluster-wide runtime parameter (the stacks' ownership records are ones too, kept apart)."""

from __future__ import annotations

from rabbitry.topology.kinds.kind import Document, Kind, segment
from rabbitry.topology.primitives import GlobalParameter, Vhost


class GlobalParameterKind(Kind[GlobalParameter], name="global_parameter"):
    primitive = GlobalParameter
    entry_fields = ("name", "value")

    def path(self, resource: GlobalParameter, vhost: str) -> str:
        return f"/global-parameters/{segment(resource.name)}"

    def body(self, resource: GlobalParameter, vhost: str) -> Document:
        return self.definitions_entry(resource)

    def exported(self, resource: GlobalParameter, vhost: Vhost | None) -> Document:
        return self.definitions_entry(resource)


KIND = GlobalParameterKind()
