"""The spec against the RabbitMQ version it names in ``broker.version``.

What each version refuses, lacks or ignores is the table of ``rabbitry.topology.versions``;
this check only says where in the spec each object is. Without ``broker.version`` it does
nothing (``rabbitry plan`` checks the live broker's version).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rabbitry.topology.checks.findings import Findings, effective_queue_type, vhosts_of
from rabbitry.topology.patterns.retries import VIA_BROKER
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.model import OperatorPolicySpec, PolicySpec, Spec
from rabbitry.topology.spec.source_map import Loc
from rabbitry.topology.versions import (
    RETRY_VIA_BROKER,
    SERIES,
    Kind,
    Use,
    Version,
    format_version,
    judge,
    parse_version,
    uses_of_exchange,
    uses_of_policy,
    uses_of_queue,
    uses_of_vhost,
)


def check_broker_version(spec: Spec, findings: Findings) -> None:
    """Each object against ``broker.version``: refusals are errors, ignored keys warnings."""
    if spec.broker is None or spec.broker.version is None:
        return
    version = parse_version(spec.broker.version)
    newest = SERIES[-1]
    if version[:2] > newest:
        findings.warning(
            ("broker", "version"),
            f"rabbitry knows RabbitMQ up to {format_version(newest)}: what a later version"
            " refuses or ignores is not checked",
        )
    for loc, vhost in vhosts_of(spec):
        protection = uses_of_vhost(vhost.protected_from_deletion)
        _report(protection, version, (*loc, "protected_from_deletion"), {}, findings)
        for i, queue in enumerate(vhost.queues):
            checked = queue.arguments.as_broker_dict()
            keys = {k: "unchecked_arguments" for k in queue.unchecked_arguments}
            keys.update({k: "arguments" for k in checked})
            arguments = {**queue.unchecked_arguments, **checked}
            if queue.delivery_limit is not None:
                arguments.setdefault("x-delivery-limit", queue.delivery_limit)
            by_broker = queue.retry is not None and queue.retry.via == VIA_BROKER
            if by_broker and queue.retry is not None:
                arguments.setdefault("x-delivery-limit", queue.retry.attempts - 1)
            qtype = effective_queue_type(queue, vhost)
            uses = uses_of_queue(qtype, queue.durable, arguments, by_broker)
            _report(uses, version, (*loc, "queues", i), keys, findings)
        for i, sharded in enumerate(vhost.sharded_exchanges):
            template = sharded.queue
            if template.retry is not None and template.retry.via == VIA_BROKER:
                qtype = template.type or vhost.default_queue_type or QueueType.CLASSIC
                feature = [Use(Kind.FEATURE, RETRY_VIA_BROKER, queue_type=qtype)]
                _report(feature, version, (*loc, "sharded_exchanges", i, "queue"), {}, findings)
        for i, exchange in enumerate(vhost.exchanges):
            uses = uses_of_exchange(exchange.type)
            _report(uses, version, (*loc, "exchanges", i), {}, findings)
        kinds: list[tuple[str, Sequence[PolicySpec | OperatorPolicySpec], bool]] = [
            ("policies", vhost.policies, False),
            ("operator_policies", vhost.operator_policies, True),
        ]
        for key, policies, operator in kinds:
            for i, policy in enumerate(policies):
                checked = policy.definition.as_broker_dict()
                keys = {k: "unchecked_definition" for k in policy.unchecked_definition}
                keys.update({k: "definition" for k in checked})
                definition = {**policy.unchecked_definition, **checked}
                uses = uses_of_policy(policy.apply_to, definition, operator)
                _report(uses, version, (*loc, key, i), keys, findings)


def _report(
    uses: Iterable[Use],
    version: Version,
    loc: Loc,
    keys: dict[str, str],
    findings: Findings,
) -> None:
    """Each verdict at the key it is about (``keys``: key -> the mapping that holds it)."""
    for verdict in judge(uses, version):
        use = verdict.use
        if use.kind is Kind.APPLY_TO:
            where: Loc = (*loc, "apply_to")
        elif use.key == RETRY_VIA_BROKER:
            where = (*loc, "retry", "via")
        elif use.key in keys:
            where = (*loc, keys[use.key], use.key)
        else:
            where = loc
        message = verdict.message(runs="broker.version is")
        if verdict.refused:
            findings.error(where, message)
        else:
            findings.warning(where, message)
