"""A plan against the live broker, and the lock an apply holds while it makes and runs one.

``plan_topology``: the broker can hold the topology (plugins, feature flags, version), its state
read, the diff (``planner.plan``), and what apply will refuse said as the plan's warnings.
``check_saved``: a saved plan still matches its broker. ``locked_plan``: an apply's plan made
under the stack's lock, from what was read after an early claim when it held (``ReadAhead``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from rabbitry.diagnostics import Diagnostic, listed
from rabbitry.errors import CapabilityError, PlanError
from rabbitry.gcpause import pauses_collector
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.broker_exchanges import missing_exchanges
from rabbitry.provisioner.capabilities import CapabilityReport, migration_requirements, missing
from rabbitry.provisioner.capabilities import check as check_capabilities
from rabbitry.provisioner.capabilities import notices as version_notices
from rabbitry.provisioner.lock import StackLock, stacks_held
from rabbitry.provisioner.planfile import (
    BrokerIdentity,
    SavedPlan,
    SavedTarget,
    broker_identity,
)
from rabbitry.provisioner.planner import plan as plan_changes
from rabbitry.provisioner.plans import Action, Plan
from rabbitry.provisioner.refusals import self_harm
from rabbitry.provisioner.shovel_access import unreachable_shovels
from rabbitry.provisioner.state import BrokerState, Counter, read_state
from rabbitry.provisioner.target import Target
from rabbitry.provisioner.unreadable import refuse_unknown_owners, unknown_owner_warnings
from rabbitry.topology.primitives import ResourceKey, Topology
from rabbitry.topology.versions import Version, format_version

__all__ = [
    "DECLARING",
    "check_saved",
    "declared_by",
    "locked_plan",
    "plan_topology",
    "refuse_elsewhere",
    "upgrade_warnings",
]


@pauses_collector
def plan_topology(
    client: ManagementClient,
    topology: Topology,
    counter: Counter | None = None,
    target_version: Version | None = None,
    *,
    applying: bool = False,
    refused_ahead: Sequence[str] = (),
) -> Plan:
    """Check the broker can hold ``topology``, then plan against what it has; message counts
    of queues it would replace or delete come exact from ``counter`` (an ``AmqpQueueCounter``)
    when it reaches them, from the management statistics otherwise. With ``target_version``,
    the plan's warnings also say what the broker at that version would refuse or change (with
    ``refused_ahead``: what it would refuse that the topology no longer shows, a definitions
    file's entries left out for today's broker). ``applying``: the plan is for an apply, which
    ``refuse_unknown_owners`` may refuse."""
    report = check_capabilities(client, topology)
    _refuse(report, report.lacking(), "spec", "changed")
    state = _state_for(client, topology, topology.name, counter=counter)
    # what was read ahead and not taken (a vhost that does not exist yet) is of before any
    # change: a read after the apply must reach the broker
    client.forget_read_ahead()
    the_plan = plan_changes(topology, state)
    if applying:
        refuse_unknown_owners(the_plan, state)
    declared = declared_by(the_plan)
    _refuse(report, report.diagnosed(declared), "spec", "changed")
    harm = self_harm(the_plan, client.username)
    shovels = _unreachable_shovels(client, the_plan) + _missing_broker_exchanges(client, the_plan)
    if applying and shovels:
        raise PlanError(listed("nothing was applied:", shovels), shovels)
    harm += shovels
    version_warnings = (
        *report.kept(declared),
        *report.notes,
        *upgrade_warnings(report, target_version, refused_ahead),
    )
    version_warnings += unknown_owner_warnings(state)
    if harm or version_warnings:
        warnings = tuple(f"apply will refuse: {h}" for h in harm)
        the_plan = replace(the_plan, warnings=the_plan.warnings + warnings + version_warnings)
    migrated = [
        c.title for c in the_plan.changes if c.action is Action.REPLACE and c.kind == "queue"
    ]
    gaps = missing(migration_requirements(migrated), report.broker)
    if gaps:
        lacking = [Diagnostic("the broker cannot migrate these queues", gap) for gap in gaps]
        raise CapabilityError(listed("nothing was changed:", lacking), lacking)
    return the_plan


def _unreachable_shovels(client: ManagementClient, the_plan: Plan) -> list[Diagnostic]:
    """``shovel_access.unreachable_shovels`` for the user applying, whose permissions are read
    only when the plan declares a shovel."""
    user = client.username
    if not user or not any(
        c.kind == "parameter" and c.key.name == "shovel" and c.action in DECLARING
        for c in the_plan.changes
    ):
        return []
    permissions = client.get(f"/users/{quote(user, safe='')}/permissions")
    return unreachable_shovels(the_plan, user, (p["vhost"] for p in permissions))


def _missing_broker_exchanges(client: ManagementClient, the_plan: Plan) -> list[Diagnostic]:
    """``broker_exchanges.missing_exchanges``, asking the broker for each ``amq.*`` exchange
    a binding of the plan uses in a vhost that exists (one read each, only for those)."""

    def exists(vhost: str, name: str) -> bool:
        path = f"/exchanges/{quote(vhost, safe='')}/{quote(name, safe='')}"
        return client.get_optional(path) is not None

    return missing_exchanges(the_plan, exists)


def _refuse(report: CapabilityReport, problems: list[Diagnostic], what: str, done: str) -> None:
    if problems:
        head = (
            f"the broker (RabbitMQ {report.broker.version_text}) cannot hold this {what};"
            f" nothing was {done}:"
        )
        raise CapabilityError(listed(head, problems), problems)


def _state_for(
    client: ManagementClient, topology: Topology, stack: str, **options: Any
) -> BrokerState:
    """What the broker holds of everything ``topology`` declares (``read_state`` options)."""
    return read_state(
        client,
        stack=stack,
        vhosts=[v.name for v in topology.vhosts],
        users=[u.name for u in topology.users],
        global_parameters=[p.name for p in topology.global_parameters],
        **options,
    )


DECLARING = frozenset({Action.CREATE, Action.UPDATE, Action.REPLACE})


def declared_by(the_plan: Plan) -> Callable[[ResourceKey], bool]:
    """Whether the plan declares an object: the broker's version judges only those."""
    keys = {c.key for c in the_plan.changes if c.action in DECLARING}
    return keys.__contains__


