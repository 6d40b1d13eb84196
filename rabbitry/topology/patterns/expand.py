"""Spec -> Topology: what the user wrote, as the primitives the planner compares with the broker.

Expansion is a sequence of steps over each vhost, each adding primitives to a draft. The base
steps translate declared objects one to one; the patterns of later issues (delay levels, retry
ladders, parking lots, sharding, federation) are further steps that read their own part of the
vhost spec and add the exchanges, queues, bindings and policies they stand for. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from rabbitry.topology import primitives
from rabbitry.topology.patterns.delays import declare_delays
from rabbitry.topology.patterns.draft import VhostDraft, limits_of
from rabbitry.topology.patterns.federation import declare_federation
from rabbitry.topology.patterns.retries import declare_retries
from rabbitry.topology.patterns.sharding import declare_modulus_sharding, declare_sharded_exchanges
from rabbitry.topology.patterns.shovels import declare_shovels
from rabbitry.topology.patterns.super_streams import declare_super_streams
from rabbitry.topology.spec.model import (
    OperatorPolicySpec,
    PolicySpec,
    QueueSpec,
    Spec,
    UserSpec,
)

__all__ = ["VHOST_STEPS", "ExpansionStep", "VhostDraft", "expand"]


ExpansionStep = Callable[[VhostDraft], None]
"""Adds the primitives one part of a vhost spec stands for to the draft."""


def declare_exchanges(draft: VhostDraft) -> None:
    for spec in draft.spec.exchanges:
        arguments: dict[str, primitives.JSON] = {
            **spec.arguments.as_broker_dict(),
            **spec.unchecked_arguments,
        }
        if spec.alternate_exchange is not None:
            arguments["alternate-exchange"] = spec.alternate_exchange
        draft.exchanges.append(
            primitives.Exchange.trusted(
                name=spec.name,
                type=spec.type,
                durable=spec.durable,
                auto_delete=spec.auto_delete,
                internal=spec.internal,
                arguments=arguments,
            )
        )
        guard(draft, "exchange", spec.name, spec.protect, spec.on_remove)


def declare_queues(draft: VhostDraft) -> None:
    for spec in draft.spec.queues:
        draft.queues.append(
            primitives.Queue.trusted(
                name=spec.name,
                type=spec.type or draft.default_queue_type,
                durable=spec.durable,
                auto_delete=spec.auto_delete,
                arguments=queue_arguments(spec),
            )
        )
        guard(draft, "queue", spec.name, spec.protect, spec.on_remove)


def guard(draft: VhostDraft, kind: str, name: str, protect: bool, on_remove: str) -> None:
    """Note what the spec says of an object's removal (``protect``, ``on_remove``)."""
    if protect:
        draft.guards.append((kind, name, "protect"))
    if on_remove == "retain":
        draft.guards.append((kind, name, "retain"))


def queue_arguments(spec: QueueSpec) -> dict[str, primitives.JSON]:
    """A queue's declared arguments; a periodic queue is consumed by one worker at a time, so
    that one process sees every copy of an occurrence (``rabbitry.consumer.periodic``)."""
    arguments: dict[str, primitives.JSON] = {
        **spec.arguments.as_broker_dict(),
        **spec.unchecked_arguments,
    }
    if spec.periodic is not None:
        arguments.setdefault("x-single-active-consumer", True)
    return arguments


def declare_bindings(draft: VhostDraft) -> None:
    for spec in draft.spec.bindings:
        draft.bindings.append(
            primitives.Binding.trusted(
                source=spec.source,
                destination=spec.destination,
                destination_type=spec.destination_type,
                routing_key=spec.routing_key,
                arguments=dict(spec.arguments),
            )
        )


def declare_policies(draft: VhostDraft) -> None:
    draft.policies.extend(_policy(primitives.Policy, spec) for spec in draft.spec.policies)
    draft.operator_policies.extend(
        _policy(primitives.OperatorPolicy, spec) for spec in draft.spec.operator_policies
    )


AnyPolicy = TypeVar("AnyPolicy", bound=primitives.Policy)


def _policy(kind: type[AnyPolicy], spec: PolicySpec | OperatorPolicySpec) -> AnyPolicy:
    """A user or operator policy: the checked keys of its definition, then the unchecked."""
    return kind(
        name=spec.name,
        pattern=spec.pattern,
        apply_to=spec.apply_to,
        priority=spec.priority,
        definition={**spec.definition.as_broker_dict(), **spec.unchecked_definition},
    )


def declare_access(draft: VhostDraft) -> None:
    for perm in draft.spec.permissions:
        draft.permissions.append(
            primitives.Permission(
                user=perm.user, configure=perm.configure, write=perm.write, read=perm.read
            )
        )
    for tperm in draft.spec.topic_permissions:
        draft.topic_permissions.append(
            primitives.TopicPermission(
                user=tperm.user, exchange=tperm.exchange, write=tperm.write, read=tperm.read
            )
        )


def declare_parameters(draft: VhostDraft) -> None:
    for param in draft.spec.parameters:
        draft.parameters.append(
            primitives.Parameter(component=param.component, name=param.name, value=param.value)
        )


VHOST_STEPS: tuple[ExpansionStep, ...] = (
    declare_exchanges,
    declare_queues,
    declare_bindings,
    declare_policies,
    declare_access,
    declare_parameters,
    declare_delays,
    declare_retries,
    declare_sharded_exchanges,
    declare_modulus_sharding,
    declare_federation,
    declare_shovels,
    declare_super_streams,
)
"""The base steps, then the patterns (delays, retries), which refer to declared objects."""


def expand(spec: Spec, steps: Sequence[ExpansionStep] = VHOST_STEPS) -> primitives.Topology:
    """The primitives ``spec`` stands for. Run ``validate(spec)`` first: this does not check.

    A vhost the checks expanded on their way (the delay and retry patterns' names) is taken
    from them, once: change no spec between checking and expanding it."""
    reuse = spec._expanded if steps is VHOST_STEPS else {}
    vhosts = []
    for vhost_spec in spec.vhosts:
        done = reuse.pop(id(vhost_spec), None)
        if done is not None and done[0] is vhost_spec:
            vhosts.append(done[1])
            continue
        draft = VhostDraft(stack=spec, spec=vhost_spec)
        for step in steps:
            step(draft)
        vhosts.append(draft.build())
    return primitives.Topology(
        name=spec.name,
        vhosts=tuple(vhosts),
        users=tuple(_user(u) for u in spec.users),
        global_parameters=tuple(
            primitives.GlobalParameter(name=p.name, value=p.value) for p in spec.global_parameters
        ),
    )


def _user(spec: UserSpec) -> primitives.User:
    algorithm = {"hashing_algorithm": spec.hashing_algorithm} if spec.hashing_algorithm else {}
    return primitives.User(
        name=spec.name,
        password=spec.password,
        password_hash=spec.password_hash,
        tags=tuple(spec.tags),
        limits=limits_of(spec.limits),
        **algorithm,
    )
