"""A worker killed in the middle of a run and a new one started whole periods later: by the
pure rule of periodic jobs (``plan_occurrence``, the seeds of ``first_after``), every
occurrence runs once, the ones that fell due while no worker ran included, late and one after
the other (docs/worker.md, "Late and early").

The broker is modelled as the engine relies on it: a published occurrence reaches the queue
when it is due (delays are never early, and one already due goes at once), a delivery that is
not acked goes back to the queue when its worker dies, and the queue gives its messages in the
order they reached it, to one worker at a time (single active consumer). Each worker process
has its own idempotency store, as the default one is. Time is counted, not waited for.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.consumer.periodic import (
    Occurrence,
    PeriodicJob,
    Step,
    Tick,
    periodic_job,
    plan_occurrence,
)
from rabbitry.consumer.schedule import Every
from tests.profiles import examples

EVERY_MS = 1000
START_MS = 1_795_768_275_300  # between two occurrences


@dataclass
class Queue:
    """The periodic queue: messages by the time they reached it, then by arrival."""

    messages: list[tuple[int, int, Occurrence]] = field(default_factory=list)
    arrivals: itertools.count[int] = field(default_factory=itertools.count)

    def publish(self, occurrence: Occurrence, now_ms: int) -> None:
        reaches = max(now_ms, occurrence.scheduled_ms)
        heapq.heappush(self.messages, (reaches, next(self.arrivals), occurrence))

    def take(self, now_ms: int) -> tuple[int, Occurrence]:
        """The next message (waiting for it when none is there yet): (when it is taken, it)."""
        reaches, _, occurrence = heapq.heappop(self.messages)
        return max(now_ms, reaches), occurrence


@dataclass
class Run:
    scheduled_ms: int
    worker: int
    behind: bool


def run_of(
    jobs: dict[str, PeriodicJob], occurrence: Occurrence, now: int, store: set[str]
) -> Tick | None:
    """A worker's plan for a delivered occurrence: a run (its id now claimed in ``store``), or
    None for a copy already run."""
    tick = plan_occurrence(
        jobs, occurrence.headers, attempt=1, now_ms=now, duplicate=occurrence.id in store
    )
    if tick.step is Step.DUPLICATE:
        return None
    assert tick.step is Step.RUN and tick.publish is not None, tick
    store.add(occurrence.id)
    return tick


def across_a_kill(
    *, killed_run: int, next_stored: bool, late_periods: float, run_ms: int, periods: int
) -> tuple[list[Run], int]:
    """Worker 1 runs until its ``killed_run``-th run, dies in the middle of it (its next
    occurrence reached the broker or not), and worker 2 starts ``late_periods`` later and
    runs for ``periods`` periods. The runs that ended, and the occurrence killed mid-run."""
    job: PeriodicJob = periodic_job(lambda: None, Every(EVERY_MS), "tick")
    jobs = {job.name: job}
    queue = Queue()
    runs: list[Run] = []
    now = START_MS
    queue.publish(job.first_after(now), now)  # worker 1's seed
    store: set[str] = set()
    started = 0
    while True:
        now, occurrence = queue.take(now)
        tick = run_of(jobs, occurrence, now, store)
        if tick is None:
            continue
        started += 1
        if started == killed_run:
            if next_stored:
                queue.publish(tick.publish, now)
            killed_at = now + run_ms // 2
            queue.publish(occurrence, killed_at)  # unacked: back in the queue
            break
        queue.publish(tick.publish, now)
        now += run_ms
        runs.append(Run(occurrence.scheduled_ms, 1, tick.behind))

    now = killed_at + int(late_periods * EVERY_MS)
    end = now + periods * EVERY_MS
    queue.publish(job.first_after(now), now)  # worker 2's seed
    store = set()
    while now < end:
        now, occurrence = queue.take(now)
        tick = run_of(jobs, occurrence, now, store)
        if tick is None:
            continue
        queue.publish(tick.publish, now)
        now += run_ms
        runs.append(Run(occurrence.scheduled_ms, 2, tick.behind))
    return runs, occurrence_killed(runs, killed_run)


def occurrence_killed(runs: list[Run], killed_run: int) -> int:
    return (START_MS // EVERY_MS + killed_run) * EVERY_MS


def assert_each_ran_once_in_a_row(runs: list[Run]) -> list[int]:
    ran = sorted(run.scheduled_ms for run in runs)
    assert len(ran) == len(set(ran)), f"run twice: {sorted(s for s in ran if ran.count(s) > 1)}"
    assert ran == list(range(ran[0], ran[-1] + EVERY_MS, EVERY_MS)), "an occurrence was lost"
    return ran


def test_occurrences_missed_while_no_worker_ran_run_late_once_each() -> None:
    runs, killed = across_a_kill(
        killed_run=3, next_stored=True, late_periods=5.5, run_ms=400, periods=20
    )
    ran = assert_each_ran_once_in_a_row(runs)
    restarted = killed + EVERY_MS // 5 + 5500
    missed = range(killed, restarted, EVERY_MS)
    assert set(missed) <= set(ran)
    by_scheduled = {run.scheduled_ms: run for run in runs}
    assert all(by_scheduled[s].worker == 2 for s in missed)
    assert all(by_scheduled[s].behind for s in missed[:-1]), "each late run says it is behind"
    assert ran[-1] > restarted + 10 * EVERY_MS


def test_a_test_that_stops_when_the_newest_occurrence_ran_sees_a_gap_that_is_no_loss() -> None:
    """The kill test's old stop condition (the newest run 5 periods past the killed one): the
    restarted worker's own seed runs on time while the missed ones still catch up, so at that
    moment the runs have a gap; run on, and the gap fills."""
    runs, killed = across_a_kill(
        killed_run=3, next_stored=True, late_periods=5.5, run_ms=400, periods=20
    )
    newest = 0
    for index, run in enumerate(runs):
        newest = max(newest, run.scheduled_ms)
        if newest >= killed + 5 * EVERY_MS and run.worker == 2:
            seen = sorted(r.scheduled_ms for r in runs[: index + 1])
            break
    assert seen != list(range(seen[0], seen[-1] + EVERY_MS, EVERY_MS))
    assert_each_ran_once_in_a_row(runs)


@settings(max_examples=examples(200), deadline=None)
@given(
    killed_run=st.integers(min_value=1, max_value=5),
    next_stored=st.booleans(),
    late_periods=st.floats(min_value=0, max_value=12),
    run_ms=st.integers(min_value=0, max_value=800),
)
def test_no_occurrence_is_lost_or_doubled_however_late_the_restart(
    killed_run: int, next_stored: bool, late_periods: float, run_ms: int
) -> None:
    runs, killed = across_a_kill(
        killed_run=killed_run,
        next_stored=next_stored,
        late_periods=late_periods,
        run_ms=run_ms,
        periods=80,  # enough for a run of 0.8 periods to catch up on 13 missed ones
    )
    ran = assert_each_ran_once_in_a_row(runs)
    assert killed in ran
    assert [run.worker for run in runs if run.scheduled_ms == killed] == [2]
