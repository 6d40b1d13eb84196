"""Carry out a ``Plan`` against the management API, in dependency order.

- Everything the flags do not allow is refused before the first request, so a refused apply
  changes nothing.
- The ownership record is extended with the keys about to be created *before* any change, so a
  run that dies half-way still owns what it made; the next plan repairs the rest.
- Creations go through one definitions import per vhost (the broker's own bulk path, the fastest
  there is); since that import silently skips what it cannot create, the created objects are
  read back and checked. Updates and deletions are one request per object.
- A change to an object another stack owns is refused unless ``take_over`` names that stack;
  then the object leaves that stack's record before any change, and joins this one's.
- Queues are only deleted (prune or replace) when empty, unless ``force``; classic queues use the
  broker's atomic ``if-empty`` delete, quorum and stream queues (which do not support it) an exact
  AMQP count.

One module of about 500 lines on purpose: ``Applier`` is one run's steps in the order the broker
needs them (ownership first, creations, read-back, updates, migrations, deletions last), and
that order is easiest to check when it reads top to bottom in one place.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from rabbitry.errors import ApplyError, BrokerError, NoAnswer, PlanError
from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.migration import (
    STEPS,
    MigrationState,
    Migrator,
    pending_migrations,
    queue_bindings,
)
from rabbitry.provisioner.ownership import PENDING, OwnershipRecord, record_name
from rabbitry.provisioner.planner import Action, Change, Plan, managed_after
from rabbitry.provisioner.relayout import relayout_refusals
from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology.primitives import (
    Binding,
    Exchange,
    GlobalParameter,
    OperatorPolicy,
    Parameter,
    Permission,
    Policy,
    Primitive,
    Queue,
    QueueType,
    ResourceKey,
    TopicPermission,
    User,
    Vhost,
)

MessageCounter = Callable[[str, str], tuple[int, int]]
"""(vhost, queue) -> (messages, consumers), exact; used before deleting quorum/stream queues."""


@dataclass(frozen=True)
class ApplyOptions:
    """What the user allowed on the command line."""

    allow_replace: bool = False
    prune: bool = False
    force: bool = False
    take_over: frozenset[str] = frozenset()
    """Stacks whose objects this apply may act on: they move to this apply's stack."""
    allow_delay_relayout: bool = False
    """Lay a delay's levels out anew although messages wait in them (they are given up)."""
    import_chunk: int = 2000
    """Objects per definitions import. A small broker creates about 500 objects a second from
    an import and answers only when done: chunks of 2,000 answer within seconds, so no HTTP
    timeout is reached at any size, and a run that dies between chunks leaves only whole
    chunks behind (the ownership record already names the rest; the next apply makes them).
    Larger chunks cost more than they save (50,000 objects on RabbitMQ 4.0, 2 cores: 95.8 s in
    chunks of 2,000, 100.7 s of 5,000, 115.0 s of 10,000)."""
    import_whole: int = 6000
    """A vhost with at most this many creations takes one import: each import ends waiting for
    its slowest object, and for 5,104 objects three imports took about a second more than one
    (20.1-21.2 s against 18.7-20.5 s)."""
    declare_apart: int = 8
    """Quorum and stream queues to create are declared by this many concurrent PUTs, between
    the imports of everything else and of the bindings, instead of inside an import: the
    broker's import declares its queues a few at a time (a worker pool the size of its
    schedulers), and a quorum queue's declaration waits mostly on its log's first writes,
    which concurrent declarations share. 0 or 1: everything goes through the imports."""
    import_timeout: float | None = None
    """HTTP timeout of each import (None: sized to the work, see ``import_timeout``). An import
    that outlives it is not a failure: the broker goes on, and the apply waits for its objects
    while they keep appearing."""


@dataclass
class ApplyResult:
    """What an apply did; ``skipped`` lists deletions left for ``--prune``."""

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.done)


VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


