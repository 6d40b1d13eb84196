"""One vhost's primitives while the expansion steps add to them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rabbitry.topology import primitives
from rabbitry.topology.spec.model import Spec, VhostSpec

__all__ = ["VhostDraft", "limits_of"]


@dataclass
class VhostDraft:
    """One vhost's primitives while the expansion steps add to them."""

    stack: Spec
    spec: VhostSpec
    exchanges: list[primitives.Exchange] = field(default_factory=list)
    queues: list[primitives.Queue] = field(default_factory=list)
    bindings: list[primitives.Binding] = field(default_factory=list)
    policies: list[primitives.Policy] = field(default_factory=list)
    operator_policies: list[primitives.OperatorPolicy] = field(default_factory=list)
    parameters: list[primitives.Parameter] = field(default_factory=list)
    permissions: list[primitives.Permission] = field(default_factory=list)
    topic_permissions: list[primitives.TopicPermission] = field(default_factory=list)
    retried_by_broker: list[str] = field(default_factory=list)
    """Queues that retry through the broker's delayed retry (``retry: {via: broker}``)."""
    guards: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, name, guard): objects the spec protects or retains (``Vhost.guards``)."""
    more: dict[str, list[primitives.Primitive]] = field(default_factory=dict)
    """Objects of the kinds the draft keeps no list of, by their ``Vhost`` field."""

    def guard(self, kind: str, name: str, protect: bool, on_remove: str) -> None:
        """Note what the spec says of an object's removal (``protect``, ``on_remove``)."""
        if protect:
            self.guards.append((kind, name, "protect"))
        if on_remove == "retain":
            self.guards.append((kind, name, "retain"))

    @property
    def default_queue_type(self) -> primitives.QueueType:
        """The type of queues that do not name one, as the broker decides it."""
        return self.spec.default_queue_type or primitives.QueueType.CLASSIC

    def build(self) -> primitives.Vhost:
        return primitives.Vhost(
            name=self.spec.name,
            description=self.spec.description,
            tags=tuple(self.spec.tags),
            default_queue_type=self.spec.default_queue_type,
            protected_from_deletion=self.spec.protected_from_deletion,
            limits=limits_of(self.spec.limits),
            exchanges=tuple(self.exchanges),
            queues=tuple(self.queues),
            bindings=tuple(self.bindings),
            policies=tuple(self.policies),
            operator_policies=tuple(self.operator_policies),
            parameters=tuple(self.parameters),
            permissions=tuple(self.permissions),
            topic_permissions=tuple(self.topic_permissions),
            retried_by_broker=tuple(self.retried_by_broker),
            guards=tuple(self.guards),
            **{name: tuple(objects) for name, objects in self.more.items()},
        )


def limits_of(spec: Any) -> dict[str, int]:
    """The limits a spec sets (by the broker's names), leaving out those it does not."""
    if spec is None:
        return {}
    return {k: v for k, v in spec.model_dump(by_alias=True).items() if v is not None}