def upgrade_warnings(
    report: CapabilityReport, target: Version | None, refused_ahead: Sequence[str] = ()
) -> list[str]:
    """What the spec would meet on the broker at ``target``: refusals first (``refused_ahead``,
    found before the topology was made, among them), then what the target ignores or changes
    (a new default crossed on the way up)."""
    if target is None:
        return []
    now = report.broker.version
    upgrading_from = now if now and now < target else None
    refused, noted = version_notices(report.needs, target, upgrading_from, "the target is")
    refused = [*refused_ahead, *refused]
    shown = format_version(target)
    if not refused and not noted:
        return [f"RabbitMQ {shown}: nothing in this spec is refused or changed"]
    return [f"RabbitMQ {shown} would refuse: {m}" for m in refused] + [
        f"RabbitMQ {shown}: {m}" for m in noted
    ]


def check_saved(client: ManagementClient, saved: SavedPlan) -> None:
    """Refuse, changing nothing, a saved plan this broker no longer matches: another cluster
    or management URL, objects it touches changed, appeared or vanished, another apply of the
    stack ran since, or the broker lost something the plan needs (a plugin, a feature flag)."""
    desired = saved.plan.desired
    if desired is None:
        raise PlanError("the saved plan holds no topology: make it again with this rabbitry")
    broker = refuse_elsewhere(client, saved)
    report = check_capabilities(client, desired)
    _refuse(report, report.lacking() + report.diagnosed(declared_by(saved.plan)), "plan", "applied")
    state = _state_for(client, desired, saved.plan.stack, with_stats=False)
    problems = saved.stale(state, broker)
    if problems:
        changed = [Diagnostic("the broker changed since the plan was made", p) for p in problems]
        raise PlanError(
            "the broker no longer matches what the plan was made against; nothing was"
            " applied:\n  " + "\n  ".join(problems) + "\nmake a new plan (rabbitry plan SPEC"
            " -o FILE), review it, and apply that",
            changed,
        )
    refuse_unknown_owners(saved.plan, state)


def refuse_elsewhere(client: ManagementClient, saved: SavedPlan) -> BrokerIdentity:
    """Refuse a saved plan on a broker other than the one it was made against; the broker."""
    broker = broker_identity(client)
    elsewhere = saved.elsewhere(broker)
    if elsewhere is not None:
        raise PlanError(f"nothing was applied: {elsewhere}")
    return broker


@contextlib.contextmanager
def locked_plan(
    target: Target | SavedTarget,
    stack: str,
    make_plan: Callable[[ManagementClient], Plan],
    lock_timeout: float = 0.0,
    take_over: Iterable[str] = (),
) -> Iterator[tuple[ManagementClient, Plan]]:
    """The plan of an apply of ``stack`` (``make_plan``) and a management client to apply it
    with, holding the stack's lock for the ``with`` block (``LockHeld`` after waiting
    ``lock_timeout`` seconds). When ``target`` claimed the lock while its spec loaded, the plan
    is made from what was read after the claim while the lock settles, and kept when the claim
    held; otherwise, or when someone else wrote the lock first (and may have changed the
    broker since), it is made again under the lock from fresh reads. The locks of the stacks
    in ``take_over`` are held too."""
    early = target.client if isinstance(target, Target) else None
    client = early or target.endpoints.management()
    if isinstance(target, SavedTarget):  # refused before its lock is written on that broker
        with contextlib.ExitStack() as closing:
            closing.callback(client.close)
            refuse_elsewhere(client, target.saved)
            closing.pop_all()
    lock = (target.lock if isinstance(target, Target) else None) or StackLock(client, stack)
    if take_over:
        # several locks are taken in name order (two runs never hold one each while waiting
        # for the other's): not from a claim made early
        lock.abandon()
        with client, stacks_held(client, {stack, *take_over}, lock_timeout):
            client.forget_read_ahead()
            yield client, make_plan(client)
        return
    with client:
        try:
            the_plan = make_plan(client) if lock.claimed else None
        except BaseException:
            lock.abandon()
            raise
        with lock.held(lock_timeout):
            if the_plan is None or not lock.early_claim_kept:
                client.forget_read_ahead()
                the_plan = make_plan(client)
            yield client, the_plan
