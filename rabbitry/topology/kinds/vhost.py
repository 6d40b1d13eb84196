"""A virtual host: its settings (description, tags, default queue type, deletion protection,
limits); what is inside it are the other kinds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rabbitry.topology.kinds.kind import (
    Document,
    JSONDict,
    Kind,
    Write,
    enum_or_none,
    limit_writes,
    limits_of,
    segment,
    tags_of,
)
from rabbitry.topology.primitives import Primitive, QueueType, ResourceKey, Vhost

LIMITS = ("max-connections", "max-queues")


class VhostKind(Kind[Vhost], name="vhost"):
    primitive = Vhost

    def describe(self, key: ResourceKey) -> str:
        return f"vhost {key.vhost}"

    def observed_vhost(
        self, name: str, meta: JSONDict, limits: Any, members: Mapping[str, Any]
    ) -> Vhost:
        """The vhost as the management API describes it (``meta``), holding ``members``
        (its field -> its objects, as each kind read them)."""
        metadata = meta.get("metadata") or {}
        # 4.0.6 on say it (false too, at the top of the vhost); an older broker keeps none
        protected = meta.get("protected_from_deletion", metadata.get("protected_from_deletion"))
        return self.primitive(
            name=name,
            description=str(meta.get("description", metadata.get("description", "")) or ""),
            tags=tags_of(meta.get("tags", metadata.get("tags", []))),
            default_queue_type=enum_or_none(QueueType, meta.get("default_queue_type")),
            protected_from_deletion=None if protected is None else protected is True,
            limits=limits_of(limits),
            **members,
        )

    def path(self, resource: Vhost, vhost: str) -> str:
        return f"/vhosts/{segment(resource.name)}"

    def body(self, resource: Vhost, vhost: str) -> JSONDict:
        return {
            "description": resource.description,
            "tags": ",".join(resource.tags),
            # Always explicit: unset means classic here, whatever the node's own default is.
            "default_queue_type": (resource.default_queue_type or QueueType.CLASSIC).value,
        }

    def puts(self, resource: Vhost, vhost: str, observed: Primitive | None) -> list[Write]:
        writes = super().puts(resource, vhost, observed)
        # Deletion protection has its own endpoint (RabbitMQ 4.0.6+): set or lifted only when
        # it differs. A broker without it answers 404 or 405 (the plan warned of it): no change.
        had = getattr(observed, "protected_from_deletion", False)
        if had is not None and bool(had) != bool(resource.protected_from_deletion):
            method = "POST" if resource.protected_from_deletion else "DELETE"
            path = f"{self.path(resource, vhost)}/deletion/protection"
            writes.append(Write(method, path, allow=(404, 405)))
        if resource.limits or getattr(observed, "limits", None):
            limits_path = f"/vhost-limits/{segment(resource.name)}"
            writes += limit_writes(limits_path, resource.limits, LIMITS)
        return writes

    def compared(self, desired: Vhost, observed: Vhost) -> Vhost:
        # A broker that keeps no deletion protection (before 4.0.6: the version table warns
        # of it) is not asked for it again at every plan.
        if observed.protected_from_deletion is None:
            return desired.model_copy(update={"protected_from_deletion": None})
        return desired

    def comparable(self, observed: Vhost, desired: Vhost) -> Vhost:
        if observed.protected_from_deletion is None:
            protected = desired.protected_from_deletion
            return observed.model_copy(update={"protected_from_deletion": protected})
        return observed

    def exported(self, resource: Vhost, vhost: Vhost | None) -> Document:
        """The vhost's own settings (its members are the other kinds')."""
        out: Document = {"name": resource.name}
        if resource.description:
            out["description"] = resource.description
        if resource.tags:
            out["tags"] = list(resource.tags)
        if resource.default_queue_type is not None:
            out["default_queue_type"] = resource.default_queue_type.value
        if resource.protected_from_deletion:
            out["protected_from_deletion"] = True
        if resource.limits:
            out["limits"] = dict(resource.limits)
        return out


KIND = VhostKind()