def self_harm(plan: Plan, connected: str | None, prune: bool = True) -> list[str]:
    """What the plan would do to the user rabbitry is connected as: delete it, take its
    administrator tag, change its password or remove its permissions in a vhost (deletions
    only with ``prune``). Apply refuses each (a run that locks itself out stops half-way, and
    so does every run after it); the plan says so before."""
    if not connected:
        return []
    problems = []
    for change in plan.changes:
        if change.action is Action.DELETE and not prune:
            continue
        kind, _, *rest = change.key
        if kind == "user" and rest == [connected]:
            was, will = change.observed, change.desired
            if change.action is Action.DELETE:
                problems.append(f"it deletes user {connected!r}")
            elif isinstance(was, User) and isinstance(will, User):
                if "administrator" in was.tags and "administrator" not in will.tags:
                    problems.append(f"it takes the administrator tag from user {connected!r}")
                if {"password differs", "password_hash differs"} & set(change.reasons):
                    problems.append(f"it changes the password of user {connected!r}")
        elif kind == "permission" and rest == [connected] and change.action is Action.DELETE:
            problems.append(f"it removes the permissions of user {connected!r} in {change.vhost}")
    return [
        f"{problem}, the user this apply is connected as: apply that change as another"
        " administrator (--management-url with other credentials), or leave it out of the spec"
        for problem in problems
    ]


OWNED_VERBS = {
    Action.CREATE: "declare it again",
    Action.UPDATE: "change it",
    Action.REPLACE: "delete and declare it again",
    Action.DELETE: "delete it",
    Action.ADOPT: "adopt it",
    Action.RETAIN: "give it up",
}


def _runs(change: Change, options: ApplyOptions) -> bool:
    """Whether apply carries the change out (deletions only with prune)."""
    return change.action is not Action.DELETE or options.prune


def ownership_refusals(plan: Plan, options: ApplyOptions) -> list[str]:
    """Changes this apply would make to objects other stacks own, without ``take_over``."""
    problems = []
    for change in plan.changes:
        others = [s for s in change.owners if s not in options.take_over]
        if not others or not _runs(change, options):
            continue
        names = " and ".join(repr(s) for s in others)
        flags = " ".join(f"--take-over {s}" for s in others)
        problems.append(
            f"{change.title} is owned by stack {names} (its ownership record lists it), and"
            f" this apply would {OWNED_VERBS[change.action]}: leave it out of stack"
            f" {plan.stack!r}'s spec, or move it to stack {plan.stack!r} with apply {flags}"
        )
    return problems


def taken_over(plan: Plan, options: ApplyOptions) -> dict[str, set[ResourceKey]]:
    """Stack -> the keys this apply takes from it (changes it carries out on them)."""
    taken: dict[str, set[ResourceKey]] = {}
    for change in plan.changes:
        if _runs(change, options):
            for stack in change.owners:
                if stack in options.take_over:
                    taken.setdefault(stack, set()).add(change.key)
    return taken


def protection_refusals(plan: Plan, options: ApplyOptions) -> list[str]:
    """The deletes and replaces of ``protect: true`` objects this apply would carry out: no
    flag allows them (``provisioner.protection``)."""
    return [
        f"{change.title} is protected (protect: true) and this apply would"
        f" {'delete' if change.action is Action.DELETE else 'replace'} it: "
        + "; ".join(r for r in change.reasons if r.startswith("protected"))
        for change in plan.changes
        if change.protected and _runs(change, options)
    ]


def refusals(plan: Plan, options: ApplyOptions, connected: str | None = None) -> list[str]:
    """Every reason the plan cannot run with these options, as user ``connected`` (the
    management API's); empty means go."""
    problems = protection_refusals(plan, options)
    problems += self_harm(plan, connected, options.prune)
    problems += ownership_refusals(plan, options)
    problems += relayout_refusals(
        plan.relayouts, prune=options.prune, allow_delay_relayout=options.allow_delay_relayout
    )
    for change in plan.changes:
        if change.protected:
            continue  # refused above, whatever else is said of it
        if change.action is Action.REPLACE:
            why = "; ".join(change.reasons)
            if not options.allow_replace:
                problems.append(
                    f"{change.title} cannot change in place ({why}): it must be deleted and"
                    " declared again; run apply with --allow-replace to do that"
                )
                continue
            # Queue replaces are migrations: messages are moved, not lost. Consumers would be
            # cancelled when the original is deleted, so they need a quiet window or --force.
            if change.kind == "queue" and change.consumers and not options.force:
                problems.append(
                    f"{change.title} has {change.consumers} consumer(s) that its migration would"
                    " cancel; stop them first (a quiet window) or add --force"
                )
            if change.kind == "queue" and change.count_note:
                # found now, not after the migration's first step
                problems.append(
                    f"migrating {change.title} needs exact message counts over AMQP, which the"
                    f" plan could not get ({change.count_note}): fix --url or RABBITRY_URL"
                )
        prune_queue = change.action is Action.DELETE and options.prune and change.kind == "queue"
        if prune_queue and change.count_note and not options.force:
            problems.append(
                f"pruning {change.title} needs its exact message count over AMQP, which the plan"
                f" could not get ({change.count_note}): fix --url or RABBITRY_URL, or add --force"
            )
        if prune_queue and change.messages and not options.force:
            problems.append(
                f"{change.title} holds {change.messages} message(s): prune refuses to delete"
                " a queue that is not empty; drain it first, or add --force"
            )
    return problems


