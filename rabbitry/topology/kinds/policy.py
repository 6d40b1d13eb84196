"""A user policy: changed in place by the broker."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from rabbitry.topology.kinds.exported_arguments import split_arguments
from rabbitry.topology.kinds.kind import (
    Document,
    JSONDict,
    Kind,
    Reading,
    Write,
    enum_or_none,
    segment,
)
from rabbitry.topology.primitives import ApplyTo, Policy, Primitive, Vhost
from rabbitry.topology.spec.arguments import KnownKeys, PolicyDefinition

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft


def policy_body(p: Policy) -> dict[str, Any]:
    """The policy as the management API takes it (without its name)."""
    return {
        "pattern": p.pattern,
        "apply-to": p.apply_to.value,
        "priority": p.priority,
        "definition": p.definition,
    }


class PolicyKind(Kind):
    name = "policy"
    primitive = Policy
    vhost_field = "policies"
    section = "policies"
    imported = True
    import_rank = 1
    api: ClassVar[str] = "policies"
    """The API's collection of them."""
    default_apply_to: ClassVar[ApplyTo] = ApplyTo.ALL
    definition_model: ClassVar[type[KnownKeys]] = PolicyDefinition

    def declare(self, draft: VhostDraft) -> None:
        """The spec's policies of this kind: the checked keys of each definition, then the
        unchecked."""
        field = self.vhost_field or ""
        getattr(draft, field).extend(
            self.primitive(
                name=spec.name,
                pattern=spec.pattern,
                apply_to=spec.apply_to,
                priority=spec.priority,
                definition={**spec.definition.as_broker_dict(), **spec.unchecked_definition},
            )
            for spec in getattr(draft.spec, field)
        )

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Primitive]:
        for item in items:
            yield Policy(
                name=item["name"],
                pattern=item["pattern"],
                apply_to=enum_or_none(ApplyTo, item.get("apply-to")) or ApplyTo.ALL,
                priority=int(item.get("priority", 0)),
                definition=dict(item.get("definition") or {}),
            )

    def puts(self, resource: Primitive, vhost: str, observed: Primitive | None) -> list[Write]:
        assert isinstance(resource, Policy)
        path = f"/{self.api}/{segment(vhost)}/{segment(resource.name)}"
        return [Write("PUT", path, policy_body(resource))]

    def deletion(self, observed: Primitive, vhost: str) -> Write:
        assert isinstance(observed, Policy)
        path = f"/{self.api}/{segment(vhost)}/{segment(observed.name)}"
        return Write("DELETE", path, allow=(404,))

    def definitions_entry(self, resource: Primitive) -> JSONDict:
        assert isinstance(resource, Policy)
        return {"name": resource.name, **policy_body(resource)}

    def exported(self, resource: Primitive, vhost: Vhost | None) -> Document:
        assert isinstance(resource, Policy)
        out: Document = {"name": resource.name, "pattern": resource.pattern}
        if resource.apply_to is not self.default_apply_to:
            out["apply_to"] = resource.apply_to.value
        if resource.priority:
            out["priority"] = resource.priority
        split_arguments(
            out, resource.definition, self.definition_model, "definition", "unchecked_definition"
        )
        return out


KIND = PolicyKind()
