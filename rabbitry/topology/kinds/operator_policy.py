"""An operator policy: caps that users' policies cannot override. The broker lists them as
parameters of the component ``operator_policy``; a definitions import does not make them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rabbitry.topology.kinds.kind import JSONDict, Reading
from rabbitry.topology.kinds.policy import PolicyKind
from rabbitry.topology.primitives import ApplyTo, OperatorPolicy
from rabbitry.topology.spec.arguments import OperatorPolicyDefinition


class OperatorPolicyKind(
    PolicyKind[OperatorPolicy],
    name="operator_policy",
    field="operator_policies",
    section="parameters",
):
    """Not made by a definitions import (``imported`` unset); its place among what is would
    be the policies'."""

    primitive = OperatorPolicy
    import_rank = 1
    api = "operator-policies"
    default_apply_to = ApplyTo.QUEUES
    definition_model = OperatorPolicyDefinition

    def reads(self, item: JSONDict) -> bool:
        return item.get("component") == "operator_policy"

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[OperatorPolicy]:
        for item in items:
            yield self.of(item["name"], item.get("value") or {})


KIND = OperatorPolicyKind()
