"""A user policy: changed in place by the broker (and, through ``PolicyKind``'s class settings,
an operator policy: ``operator_policy``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, ClassVar, TypeVar

from rabbitry.topology.kinds.exported_arguments import split_arguments
from rabbitry.topology.kinds.kind import Document, JSONDict, Kind, Reading, enum_or_none, segment
from rabbitry.topology.primitives import ApplyTo, Policy, Vhost
from rabbitry.topology.spec.arguments import KnownKeys, PolicyDefinition

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft

AnyPolicy = TypeVar("AnyPolicy", bound=Policy)


class PolicyKind(Kind[AnyPolicy]):
    """A policy of the API collection ``api``, applying to ``default_apply_to`` unless it says,
    its definition's keys checked by ``definition_model``."""

    api: ClassVar[str] = "policies"
    default_apply_to: ClassVar[ApplyTo] = ApplyTo.ALL
    definition_model: ClassVar[type[KnownKeys]] = PolicyDefinition
    entry_fields = ("name", "pattern", "apply-to", "priority", "definition")

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

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[AnyPolicy]:
        for item in items:
            yield self.of(item["name"], item)

    def of(self, name: str, item: JSONDict) -> AnyPolicy:
        """The policy ``name`` as the API describes it (``item``)."""
        return self.primitive(
            name=name,
            pattern=item.get("pattern", ""),
            apply_to=enum_or_none(ApplyTo, item.get("apply-to")) or self.default_apply_to,
            priority=int(item.get("priority", 0)),
            definition=dict(item.get("definition") or {}),
        )

    def path(self, resource: AnyPolicy, vhost: str) -> str:
        return f"/{self.api}/{segment(vhost)}/{segment(resource.name)}"

    def exported(self, resource: AnyPolicy, vhost: Vhost | None) -> Document:
        out: Document = {"name": resource.name, "pattern": resource.pattern}
        if resource.apply_to is not self.default_apply_to:
            out["apply_to"] = resource.apply_to.value
        if resource.priority:
            out["priority"] = resource.priority
        model = self.definition_model
        split_arguments(out, resource.definition, model, "definition", "unchecked_definition")
        return out


class UserPolicyKind(PolicyKind[Policy], name="policy", field="policies", imported=1):
    primitive = Policy


KIND = UserPolicyKind()
