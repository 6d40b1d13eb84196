"""Plan and apply a spec from Python: what ``rabbitry plan`` and ``rabbitry apply`` call.

``plan(spec)`` reads the broker and returns the ``Plan`` (``save_to``: also saved for an apply
of exactly it); ``apply(spec)`` makes the broker match, with the same permissions the CLI
flags give (``allow_replace``, ``prune``, ``force``, ``allow_delay_relayout``, ``take_over``);
``spec`` may also be a definitions file (``.json``) and, for ``apply``, a saved plan. Both
check first that the broker can hold the spec (plugins, feature flags, version) and change
nothing when it cannot; ``targets`` (``queue/shop/orders.work``) limits the work to those
objects and what they need; ``report`` (a ``Reporter``) is told what happens as it goes.

The broker comes from the arguments, then ``RABBITRY_URL`` / ``RABBITRY_MANAGEMENT_URL``, then
the spec's ``broker:`` section, then localhost; the two URLs name one broker
(``management.endpoints``): a ``url`` with an environment's management URL of another host, or
a management URL guessed from an AMQP URL on a moved port, is refused. ``ca_file`` /
``insecure``: how to trust the management API's TLS certificate. The pytest plugin's fixtures
give both URLs (``amqp_url``, ``management_url_with_credentials``).

Light on purpose: the broker's reads and an apply's lock start (``ReadAhead``) before the spec
model and the planner are imported, so that the broker works while they load.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from rabbitry.errors import PlanError
from rabbitry.provisioner.apply_options import ApplyOptions, ApplyResult
from rabbitry.provisioner.read_ahead import Broker, ReadAhead
from rabbitry.provisioner.reporter import Reporter

if TYPE_CHECKING:
    from collections.abc import Callable

    from rabbitry.management.client import ManagementClient
    from rabbitry.provisioner.ownership import StacksOnBroker
    from rabbitry.provisioner.planfile import SavedTarget
    from rabbitry.provisioner.plans import Plan
    from rabbitry.provisioner.target import Target
    from rabbitry.topology.spec.model import Spec
    from rabbitry.topology.versions import Version

__all__ = ["SpecSource", "apply", "plan", "stacks"]


class SpecSource(TypedDict, total=False):
    """Where a spec and its broker come from: the keywords ``plan``, ``apply`` and the
    ``Reconciler`` share (each optional)."""

    url: str | None
    """AMQP URL(s) of the broker."""
    management_url: str | None
    """Management API URL(s), credentials as userinfo."""
    variables: Mapping[str, str] | None
    """Template variables (win over ``var_files``)."""
    var_files: Sequence[Path]
    """YAML files of template variables (later files win)."""
    ca_file: str | None
    """A CA bundle to trust for the management API's TLS certificate."""
    insecure: bool | None
    """Do not check that certificate (testing only)."""


TARGETS_NOTE = (
    "--target leaves the rest of the spec as it is: the broker may not match the spec"
    " afterwards; use it to repair, then plan without it"
)


