"""A user's configure/write/read regexes in one vhost (and, through ``PermissionKind``'s class
settings, a user's topic permissions on one exchange: ``topic_permission``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, ClassVar, TypeVar

from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, segment
from rabbitry.topology.primitives import Permission, Primitive, ResourceKey, Vhost

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft

AnyPermission = TypeVar("AnyPermission", bound=Primitive)


class PermissionKind(Kind[AnyPermission]):
    """A user's permission in a vhost: named by the user (and more ``names``), its
    ``patterns`` regexes, ``.*`` by default."""

    names: ClassVar[tuple[str, ...]] = ("user",)
    patterns: ClassVar[tuple[str, ...]] = ("configure", "write", "read")
    api: ClassVar[str] = "permissions"

    def needs(self, key: ResourceKey) -> list[ResourceKey]:
        return [ResourceKey.of("user", "", key.name)]

    def declare(self, draft: VhostDraft) -> None:
        field = self.vhost_field or ""
        getattr(draft, field).extend(
            self.primitive(**{f: getattr(spec, f) for f in (*self.names, *self.patterns)})
            for spec in getattr(draft.spec, field)
        )

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[AnyPermission]:
        for item in items:
            yield self.primitive(**{f: item[f] for f in (*self.names, *self.patterns)})

    def path(self, resource: AnyPermission, vhost: str) -> str:
        return f"/{self.api}/{segment(vhost)}/{segment(getattr(resource, self.names[0]))}"

    def body(self, resource: AnyPermission, vhost: str) -> JSONDict:
        return {f: getattr(resource, f) for f in (*self.names[1:], *self.patterns)}

    def exported(self, resource: AnyPermission, vhost: Vhost | None) -> Document:
        out: Document = {f: getattr(resource, f) for f in self.names}
        for f in self.patterns:
            if getattr(resource, f) != ".*":
                out[f] = getattr(resource, f)
        return out


class UserPermissionKind(
    PermissionKind[Permission],
    name="permission",
    field="permissions",
    listing="/vhosts/{vhost}/permissions",
):
    primitive = Permission


KIND = UserPermissionKind()
