"""Checks that need the whole spec: names, references, queue types and policy overlaps.

The model checks the shape of each object; these checks compare objects with each other and
with what the broker will do, which is where most silent mistakes hide. Every check runs and
every problem is reported, so one ``rabbitry validate`` shows them all, each with file:line
when the spec came from a file.
"""

from __future__ import annotations

from rabbitry.errors import SpecProblem
from rabbitry.topology.checks.broker_urls import check_broker_urls
from rabbitry.topology.checks.broker_version import check_broker_version
from rabbitry.topology.checks.clusters import check_sharding_and_federation
from rabbitry.topology.checks.findings import (
    Check,
    Findings,
    effective_queue_type,
    is_builtin_exchange,
)
from rabbitry.topology.checks.objects import (
    check_access,
    check_bindings,
    check_dead_letter_exchanges,
    check_exchanges,
    check_queues,
    check_reserved_names,
    check_unique_names,
    check_users,
)
from rabbitry.topology.checks.patterns import check_delays, check_generated_names, check_retries
from rabbitry.topology.checks.policies import check_policies, check_policy_overlaps
from rabbitry.topology.spec.model import Spec
from rabbitry.topology.spec.problems import by_position
from rabbitry.topology.spec.source_map import format_path

__all__ = ["CHECKS", "effective_queue_type", "is_builtin_exchange", "validate"]

CHECKS: tuple[Check, ...] = (
    check_broker_urls,
    check_unique_names,
    check_reserved_names,
    check_queues,
    check_exchanges,
    check_bindings,
    check_dead_letter_exchanges,
    check_policies,
    check_access,
    check_users,
    check_policy_overlaps,
    check_delays,
    check_retries,
    check_generated_names,
    check_sharding_and_federation,
    check_broker_version,
)
"""Every check, in order: objects, references, policies, the delay/retry patterns, then the
spec against the RabbitMQ version it names."""


def validate(spec: Spec) -> list[SpecProblem]:
    """Every semantic problem of ``spec`` (errors and warnings), in file order when known."""
    findings = Findings()
    for check in CHECKS:
        check(spec, findings)
    source = spec.source
    problems = [
        source.problem(loc, message, severity)
        if source is not None
        else SpecProblem(message, path=format_path(loc), severity=severity)
        for loc, message, severity in findings.items
    ]
    return sorted(problems, key=by_position)
