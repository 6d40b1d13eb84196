"""Spec -> Topology: what the user wrote, as the primitives the planner compares with the broker.

Expansion is a sequence of steps over each vhost, each adding primitives to a draft. The
kinds' own steps (``rabbitry.topology.kinds``) translate declared objects one to one; the
patterns (delay levels, retry ladders, parking lots, sharding, federation) are further steps
that read their own part of the vhost spec and add the exchanges, queues, bindings and policies
they stand for. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rabbitry.topology import primitives
from rabbitry.topology.kinds import in_vhosts
from rabbitry.topology.patterns.delays import declare_delays
from rabbitry.topology.patterns.draft import VhostDraft, limits_of
from rabbitry.topology.patterns.federation import declare_federation
from rabbitry.topology.patterns.retries import declare_retries
from rabbitry.topology.patterns.sharding import declare_modulus_sharding, declare_sharded_exchanges
from rabbitry.topology.patterns.shovels import declare_shovels
from rabbitry.topology.patterns.super_streams import declare_super_streams
from rabbitry.topology.spec.model import Spec, UserSpec, VhostSpec

__all__ = ["VHOST_STEPS", "ExpansionStep", "VhostDraft", "expand"]


ExpansionStep = Callable[[VhostDraft], None]
"""Adds the primitives one part of a vhost spec stands for to the draft."""


def _declared_kinds() -> tuple[ExpansionStep, ...]:
    """Each vhost kind's own step (``Kind.declare``), in the order the spec model lists their
    sections."""
    order = list(VhostSpec.model_fields)
    declared = sorted(in_vhosts(), key=lambda kind: order.index(kind.vhost_field or ""))
    return tuple(kind.declare for kind in declared)


VHOST_STEPS: tuple[ExpansionStep, ...] = (
    *_declared_kinds(),
    declare_delays,
    declare_retries,
    declare_sharded_exchanges,
    declare_modulus_sharding,
    declare_federation,
    declare_shovels,
    declare_super_streams,
)
"""The kinds' own steps (what the spec declares one to one), then the patterns (delays,
retries), which refer to declared objects."""


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