def plan(
    spec: str | Path | Spec,
    *,
    target_version: str | Version | None = None,
    targets: Sequence[str] = (),
    save_to: Path | None = None,
    report: Reporter | None = None,
    **source: Unpack[SpecSource],
) -> Plan:
    """What applying ``spec`` would change on the broker; changes nothing. With
    ``target_version`` (``"4.3"``), the plan's warnings also tell what that version would
    refuse or change: what an upgrade would break. ``save_to``: the plan is also written
    there (mode 0600) for ``apply(save_to)`` to apply exactly it, once shown (``report``)."""
    from rabbitry.topology.versions import release

    upgrade = release(target_version) if isinstance(target_version, str) else target_version
    report = report or Reporter()
    broker = _broker(source)
    ahead = _read_ahead(spec, broker, lock=False)
    from rabbitry.files import write_private
    from rabbitry.provisioner.live_plan import plan_topology
    from rabbitry.provisioner.planfile import SavedPlan, broker_identity
    from rabbitry.provisioner.queue_counter import AmqpQueueCounter
    from rabbitry.provisioner.target import target_of
    from rabbitry.uri import mask_uri

    target = target_of(
        spec,
        variables=source.get("variables"),
        var_files=source.get("var_files", ()),
        on_warning=report.warning,
        ahead=ahead,
        **broker,
    )
    topology = target.topology_alone()
    refused = _refused_ahead(spec, upgrade)  # of the file, read once already: no broker read
    with (
        target.client or target.endpoints.management() as client,
        AmqpQueueCounter(target.endpoints) as counter,
        report.step("reading the broker's state"),
    ):
        made = plan_topology(client, topology, counter, upgrade, refused_ahead=refused)
        the_plan = _targeted(made, targets, report)
        made_against = broker_identity(client) if save_to is not None else None
    shown = mask_uri(target.endpoints.management_url)
    report.planned(the_plan, shown)
    if save_to is not None and made_against is not None:
        write_private(save_to, SavedPlan.of(the_plan, made_against, shown).to_text())
    return the_plan


def _refused_ahead(spec: str | Path | Spec, upgrade: Version | None) -> list[str]:
    """What the version a plan looks ahead to would refuse of a definitions file that the
    topology made for today's broker no longer shows (an entry left out)."""
    if upgrade is None or not isinstance(spec, str | Path):
        return []
    from rabbitry.provisioner.definitions import refused_at
    from rabbitry.provisioner.early import definitions_in

    data = definitions_in(Path(spec))
    return refused_at(data, upgrade, str(spec)) if data is not None else []


def apply(
    spec: str | Path | Spec,
    *,
    allow_replace: bool = False,
    prune: bool = False,
    force: bool = False,
    allow_delay_relayout: bool = False,
    take_over: Iterable[str] = (),
    targets: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    lock_timeout: float = 0.0,
    report: Reporter | None = None,
    **source: Unpack[SpecSource],
) -> ApplyResult:
    """Make the broker match ``spec``, or apply the plan saved at ``spec`` exactly (after
    checking the broker still matches what it was made against); raises ``PlanError``
    (changing nothing) when the plan needs a replace, prune or force the arguments do not
    allow, lays a delay's levels out anew while messages wait in them
    (``allow_delay_relayout``), or acts on objects another stack owns that ``take_over`` does
    not name, and ``LockHeld`` when another run applies the same stack, or one named in
    ``take_over`` (after waiting up to ``lock_timeout`` seconds). ``progress`` (else
    ``report.progress``) gets a line per step; the result holds the plan applied."""
    report = report or Reporter()
    options = ApplyOptions(
        allow_replace=allow_replace,
        prune=prune,
        force=force,
        take_over=frozenset(take_over),
        allow_delay_relayout=allow_delay_relayout,
    )
    broker = _broker(source)
    # the lock's claim settles while the spec model and the provisioner load
    ahead = _read_ahead(spec, broker, lock=True)
    try:
        variables, var_files = source.get("variables"), source.get("var_files", ())
        target = _apply_target(spec, ahead, broker, variables, var_files, targets, report)
        return _apply_to(target, options, targets, lock_timeout, report, progress)
    finally:
        if ahead.lock is not None:
            ahead.lock.abandon()  # a run stopped before it acquired the lock it claimed


def _broker(source: SpecSource) -> Broker:
    """The broker as the caller names it (the spec may name its own)."""
    return Broker(
        url=source.get("url"),
        management_url=source.get("management_url"),
        ca_file=source.get("ca_file"),
        insecure=source.get("insecure"),
    )


def _read_ahead(spec: str | Path | Spec, broker: Broker, *, lock: bool) -> ReadAhead:
    """The head start of a plan or an apply: from a spec file's text when it is one."""
    if isinstance(spec, str | os.PathLike):
        return ReadAhead.before_loading(Path(spec), lock=lock, **broker)
    return ReadAhead(lock=lock, **broker)


