"""A user's write/read patterns on the routing keys of one topic exchange. The API deletes all
of a user's topic permissions in a vhost at once: ``provisioner.writes`` puts back the others."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, Write, segment
from rabbitry.topology.kinds.permission import non_default
from rabbitry.topology.primitives import Primitive, ResourceKey, TopicPermission, Vhost

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


class TopicPermissionKind(Kind):
    name = "topic_permission"
    primitive = TopicPermission
    vhost_field = "topic_permissions"
    section = "topic_permissions"
    listing = "/vhosts/{vhost}/topic-permissions"

    def describe(self, key: ResourceKey) -> str:
        user, exchange = key.identity
        where = f"{key.vhost}/" if key.vhost else ""
        return f"topic_permission {where}{user}@{exchange}"

    def needs(self, key: ResourceKey) -> list[ResourceKey]:
        return [ResourceKey.of("user", "", key.name)]

    def declare(self, draft: VhostDraft) -> None:
        for tperm in draft.spec.topic_permissions:
            draft.topic_permissions.append(
                TopicPermission(
                    user=tperm.user, exchange=tperm.exchange, write=tperm.write, read=tperm.read
                )
            )

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Primitive]:
        for p in items:
            yield TopicPermission(
                user=p["user"], exchange=p["exchange"], write=p["write"], read=p["read"]
            )

    def puts(self, resource: Primitive, vhost: str, observed: Primitive | None) -> list[Write]:
        assert isinstance(resource, TopicPermission)
        body = {"exchange": resource.exchange, "write": resource.write, "read": resource.read}
        path = f"/topic-permissions/{segment(vhost)}/{segment(resource.user)}"
        return [Write("PUT", path, body)]

    def deletion(self, observed: Primitive, vhost: str) -> Write:
        """All of the user's topic permissions in the vhost (the API's only delete)."""
        assert isinstance(observed, TopicPermission)
        path = f"/topic-permissions/{segment(vhost)}/{segment(observed.user)}"
        return Write("DELETE", path, allow=(404,))

    def exported(self, resource: Primitive, vhost: Vhost | None) -> Document:
        assert isinstance(resource, TopicPermission)
        out: Document = {"user": resource.user, "exchange": resource.exchange}
        out.update(non_default(write=resource.write, read=resource.read))
        return out


KIND = TopicPermissionKind()
