"""An operator policy: caps that users' policies cannot override. The broker lists them as
parameters of the component ``operator_policy``; a definitions import does not make them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rabbitry.topology.kinds.kind import JSONDict, Reading, enum_or_none
from rabbitry.topology.kinds.policy import PolicyKind
from rabbitry.topology.primitives import ApplyTo, OperatorPolicy, Primitive
from rabbitry.topology.spec.arguments import OperatorPolicyDefinition


class OperatorPolicyKind(PolicyKind):
    name = "operator_policy"
    primitive = OperatorPolicy
    vhost_field = "operator_policies"
    section = "parameters"
    imported = False
    api = "operator-policies"
    default_apply_to = ApplyTo.QUEUES
    definition_model = OperatorPolicyDefinition

    def reads(self, item: JSONDict) -> bool:
        return item.get("component") == "operator_policy"

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Primitive]:
        for item in items:
            value = item.get("value") or {}
            yield OperatorPolicy(
                name=item["name"],
                pattern=value.get("pattern", ""),
                apply_to=enum_or_none(ApplyTo, value.get("apply-to")) or ApplyTo.QUEUES,
                priority=int(value.get("priority", 0)),
                definition=dict(value.get("definition") or {}),
            )

    def definitions_entry(self, resource: Primitive) -> JSONDict:
        raise TypeError("operator policies are not part of a vhost definitions import")


KIND = OperatorPolicyKind()
