"""Carry out a ``Plan`` against the management API, in dependency order: the I/O of an apply.

- Everything the flags do not allow is refused before the first request (``refusals``), so a
  refused apply changes nothing.
- The ownership record is extended with the keys about to be created *before* any change, so a
  run that dies half-way still owns what it made; the next plan repairs the rest.
- Creations go through definitions imports per vhost (``import_plan``: the broker's own bulk
  path, the fastest there is); since an import silently skips what it cannot create, the
  created objects are read back and checked. Updates and deletions are one request per object.
- A change to an object another stack owns runs only when ``take_over`` names that stack; then
  the object leaves that stack's record before any change, and joins this one's.
- Queues are only deleted (prune or replace) when empty, unless ``force``; classic queues use the
  broker's atomic ``if-empty`` delete, quorum and stream queues (which do not support it) an exact
  AMQP count.

``Applier`` is one run's steps in the order the broker needs them (ownership first, creations,
read-back, updates, migrations, deletions last), and that order is easiest to check when it
reads top to bottom in one place.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypedDict, Unpack

from rabbitry.errors import ApplyError, BrokerError, NoAnswer
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner import writes
from rabbitry.provisioner.apply_options import ApplyOptions, ApplyResult, MessageCounter
from rabbitry.provisioner.broker_documents import (
    definitions_for,
)
from rabbitry.provisioner.import_plan import (
    IMPORT_POLL_MAX,
    IMPORT_STALL,
    PUT_FIRST,
    declared_apart,
    import_chunks,
    import_timeout,
    imported,
)
from rabbitry.provisioner.migration import (
    STEPS,
    MigrationState,
    Migrator,
    pending_migrations,
    queue_bindings,
)
from rabbitry.provisioner.ownership import PENDING, OwnershipRecord, record_name
from rabbitry.provisioner.plans import Action, Change, Plan, managed_after
from rabbitry.provisioner.refusals import refusals, refuse, self_harm, taken_over
from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology.primitives import (
    Binding,
    Parameter,
    Primitive,
    Queue,
    ResourceKey,
)

DONE_SHOWN = 20
"""Lines of work done that an error message lists (all of it is in ``ApplyError.done``)."""


class ApplyHooks(TypedDict, total=False):
    """What an apply tells as it goes (each optional)."""

    progress: Callable[[str], None] | None
    """A line per step."""
    counted: Callable[[str, int, int], None] | None
    """Counted work as it goes: (what, done, total), e.g. objects created in a vhost."""
    before_step: Callable[[str], None]
    """Called before each migration step: lets tests stop a run at any step."""


class Applier:
    """Runs one plan; keeps a log of what it did so a failure can say so."""

    def __init__(
        self,
        client: ManagementClient,
        plan: Plan,
        count_messages: MessageCounter | None = None,
        **hooks: Unpack[ApplyHooks],
    ) -> None:
        self.client = client
        self.plan = plan
        self.count_messages = count_messages
        self.progress = hooks.get("progress") or (lambda _line: None)
        self.counted = hooks.get("counted") or (lambda _what, _done, _total: None)
        self.before_step = hooks.get("before_step") or (lambda _step: None)
        self.result = ApplyResult(plan=plan)
        self.deleted: set[ResourceKey] = set()
        self.operations: list[dict[str, Any]] = list(plan.record.operations)
        self.managed: dict[ResourceKey, str] = dict(plan.record.managed)

    def _done(self, line: str, show: bool = True) -> None:
        self.result.done.append(line)
        if show:
            self.progress(line)

    # -- one object at a time ------------------------------------------------------------------

    def put(self, vhost: str, resource: Primitive, observed: Primitive | None = None) -> None:
        """Create or update ``resource`` (``writes.put``)."""
        writes.put(self.client, vhost, resource, observed)

    def delete(self, change: Change, force: bool) -> None:
        """Delete what ``change`` observed (``writes.delete``)."""
        writes.delete(self.client, change, force, self.count_messages)

    # -- the whole plan ------------------------------------------------------------------------

    def run(self, options: ApplyOptions) -> ApplyResult:
        plan = self.plan
        refuse(plan, options, self.client.username)
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
        """The plan's changes in the order the broker needs them: replaced exchanges (and
        other kinds) deleted, vhosts, users and permissions put, each vhost's creations
        imported, the rest put, queues migrated, and deletions last."""
        for change in todo:
            if change.action is Action.REPLACE and change.kind != "queue":
                self.delete(change, force=options.force)
                self._done(f"deleted {change.title} (to declare it again)")
        migrations = [c for c in todo if c.action is Action.REPLACE and c.kind == "queue"]
        todo = [c for c in todo if c not in migrations]
        batches = self._put_first(todo)
        for vhost, changes in batches.items():
            self._create_in(vhost, changes, options)

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

    def _put_first(self, todo: list[Change]) -> dict[str, list[Change]]:
        """Put what the objects in a vhost may need (``PUT_FIRST``); the creations to import,
        by vhost."""
        batches: dict[str, list[Change]] = defaultdict(list)
        for change in todo:
            resource = change.desired
            assert resource is not None
            # what a definitions import makes (policies are never replaced: changed in place)
            batched = change.action in (Action.CREATE, Action.REPLACE) and imported(change)
            if isinstance(resource, Parameter) and resource.component == "shovel":
                # made once the imports are in: a shovel started before its queues declares
                # them itself, without their arguments (an import makes parameters first)
                batched = False
            if batched:
                batches[change.vhost].append(change)
            elif change.action is not Action.ADOPT and change.kind in PUT_FIRST:
                self.put(change.vhost, resource, change.observed)
                self._done(f"{change.action.value}d {change.title}")
        return batches

    def _create_in(self, vhost: str, changes: list[Change], options: ApplyOptions) -> None:
        """Create one vhost's objects: imports in chunks (quorum and stream queues declared
        apart between them, ``ApplyOptions.declare_apart``), then one read-back."""
        apart: list[Change] = []
        before: list[Change] = []
        after: list[Change] = []
        for change in changes:
            if options.declare_apart > 1 and declared_apart(change):
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
    **hooks: Unpack[ApplyHooks],
) -> ApplyResult:
    """Apply ``plan`` (made from a fresh read of the broker) with the given permissions,
    telling ``hooks`` as it goes."""
    return Applier(client, plan, count_messages, **hooks).run(options)


__all__ = [
    "Applier",
    "ApplyHooks",
    "ApplyOptions",
    "ApplyResult",
    "MessageCounter",
    "apply_plan",
    "definitions_for",
    "import_chunks",
    "import_timeout",
    "refusals",
    "self_harm",
    "taken_over",
]