def _exchange_doc(e: Exchange) -> dict[str, Any]:
    return {
        "name": e.name,
        "type": str(e.type),
        "durable": e.durable,
        "auto_delete": e.auto_delete,
        "internal": e.internal,
        "arguments": e.arguments,
    }


def _queue_doc(queue: Queue) -> dict[str, Any]:
    return {
        "name": queue.name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "arguments": queue.wire_arguments(),
    }


def _binding_doc(b: Binding) -> dict[str, Any]:
    return {
        "source": b.source,
        "destination": b.destination,
        "destination_type": b.destination_type.value,
        "routing_key": b.routing_key,
        "arguments": b.arguments,
    }


def _policy_body(p: Policy) -> dict[str, Any]:
    return {
        "pattern": p.pattern,
        "apply-to": p.apply_to.value,
        "priority": p.priority,
        "definition": p.definition,
    }


def definitions_for(resources: Iterable[Primitive]) -> dict[str, list[dict[str, Any]]]:
    """A per-vhost definitions document creating exactly these objects."""
    doc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in resources:
        if isinstance(r, Exchange):
            doc["exchanges"].append(_exchange_doc(r))
        elif isinstance(r, Queue):
            doc["queues"].append(_queue_doc(r))
        elif isinstance(r, Binding):
            doc["bindings"].append(_binding_doc(r))
        elif isinstance(r, OperatorPolicy):
            raise TypeError("operator policies are not part of a vhost definitions import")
        elif isinstance(r, Policy):
            doc["policies"].append({"name": r.name, **_policy_body(r)})
        elif isinstance(r, Parameter):
            doc["parameters"].append({"component": r.component, "name": r.name, "value": r.value})
        else:
            raise TypeError(f"{type(r).__name__} is not part of a vhost definitions import")
    return dict(doc)


def _declared_apart(change: Change) -> bool:
    """A creation that ``ApplyOptions.declare_apart`` takes out of the imports."""
    queue = change.desired
    return (
        change.action is Action.CREATE
        and isinstance(queue, Queue)
        and queue.type in (QueueType.QUORUM, QueueType.STREAM)
    )


def _import_rank(change: Change) -> int:
    """The broker's own import order. What a chunk refers to must come in an earlier chunk or
    the same one (exchanges and queues before the bindings between them), and policies come
    before the queues and exchanges: a policy made in a vhost that already holds them is
    matched against every one (at 21,000 queues, several seconds a policy), one made first
    costs nothing."""
    resource = change.desired
    if isinstance(resource, Parameter):
        return 0
    if isinstance(resource, Policy):
        return 1
    return 3 if isinstance(resource, Binding) else 2


def import_chunks(changes: list[Change], size: int, whole: int = 0) -> list[list[Change]]:
    """The creations of one vhost in chunks of at most ``size`` (in one when there are at most
    ``whole``), each importable once the chunks before it are in (plan order is kept within
    the exchanges-and-queues and the bindings)."""
    if size < 1:
        raise ValueError(f"import_chunk must be at least 1, got {size}")
    ordered = sorted(changes, key=_import_rank)
    if len(ordered) <= whole:
        return [ordered] if ordered else []
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def import_timeout(objects: int, previous: float | None = None) -> float:
    """HTTP timeout of one import. The broker answers when every object is made, and it slows
    down as a vhost fills (quorum queues most: at 16,000 objects in, a chunk of 2,000 took four
    times as long as the first): four times the previous chunk's time, never below two minutes,
    and for a first chunk 50 ms an object if that is more."""
    floor = max(120.0, 0.05 * objects)
    return floor if previous is None else max(floor, 4 * previous)


IMPORT_STALL = 180.0
"""Seconds an import that outlived its HTTP timeout may go without making one more object
before the apply sends its missing objects again (once), then gives up."""

IMPORT_POLL_MAX = 5.0
"""Longest pause between two reads of a vhost while waiting on such an import."""

DONE_SHOWN = 20
"""Lines of work done that an error message lists (all of it is in ``ApplyError.done``)."""

