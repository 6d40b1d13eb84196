"""A user's configure/write/read regexes in one vhost."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, Write, segment
from rabbitry.topology.primitives import Permission, Primitive, ResourceKey, Vhost

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


def non_default(**patterns: str) -> Document:
    """The patterns that are not ``.*`` (the spec's default)."""
    return {key: value for key, value in patterns.items() if value != ".*"}


class PermissionKind(Kind):
    name = "permission"
    primitive = Permission
    vhost_field = "permissions"
    section = "permissions"
    listing = "/vhosts/{vhost}/permissions"

    def needs(self, key: ResourceKey) -> list[ResourceKey]:
        return [ResourceKey.of("user", "", key.name)]

    def declare(self, draft: VhostDraft) -> None:
        for perm in draft.spec.permissions:
            draft.permissions.append(
                Permission(
                    user=perm.user, configure=perm.configure, write=perm.write, read=perm.read
                )
            )

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Primitive]:
        for p in items:
            yield Permission(
                user=p["user"], configure=p["configure"], write=p["write"], read=p["read"]
            )

    def puts(self, resource: Primitive, vhost: str, observed: Primitive | None) -> list[Write]:
        assert isinstance(resource, Permission)
        body = {"configure": resource.configure, "write": resource.write, "read": resource.read}
        return [Write("PUT", f"/permissions/{segment(vhost)}/{segment(resource.user)}", body)]

    def deletion(self, observed: Primitive, vhost: str) -> Write:
        assert isinstance(observed, Permission)
        path = f"/permissions/{segment(vhost)}/{segment(observed.user)}"
        return Write("DELETE", path, allow=(404,))

    def exported(self, resource: Primitive, vhost: Vhost | None) -> Document:
        assert isinstance(resource, Permission)
        out: Document = {"user": resource.user}
        out.update(
            non_default(configure=resource.configure, write=resource.write, read=resource.read)
        )
        return out


KIND = PermissionKind()
