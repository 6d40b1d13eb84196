"""Periodic jobs without a scheduler process: each occurrence is a message that schedules the next.

An occurrence of job ``j`` due at ``t`` is a message on the app's periodic queue with the
deterministic id ``j@<t as ISO 8601 UTC>/<schedule fingerprint>`` (``occurrence_id``). The
worker that receives it publishes the next occurrence through the spec's delay levels, with a
confirm, before it acks the current one; a worker that dies at any point leaves the current
occurrence unacked, and the worker that gets it again publishes the same next id again. Copies
of one id are run once: the first copy claims the id in the app's idempotency store and later
ones are acked as duplicates. The queue is consumed by one worker at a time
(``x-single-active-consumer``), so the per-process store sees every copy.

``plan_occurrence`` is the whole rule for one delivered occurrence, pure (the caller passes the
time, and whether the id was claimed before): run it and publish the next one, run a retry of
it, re-delay it (not yet due), replace it (its job's schedule changed), drop it (its job is
gone), or skip a duplicate. Outcomes are documented on ``Step``.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.schedule import Schedule, fingerprint
from rabbitry.errors import PeriodicError as PeriodicError
from rabbitry.policies.delay import BinaryDelays, DelayScheme, Route

JOB_HEADER = "x-rabbitry-job"
"""The job an occurrence belongs to."""
SCHEDULED_HEADER = "x-rabbitry-scheduled-ms"
"""When the occurrence is due, in milliseconds since the epoch (UTC)."""
SCHEDULE_HEADER = "x-rabbitry-schedule"
"""The schedule the occurrence was made under (``every 5m``, ``cron */5 * * * *``)."""

EARLY_MS = 1000
"""An occurrence that arrives more than this before it is due (a delay shorter than the wait,
or another worker's clock) is delayed again instead of run."""

_JOB_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


@dataclass(frozen=True)
class Occurrence:
    """One run of a periodic job: which ``job``, due when (``scheduled_ms``), under which
    ``schedule`` (its text), and the ``message`` that carried it (None before it is sent)."""

    job: str
    scheduled_ms: int
    schedule: str
    message: IncomingMessage | None = field(default=None, compare=False)

    @property
    def scheduled(self) -> datetime:
        """When the occurrence is due (UTC)."""
        return datetime.fromtimestamp(self.scheduled_ms / 1000, UTC)

    @property
    def id(self) -> str:
        return occurrence_id(self.job, self.schedule, self.scheduled_ms)

    @property
    def label(self) -> str:
        """``cleanup at 2026-11-25T10:05:00.000Z``: how log lines name it (the id's ``@`` and
        ``:`` read as a URL's password to the masking every log line goes through)."""
        return f"{self.job} at {_iso(self.scheduled_ms)}"

    @property
    def headers(self) -> dict[str, Any]:
        return {
            JOB_HEADER: self.job,
            SCHEDULED_HEADER: self.scheduled_ms,
            SCHEDULE_HEADER: self.schedule,
        }

    def body(self) -> bytes:
        """What the occurrence message carries, for people reading the queue (JSON)."""
        return json.dumps(
            {"job": self.job, "scheduled": _iso(self.scheduled_ms), "schedule": self.schedule}
        ).encode()


def _iso(ms: int) -> str:
    text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def occurrence_id(job: str, schedule: str, scheduled_ms: int) -> str:
    """``job@2026-11-25T10:05:00.000Z/1a2b3c4d``: the same for every worker that computes it.

    The fingerprint of the schedule is part of it, so the occurrences of a changed schedule
    never pass for (or are skipped as) those of the old one."""
    return f"{job}@{_iso(scheduled_ms)}/{fingerprint(schedule)}"


@dataclass(frozen=True)
class PeriodicJob:
    """A function run on a schedule: ``name`` is its identity across workers and deploys."""

    name: str
    schedule: Schedule
    func: Callable[..., Awaitable[None] | None]
    takes_occurrence: bool
    """The function takes the ``Occurrence`` (else it takes nothing)."""

    def first_after(self, now_ms: int) -> Occurrence:
        """The occurrence a worker starting at ``now_ms`` seeds: the first one after it."""
        return Occurrence(self.name, self.schedule.after(now_ms), self.schedule.text)

    def next_after(self, occurrence: Occurrence) -> Occurrence:
        """The occurrence that follows ``occurrence`` (in the past when running late)."""
        return Occurrence(
            self.name, self.schedule.after(occurrence.scheduled_ms), self.schedule.text
        )


def periodic_job(func: Callable[..., Any], schedule: Schedule, name: str | None) -> PeriodicJob:
    """A ``PeriodicJob`` for ``func``, its signature and name checked."""
    job_name = str(name or getattr(func, "__name__", ""))
    if not _JOB_NAME.match(job_name):
        raise PeriodicError(
            f"periodic job name {job_name!r} must be 1-200 letters, digits or ._:<>- (pass name=)"
        )
    params = [
        p
        for p in inspect.signature(func).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if len(params) > 1 or any(p.kind is p.KEYWORD_ONLY for p in params):
        raise PeriodicError(
            f"periodic job {job_name!r} takes {len(params)} required parameters: take none,"
            " or one Occurrence (its job, scheduled time and message)"
        )
    return PeriodicJob(job_name, schedule, func, takes_occurrence=bool(params))


def read_occurrence(headers: Mapping[str, Any] | None) -> Occurrence | None:
    """The occurrence a message's headers describe (None: not an occurrence)."""
    if not headers:
        return None
    job, scheduled, schedule = (
        headers.get(JOB_HEADER),
        headers.get(SCHEDULED_HEADER),
        headers.get(SCHEDULE_HEADER),
    )
    if isinstance(job, bytes):
        job = job.decode("utf-8", "replace")
    if isinstance(schedule, bytes):
        schedule = schedule.decode("utf-8", "replace")
    if not isinstance(job, str) or not isinstance(schedule, str):
        return None
    if isinstance(scheduled, bool) or not isinstance(scheduled, int):
        return None
    return Occurrence(job, scheduled, schedule)


class Step(enum.StrEnum):
    """What happens to one delivered occurrence."""

    RUN = "run"
    """Due, first copy: publish ``publish`` (the next occurrence), run the job, ack when the
    job ended and the next occurrence is confirmed. ``behind``: the next occurrence is due
    already (occurrences missed while no worker ran): they run one after the other."""
    RETRY = "retry"
    """A retry of an occurrence that failed (attempt > 1): run the job; its next occurrence
    was published by the first attempt."""
    EARLY = "early"
    """Not due yet: publish ``publish`` (the same occurrence, delayed again), ack, do not run."""
    RESCHEDULED = "rescheduled"
    """Made under a schedule the job no longer has: publish ``publish`` (the first occurrence
    of the current schedule from then on) in its place, ack, do not run."""
    UNKNOWN = "unknown"
    """Its job is not registered (removed, or not an occurrence at all): ack, do not run; the
    job's chain ends here."""
    DUPLICATE = "duplicate"
    """Another copy of this id was already taken: ack, do not run."""


@dataclass(frozen=True)
class Tick:
    """The plan for one delivered occurrence."""

    step: Step
    occurrence: Occurrence | None
    job: PeriodicJob | None = None
    publish: Occurrence | None = None
    """The occurrence to publish (confirmed) before the ack."""
    reason: str = ""
    behind: bool = False
    """A run whose next occurrence is due already: the job catches up (``Step.RUN``)."""


def plan_occurrence(
    jobs: Mapping[str, PeriodicJob],
    headers: Mapping[str, Any] | None,
    *,
    attempt: int,
    now_ms: int,
    duplicate: bool,
) -> Tick:
    """What to do with an occurrence delivered at ``now_ms``; ``duplicate``: its id was
    already claimed. Pure: the caller claims the id (for ``RUN``) and publishes."""
    occurrence = read_occurrence(headers)
    if occurrence is None:
        return Tick(Step.UNKNOWN, None, reason="not an occurrence of a periodic job (no headers)")
    job = jobs.get(occurrence.job)
    if job is None:
        return Tick(
            Step.UNKNOWN,
            occurrence,
            reason=f"no periodic job {occurrence.job!r} in this app: its chain ends here",
        )
    if attempt > 1:
        return Tick(Step.RETRY, occurrence, job)
    current = job.schedule.text
    if occurrence.schedule != current:
        replacement = Occurrence(
            job.name, job.schedule.after(max(occurrence.scheduled_ms, now_ms) - 1), current
        )
        return Tick(
            Step.RESCHEDULED,
            occurrence,
            job,
            publish=replacement,
            reason=f"made under {occurrence.schedule!r}; the job is now {current!r}",
        )
    if occurrence.scheduled_ms - now_ms > EARLY_MS:
        return Tick(Step.EARLY, occurrence, job, publish=occurrence, reason="not due yet")
    if duplicate:
        return Tick(Step.DUPLICATE, occurrence, job, reason="occurrence already taken")
    following = job.next_after(occurrence)
    if following.scheduled_ms > now_ms:
        return Tick(Step.RUN, occurrence, job, publish=following)
    return Tick(
        Step.RUN,
        occurrence,
        job,
        publish=following,
        reason=f"due {(now_ms - occurrence.scheduled_ms) / 1000:.1f} s ago, and the next"
        f" ({_iso(following.scheduled_ms)}) is due too: the occurrences missed while no worker"
        " ran run one after the other",
        behind=True,
    )


def delay_route(scheme: DelayScheme, queue: str, delay_ms: int) -> Route:
    """Where to publish an occurrence due in ``delay_ms`` (<= 0: at once) for ``queue``.

    Never early: the delay is rounded up. A wait longer than the levels reach goes as far as
    they do; the occurrence then arrives early and is delayed again (``Step.EARLY``)."""
    if isinstance(scheme, BinaryDelays):
        if delay_ms <= 0:
            return scheme.route(0, queue)
        return scheme.route(min(delay_ms, scheme.max_delay_ms) / 1000, queue)
    if delay_ms <= 0:
        return Route(scheme.delivery_exchange, f"0.{queue}", 0)
    levels = scheme.levels_ms
    index = next((i for i, level in enumerate(levels) if level >= delay_ms), len(levels) - 1)
    return Route(scheme.entry_exchange, f"{index}.{queue}", levels[index])


@dataclass(frozen=True)
class PeriodicQueue:
    """The queue occurrences travel on, the delay that carries them, and the app's jobs."""

    queue: str
    delay: DelayScheme
    jobs: dict[str, PeriodicJob] = field(default_factory=dict)

    def route(self, occurrence: Occurrence, now_ms: int) -> Route:
        return delay_route(self.delay, self.queue, occurrence.scheduled_ms - now_ms)


async def run_occurrence(jobs: Mapping[str, PeriodicJob], message: IncomingMessage) -> None:
    """The handler of a periodic queue: call the occurrence's job (plain or coroutine)."""
    occurrence = read_occurrence(message.headers)
    job = jobs.get(occurrence.job) if occurrence is not None else None
    if occurrence is None or job is None:  # the engine drops these before: only direct calls
        raise PeriodicError(f"message {message.message_id} is not an occurrence of a known job")
    args = (Occurrence(job.name, occurrence.scheduled_ms, occurrence.schedule, message),)
    result = job.func(*args[: int(job.takes_occurrence)])
    if inspect.isawaitable(result):
        await result