PUT_FIRST = frozenset({"vhost", "user", "permission"})
"""Kinds put one by one before the imports: the objects in a vhost may need them. Topic
permissions come after the imports: RabbitMQ 4.3 refuses one for an exchange that does not
exist yet (HTTP 400 no_such_exchange), and the exchange may be in the same plan."""

BATCHED = (Exchange, Queue, Binding, Parameter)
"""Kinds created through the definitions import (policies too, but not operator policies)."""


class Applier:
    """Runs one plan; keeps a log of what it did so a failure can say so."""

    def __init__(
        self,
        client: ManagementClient,
        plan: Plan,
        count_messages: MessageCounter | None = None,
        progress: Callable[[str], None] | None = None,
        before_step: Callable[[str], None] = lambda _step: None,
        counted: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.client = client
        self.plan = plan
        self.count_messages = count_messages
        self.progress = progress or (lambda _line: None)
        self.counted = counted or (lambda _what, _done, _total: None)
        """Counted work as it goes: (what, done, total), e.g. objects created in a vhost."""
        self.before_step = before_step
        """Called before each migration step: lets tests stop a run at any step."""
        self.result = ApplyResult()
        self.deleted: set[ResourceKey] = set()
        self.operations: list[dict[str, Any]] = list(plan.record.operations)
        self.managed: dict[ResourceKey, str] = dict(plan.record.managed)

    def _limits(self, path: str, limits: dict[str, int], known: tuple[str, ...]) -> None:
        """Set the limits given, lift the others (a limit left out of the spec is none)."""
        for name in known:
            if name in limits:
                self.client.put(f"{path}/{name}", {"value": limits[name]})
            else:
                self.client.delete(f"{path}/{name}")

    def _protection(self, vhost: Vhost, observed: Primitive | None) -> None:
        """Deletion protection has its own endpoint (RabbitMQ 4.0.6+): set or lifted only when
        it differs. A broker without it answers 404 or 405 (the plan warned of it): no change."""
        had = getattr(observed, "protected_from_deletion", False)
        if had is None or bool(had) == bool(vhost.protected_from_deletion):
            return
        path = f"/vhosts/{q(vhost.name)}/deletion/protection"
        if vhost.protected_from_deletion:
            self.client.request("POST", path, allow=(404, 405))
        else:
            self.client.request("DELETE", path, allow=(404, 405))

    def _done(self, line: str, show: bool = True) -> None:
        self.result.done.append(line)
        if show:
            self.progress(line)

    # -- one object at a time ------------------------------------------------------------------

    def put(self, vhost: str, resource: Primitive, observed: Primitive | None = None) -> None:
        """Create or update ``resource``; ``observed``: what the broker has of it, if anything
        (limits are touched only where either side has some)."""
        c, v = self.client, q(vhost)
        had_limits = bool(getattr(observed, "limits", None))
        if isinstance(resource, Vhost):
            body: dict[str, Any] = {
                "description": resource.description,
                "tags": ",".join(resource.tags),
            }
            # Always explicit: unset means classic here, whatever the node's own default is.
            body["default_queue_type"] = (resource.default_queue_type or QueueType.CLASSIC).value
            c.put(f"/vhosts/{q(resource.name)}", body)
            self._protection(resource, observed)
            if resource.limits or had_limits:
                self._limits(f"/vhost-limits/{q(resource.name)}", resource.limits, VHOST_LIMITS)
        elif isinstance(resource, User):
            body = {"tags": ",".join(resource.tags)}
            if resource.password is not None:
                body["password"] = resource.password.get_secret_value()
            elif resource.password_hash is not None:
                body["password_hash"] = resource.password_hash
                body["hashing_algorithm"] = resource.hashing_algorithm
            else:
                body["password_hash"] = ""  # no password: the user can only use other mechanisms
            c.put(f"/users/{q(resource.name)}", body)
            if resource.limits or had_limits:
                self._limits(f"/user-limits/{q(resource.name)}", resource.limits, USER_LIMITS)
        elif isinstance(resource, Permission):
            c.put(
                f"/permissions/{v}/{q(resource.user)}",
                {"configure": resource.configure, "write": resource.write, "read": resource.read},
            )
        elif isinstance(resource, TopicPermission):
            c.put(
                f"/topic-permissions/{v}/{q(resource.user)}",
                {"exchange": resource.exchange, "write": resource.write, "read": resource.read},
            )
        elif isinstance(resource, OperatorPolicy):
            c.put(f"/operator-policies/{v}/{q(resource.name)}", _policy_body(resource))
        elif isinstance(resource, Policy):
            c.put(f"/policies/{v}/{q(resource.name)}", _policy_body(resource))
        elif isinstance(resource, Parameter):
            c.put(
                f"/parameters/{q(resource.component)}/{v}/{q(resource.name)}",
                {
                    "component": resource.component,
                    "vhost": vhost,
                    "name": resource.name,
                    "value": resource.value,
                },
            )
        elif isinstance(resource, GlobalParameter):
            c.put_global_parameter(resource.name, resource.value)
        elif isinstance(resource, Exchange):
            body = _exchange_doc(resource)
            del body["name"]
            c.put(f"/exchanges/{v}/{q(resource.name)}", body)
        elif isinstance(resource, Queue):
            body = _queue_doc(resource)
            del body["name"]
            c.put(f"/queues/{v}/{q(resource.name)}", body)
        elif isinstance(resource, Binding):
            kind = "q" if resource.destination_type.value == "queue" else "e"
            c.request(
                "POST",
                f"/bindings/{v}/e/{q(resource.source)}/{kind}/{q(resource.destination)}",
                json={"routing_key": resource.routing_key, "arguments": resource.arguments},
            )
        else:
            raise TypeError(f"cannot apply {type(resource).__name__}")

    def delete(self, change: Change, force: bool) -> None:
        c, vhost = self.client, change.vhost
        v = q(vhost)
        observed = change.observed
        if isinstance(observed, Vhost):
            c.delete(f"/vhosts/{q(observed.name)}")
        elif isinstance(observed, User):
            c.delete(f"/users/{q(observed.name)}")
        elif isinstance(observed, Permission):
            c.delete(f"/permissions/{v}/{q(observed.user)}")
        elif isinstance(observed, TopicPermission):
            # The API deletes all of a user's topic permissions in a vhost at once; put back
            # the ones for other exchanges.
            others = [
                p
                for p in c.topic_permissions(vhost)
                if p["user"] == observed.user and p["exchange"] != observed.exchange
            ]
            c.delete(f"/topic-permissions/{v}/{q(observed.user)}")
            for p in others:
                c.put(
                    f"/topic-permissions/{v}/{q(observed.user)}",
                    {k: p[k] for k in ("exchange", "write", "read")},
                )
        elif isinstance(observed, OperatorPolicy):
            c.delete(f"/operator-policies/{v}/{q(observed.name)}")
        elif isinstance(observed, Policy):
            c.delete(f"/policies/{v}/{q(observed.name)}")
        elif isinstance(observed, Parameter):
            c.delete(f"/parameters/{q(observed.component)}/{v}/{q(observed.name)}")
        elif isinstance(observed, GlobalParameter):
            c.delete(f"/global-parameters/{q(observed.name)}")
        elif isinstance(observed, Exchange):
            c.delete(f"/exchanges/{v}/{q(observed.name)}")
        elif isinstance(observed, Queue):
            self._delete_queue(vhost, observed, force)
        elif isinstance(observed, Binding):
            self._delete_binding(vhost, observed)
        else:
            raise TypeError(f"cannot delete {type(observed).__name__}")

    def _delete_queue(self, vhost: str, queue: Queue, force: bool) -> None:
        path = f"/queues/{q(vhost)}/{q(queue.name)}"
        if force:
            self.client.delete(path)
            return
        if queue.type is QueueType.CLASSIC:
            # Atomic on the broker: refuses if a message arrived since the plan was made.
            response = self.client.request(
                "DELETE", path, params={"if-empty": "true"}, allow=(400, 404)
            )
            if response.status_code == 400:
                raise BrokerError(
                    f"queue {vhost}/{queue.name} is not empty (a message arrived after the plan);"
                    " nothing was deleted: drain it or use --force"
                )
            return
        if self.count_messages is None:
            raise BrokerError(
                f"queue {vhost}/{queue.name} is a {queue.type.value} queue, which the broker cannot"
                " delete only-if-empty; give an AMQP URL (--url or RABBITRY_URL) so rabbitry can"
                " count its messages exactly, or use --force"
            )
        messages, _consumers = self.count_messages(vhost, queue.name)
        if messages:
            raise BrokerError(
                f"queue {vhost}/{queue.name} holds {messages} message(s); nothing was deleted:"
                " drain it or use --force"
            )
        self.client.delete(path)

    def _delete_binding(self, vhost: str, binding: Binding) -> None:
        kind = "q" if binding.destination_type.value == "queue" else "e"
        base = f"/bindings/{q(vhost)}/e/{q(binding.source)}/{kind}/{q(binding.destination)}"
        want = Binding(
            source=binding.source,
            destination=binding.destination,
            destination_type=binding.destination_type,
            routing_key=binding.routing_key,
            arguments=binding.arguments,
        ).identity()
        for item in self.client.get(base):
            found = Binding(
                source=item["source"],
                destination=item["destination"],
                destination_type=item["destination_type"],
                routing_key=item.get("routing_key", ""),
                arguments=item.get("arguments") or {},
            ).identity()
            if found == want:
                # Bindings with arguments are addressed by the broker's properties key (a hash
                # of the arguments), never by the routing key alone.
                self.client.delete(f"{base}/{q(item['properties_key'])}")
                return

    # -- the whole plan ------------------------------------------------------------------------

    def run(self, options: ApplyOptions) -> ApplyResult:
        plan = self.plan
        problems = refusals(plan, options, self.client.username)
        if problems:
            raise PlanError("nothing was applied:\n  " + "\n  ".join(problems))
        record = plan.record
        deletions = plan.by_action(Action.DELETE)
        if not options.prune:
            self.result.skipped = [c.title for c in deletions]
            deletions = []
        todo = [c for c in plan.changes if c.action not in (Action.DELETE, Action.RETAIN)]
        retained = plan.by_action(Action.RETAIN)
        if not todo and not deletions and not retained:
            return self.result

        new_keys = {k: PENDING for k in plan.desired_digests if k not in record.managed}
        self.managed = {**new_keys, **record.managed}
        if new_keys:
            # Intent first: whatever this run creates is owned even if it dies half-way.
            self._write_record(self.managed)
        for stack, keys in sorted(taken_over(plan, options).items()):
            self._take_over(stack, keys)
        try:
            self._run(todo, deletions, options)
            still_present = {k for k in record.managed if k not in self.deleted}
            self._write_record(managed_after(plan, self.deleted, still_present))
            for change in retained:
                self._done(f"retained {change.title} (left on the broker, no longer owned)")
        except BrokerError as exc:
            done = self.result.done
            shown = done[:DONE_SHOWN] or ["(nothing)"]
            more = f"\n  ... and {len(done) - DONE_SHOWN} more" if len(done) > DONE_SHOWN else ""
            raise ApplyError(
                f"apply stopped: {exc}\nrun apply again to converge; done before the failure"
                f" ({len(done)} change(s)):"
                + "".join(f"\n  {line}" for line in shown)
                + more
                + f"\nnot done: the plan's changes after those ({len(todo) + len(deletions)}"
                " planned in all)",
                done,
            ) from None
        return self.result

    def _write_record(self, managed: dict[ResourceKey, str]) -> None:
        # One parameter holds both: the managed keys and the operations in flight (migrations).
        guards = {k: g for k, g in self.plan.guards.items() if k in managed}
        record = OwnershipRecord(self.plan.stack, managed, tuple(self.operations), guards)
        self.client.put_global_parameter(record_name(self.plan.stack), record.to_value())

    def _take_over(self, stack: str, keys: set[ResourceKey]) -> None:
        """Strike ``keys`` from ``stack``'s record (read afresh: it may have changed since the
        plan), after this stack recorded them: no moment where neither owns them."""
        name = record_name(stack)
        record = OwnershipRecord.from_value(stack, self.client.global_parameter(name))
        kept = {k: d for k, d in record.managed.items() if k not in keys}
        if len(kept) != len(record.managed):
            self.client.put_global_parameter(name, record.replace_managed(kept).to_value())
        self._done(f"took {len(keys)} object(s) over from stack {stack!r}")

    def _save_migration(self, key: tuple[str, str], state: MigrationState | None) -> None:
        """Record a migration's step before it runs, so an interrupted one is resumed."""
        kept = [
            op
            for op in self.operations
            if MigrationState.from_value(op) is None or (op["vhost"], op["queue"]) != key
        ]
        self.operations = kept + ([state.to_value()] if state is not None else [])
        self._write_record(self.managed)

    def _migrate(self, change: Change) -> None:
        queue = change.desired
        assert isinstance(queue, Queue)
        if self.count_messages is None:
            raise BrokerError(
                f"migrating {change.title} needs exact message counts over AMQP: give --url or"
                " RABBITRY_URL"
            )
        desired_vhost = self.plan.desired.vhost(change.vhost) if self.plan.desired else None
        bindings = desired_vhost.bindings if desired_vhost is not None else ()
        pending = pending_migrations(self.operations).get((change.vhost, queue.name))
        migrator = Migrator(
            self.client,
            self.count_messages,
            save_step=lambda state: self._save_migration((change.vhost, queue.name), state),
            progress=self.progress,
            before_step=self.before_step,
        )
        migrator.run(
            change.vhost,
            queue,
            queue_bindings(bindings, queue.name),
            start=pending.step if pending else STEPS[0],
        )
        self._done(f"migrated {change.title}", show=False)

    def _run(self, todo: list[Change], deletions: list[Change], options: ApplyOptions) -> None:
        for change in todo:
            if change.action is Action.REPLACE and change.kind != "queue":
                self.delete(change, force=options.force)
                self._done(f"deleted {change.title} (to declare it again)")
        migrations = [c for c in todo if c.action is Action.REPLACE and c.kind == "queue"]
        todo = [c for c in todo if c not in migrations]

        batches: dict[str, list[Change]] = defaultdict(list)
        for change in todo:
            resource = change.desired
            assert resource is not None
            batched = change.action in (Action.CREATE, Action.REPLACE) and isinstance(
                resource, BATCHED
            )
            batched = batched or (
                change.action is Action.CREATE
                and isinstance(resource, Policy)
                and not isinstance(resource, OperatorPolicy)
            )
            if isinstance(resource, Parameter) and resource.component == "shovel":
                # made once the imports are in: a shovel started before its queues declares
                # them itself, without their arguments (an import makes parameters first)
                batched = False
            if batched:
                batches[change.vhost].append(change)
            elif change.action is not Action.ADOPT and change.kind in PUT_FIRST:
                self.put(change.vhost, resource, change.observed)
                self._done(f"{change.action.value}d {change.title}")

        for vhost, changes in batches.items():
            apart: list[Change] = []
            before: list[Change] = []
            after: list[Change] = []
            for change in changes:
                if options.declare_apart > 1 and _declared_apart(change):
                    apart.append(change)
                else:
                    (after if isinstance(change.desired, Binding) else before).append(change)
            steps: list[list[Change] | None]  # None: the queues declared apart
            if apart:
                steps = [*import_chunks(before, options.import_chunk, options.import_whole), None]
                steps += import_chunks(after, options.import_chunk, options.import_whole)
            else:
                steps = [*import_chunks(changes, options.import_chunk, options.import_whole)]
            imports = sum(1 for step in steps if step is not None)
            made, took, number = 0, None, 0
            what = f"creating objects in {vhost}"
            self.counted(what, 0, len(changes))
            for chunk in steps:
                if chunk is None:
                    made = self._declare_apart(vhost, apart, options, made, len(changes))
                    continue
                number += 1
                started = time.monotonic()
                timeout = options.import_timeout or import_timeout(len(chunk), took)
                try:
                    self._import(vhost, chunk, timeout)
                except NoAnswer:
                    self._await_import(vhost, chunk, f"import {number} of {imports}", timeout)
                took = time.monotonic() - started
                made += len(chunk)
                # The plan listed each object already: one progress line per import is enough.
                of = f"import {number} of {imports}" if imports > 1 else "one import"
                self.progress(f"created {made} of {len(changes)} object(s) in {vhost} ({of})")
                self.counted(what, made, len(changes))
                for change in chunk:
                    verb = "created" if change.action is Action.CREATE else "declared again"
                    self._done(f"{verb} {change.title}", show=False)
            # one read-back per vhost, not per chunk: reading a large vhost costs seconds
            self._verify_created(vhost, changes)

        imported = {c.key for changes in batches.values() for c in changes}
        for change in todo:
            if change.key in imported or change.kind in PUT_FIRST:
                continue
            if change.action in (Action.CREATE, Action.UPDATE):
                assert change.desired is not None
                self.put(change.vhost, change.desired, change.observed)
                self._done(f"{change.action.value}d {change.title}")

        for change in migrations:
            self._migrate(change)

        for change in deletions:
            self.delete(change, force=options.force)
            self.deleted.add(change.key)
            self._done(f"deleted {change.title}")

    def _declare_apart(
        self, vhost: str, changes: list[Change], options: ApplyOptions, made: int, total: int
    ) -> int:
        """Declare these queues by concurrent PUTs (``ApplyOptions.declare_apart``); the
        running count of objects made. A PUT without an answer may still be made by the
        broker: those are waited for as an import's objects are."""
        what = f"creating objects in {vhost}"
        unanswered: list[Change] = []
        workers = min(options.declare_apart, len(changes))

        def declare(change: Change) -> Change | None:
            assert change.desired is not None
            try:
                self.put(vhost, change.desired)  # one client: its pool holds a connection each
            except NoAnswer:
                return change
            return None

        with ThreadPoolExecutor(workers, thread_name_prefix="declare") as pool:
            futures = [pool.submit(declare, change) for change in changes]
            try:
                for future in as_completed(futures):
                    missed = future.result()
                    if missed is not None:
                        unanswered.append(missed)
                        continue
                    made += 1
                    if made % 100 == 0:
                        self.counted(what, made, total)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        if unanswered:
            timeout = options.import_timeout or import_timeout(len(unanswered))
            self._await_import(vhost, unanswered, "declaring queues", timeout)
            made += len(unanswered)
        self.progress(
            f"created {made} of {total} object(s) in {vhost} ({len(changes)} queue(s) declared"
            f" {workers} at a time)"
        )
        self.counted(what, made, total)
        for change in changes:
            self._done(f"created {change.title}", show=False)
        return made

    def _import(self, vhost: str, chunk: list[Change], timeout: float) -> None:
        resources = (c.desired for c in chunk if c.desired is not None)
        self.client.import_definitions(definitions_for(resources), vhost, timeout=timeout)

    def _held(self, vhost: str) -> set[ResourceKey]:
        """The keys of the objects the vhost holds now."""
        there = observed_vhost(vhost, {"name": vhost}, self.client.vhost_objects(vhost))
        return {member.key(vhost) for member in there.members()}

    def _present(self, vhost: str, keys: set[ResourceKey]) -> set[ResourceKey] | None:
        """Which of ``keys`` the vhost holds now; None when the broker is too busy to say."""
        try:
            return keys & self._held(vhost)
        except NoAnswer:
            return None

    def _await_import(self, vhost: str, chunk: list[Change], which: str, timeout: float) -> None:
        """An import outlived its HTTP timeout. The broker goes on with it (a large vhost
        slows every import down, quorum queues most): wait while its objects keep appearing.
        After ``IMPORT_STALL`` seconds with none new, send the missing ones again (an import of
        what already exists changes nothing), once; then give up, leaving whole objects that
        the next apply adopts, and the rest for it to make."""
        wanted = {c.key for c in chunk}
        best, since, pause, resent = -1, time.monotonic(), 0.5, False
        while True:
            present = self._present(vhost, wanted)
            count = best if present is None else len(present)
            if present is not None and count == len(wanted):
                return
            now = time.monotonic()
            if count > best:
                best, since = count, now
            elif now - since > IMPORT_STALL:
                if resent:
                    raise BrokerError(
                        f"{which} into {vhost} got no answer within {timeout:.0f} s and the"
                        f" broker has made none of its objects for {IMPORT_STALL:.0f} s"
                        f" ({max(count, 0)} of {len(wanted)} made): run the same apply again"
                        " to make the rest"
                    )
                resent, since = True, now
                missing = chunk if present is None else [c for c in chunk if c.key not in present]
                with contextlib.suppress(NoAnswer):
                    self._import(vhost, missing, timeout)
                continue
            self.progress(
                f"{which} into {vhost} outlived its {timeout:.0f} s timeout; the broker is"
                f" still at it: {max(count, 0)} of {len(wanted)} made"
            )
            time.sleep(pause)
            pause = min(pause * 2, IMPORT_POLL_MAX)

    def _verify_created(self, vhost: str, changes: list[Change]) -> None:
        """The import answers 204 even for objects it skipped: check they are really there."""
        keys = self._held(vhost)
        missing = [c.title for c in changes if c.key not in keys]
        if missing:
            raise BrokerError(
                "the broker accepted the definitions but did not create: "
                + ", ".join(missing[:5])
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
                + " (an object with the same name but other settings may exist, or the broker"
                " lacks a feature these need)"
            )


def apply_plan(
    client: ManagementClient,
    plan: Plan,
    options: ApplyOptions,
    count_messages: MessageCounter | None = None,
    progress: Callable[[str], None] | None = None,
    before_step: Callable[[str], None] = lambda _step: None,
    counted: Callable[[str, int, int], None] | None = None,
) -> ApplyResult:
    """Apply ``plan`` (made from a fresh read of the broker) with the given permissions;
    ``progress`` gets a line per step, ``counted`` (what, done, total) as counted work goes."""
    return Applier(client, plan, count_messages, progress, before_step, counted).run(options)