def _apply_target(
    spec: str | Path | Spec,
    ahead: ReadAhead,
    broker: Broker,
    variables: Mapping[str, str] | None,
    var_files: Sequence[Path],
    targets: Sequence[str],
    report: Reporter,
) -> Target | SavedTarget:
    """The loaded, checked spec and its broker, or the plan saved at ``spec`` and its broker."""
    from rabbitry.provisioner.planfile import SavedTarget, is_plan_file

    if isinstance(spec, str | os.PathLike) and is_plan_file(Path(spec)):
        ahead.close()  # a saved plan names no stack: nothing was started for it
        if variables or var_files:
            raise PlanError(
                f"{spec} is a saved plan: its spec was rendered when the plan was made, so"
                " variables and variable files do not apply"
            )
        if targets:
            raise PlanError("targets do not apply to a saved plan: make the plan with them")
        return SavedTarget.read(Path(spec), broker)
    from rabbitry.provisioner.target import target_of  # the spec model loads only here

    return target_of(
        spec, variables=variables, var_files=var_files, on_warning=report.warning, ahead=ahead,
        **broker,
    )  # fmt: skip


def _apply_to(
    target: Target | SavedTarget,
    options: ApplyOptions,
    targets: Sequence[str],
    lock_timeout: float,
    report: Reporter,
    progress: Callable[[str], None] | None,
) -> ApplyResult:
    from rabbitry.provisioner.applier import apply_plan
    from rabbitry.provisioner.live_plan import check_saved, locked_plan, plan_topology
    from rabbitry.provisioner.planfile import SavedTarget
    from rabbitry.provisioner.queue_counter import AmqpQueueCounter
    from rabbitry.provisioner.refusals import refuse
    from rabbitry.uri import mask_uri

    saved = target.saved if isinstance(target, SavedTarget) else None
    if saved is not None:
        stack = saved.plan.stack
    else:
        assert not isinstance(target, SavedTarget)
        topology = target.topology_alone()
        stack = topology.name

    def make_plan(client: ManagementClient) -> Plan:
        with report.step("reading the broker's state"):
            if saved is not None:
                check_saved(client, saved)
                return saved.plan
            made = plan_topology(client, topology, counter, applying=True)
            return _targeted(made, targets, report)

    with (
        AmqpQueueCounter(target.endpoints) as counter,
        locked_plan(target, stack, make_plan, lock_timeout, options.take_over) as (
            client,
            the_plan,
        ),
    ):
        report.planned(the_plan, mask_uri(target.endpoints.management_url))
        if not the_plan.has_changes:
            return ApplyResult(plan=the_plan)
        refuse(the_plan, options, client.username)
        if saved is None and not report.confirm(the_plan):
            return ApplyResult(plan=the_plan)
        with report.counting():
            return apply_plan(
                client,
                the_plan,
                options,
                counter,
                progress=progress or report.progress,
                counted=report.counted,
            )


def _targeted(the_plan: Plan, targets: Sequence[str], report: Reporter) -> Plan:
    if not targets:
        return the_plan
    from rabbitry.provisioner.targeting import targeted

    report.note(TARGETS_NOTE)
    return targeted(the_plan, targets)


def stacks(
    *,
    url: str | None = None,
    management_url: str | None = None,
    vhosts: Iterable[str] = (),
) -> StacksOnBroker:
    """The stacks on the broker (only those owning something in ``vhosts``, when given) with
    what each owns, read from their ownership records in one request."""
    from rabbitry.errors import RecordUnreadable
    from rabbitry.management.endpoints import resolve_endpoints
    from rabbitry.provisioner.ownership import stacks_on
    from rabbitry.provisioner.state import read_records

    endpoints = resolve_endpoints(url, management_url)
    with endpoints.management() as client:
        unreadable: dict[str, RecordUnreadable] = {}
        return stacks_on(read_records(client, unreadable), vhosts, unreadable)
