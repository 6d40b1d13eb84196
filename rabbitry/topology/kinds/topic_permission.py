"""A user's write/read patterns on the routing keys of one topic exchange. The API deletes all
of a user's topic permissions in a vhost at once: ``provisioner.writes`` puts back the others."""

from __future__ import annotations

from rabbitry.topology.kinds.permission import PermissionKind
from rabbitry.topology.primitives import ResourceKey, TopicPermission


class TopicPermissionKind(
    PermissionKind[TopicPermission],
    name="topic_permission",
    field="topic_permissions",
    listing="/vhosts/{vhost}/topic-permissions",
):
    primitive = TopicPermission
    names = ("user", "exchange")
    patterns = ("write", "read")
    api = "topic-permissions"

    def describe(self, key: ResourceKey) -> str:
        user, exchange = key.identity
        where = f"{key.vhost}/" if key.vhost else ""
        return f"topic_permission {where}{user}@{exchange}"


KIND = TopicPermissionKind()
