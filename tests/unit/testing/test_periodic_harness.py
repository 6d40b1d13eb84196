"""Periodic jobs in the in-memory harness: each occurrence runs once and publishes the next,
through the worker's own core."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rabbitry.consumer import Action, App, AppError
from rabbitry.consumer.periodic import Occurrence
from rabbitry.testing import HandlerHarness
from rabbitry.topology.spec.loader import parse_spec

SPEC = """
version: 1
vhosts:
  - name: ops
    queues:
      - name: jobs
        type: quorum
        periodic: timers
        retry: {attempts: 2, backoff: [1s], via: timers}
    delays:
      - {name: timers, unit: 1s, max: 1d}
"""
START = datetime(2026, 11, 25, 10, 41, 13, tzinfo=UTC)


def at(hour: int, minute: int) -> datetime:
    return datetime(2026, 11, 25, hour, minute, tzinfo=UTC)


def app_with(runs: list[datetime], every: str = "5m") -> App:
    app = App(spec=parse_spec(SPEC))

    @app.periodic(every, name="cleanup")
    def cleanup(occurrence: Occurrence) -> None:
        runs.append(occurrence.scheduled)

    return app


def test_each_run_publishes_the_next_occurrence_and_the_chain_goes_on() -> None:
    runs: list[datetime] = []
    outcomes = HandlerHarness(app_with(runs)).schedule("cleanup", 4, start=START)
    assert all(o.acked for o in outcomes)
    assert runs == [at(10, 45), at(10, 50), at(10, 55), at(11, 0)]
    assert outcomes[-1].scheduled is not None
    assert outcomes[-1].scheduled.scheduled == at(11, 5)


def test_a_redelivered_copy_of_an_occurrence_is_not_run_again() -> None:
    runs: list[datetime] = []
    harness = HandlerHarness(app_with(runs))
    first = harness.occurrence("cleanup", at(10, 45))
    again = harness.occurrence("cleanup", at(10, 45), redelivered=True)
    assert first.acked and again.action is Action.DUPLICATE and again.scheduled is None
    assert runs == [at(10, 45)]
    assert harness.metrics["jobs"].duplicates == 1


def test_a_coroutine_job_and_a_job_without_parameters_run_too() -> None:
    app = App(spec=parse_spec(SPEC))
    seen: list[str] = []

    @app.periodic(cron="0 3 * * *")
    async def nightly() -> None:
        seen.append("nightly")

    [outcome] = HandlerHarness(app).schedule("nightly", 1, start=START)
    assert outcome.acked and seen == ["nightly"]
    assert outcome.scheduled is not None
    assert outcome.scheduled.scheduled == datetime(2026, 11, 27, 3, 0, tzinfo=UTC)


def test_a_failing_run_retries_without_scheduling_its_successor_twice() -> None:
    app = App(spec=parse_spec(SPEC))
    calls: list[int] = []

    @app.periodic("5m", name="flaky")
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("database away")

    harness = HandlerHarness(app)
    first = harness.occurrence("flaky", at(10, 45))
    assert first.retried and first.scheduled is not None  # the next one is out already
    retry = harness.occurrence("flaky", at(10, 45), headers=first.headers)
    assert retry.acked and retry.scheduled is None and len(calls) == 2


def test_a_changed_schedule_takes_effect_on_the_next_occurrence() -> None:
    runs: list[datetime] = []
    harness = HandlerHarness(app_with(runs, every="15m"))
    outcome = harness.occurrence("cleanup", at(10, 50), schedule="every 5m")
    assert outcome.action is Action.RESCHEDULED and runs == []
    assert outcome.scheduled == Occurrence("cleanup", _ms(at(11, 0)), "every 15m")


def test_an_occurrence_of_a_removed_job_is_dropped() -> None:
    old: list[datetime] = []
    old_harness = HandlerHarness(app_with(old))
    last = old_harness.occurrence("cleanup", at(10, 45)).scheduled
    assert last is not None
    new_app = App(spec=parse_spec(SPEC))

    @new_app.periodic("1h", name="report")
    def report() -> None: ...

    carrier = new_app.routes["jobs"]
    outcome = HandlerHarness(new_app).deliver(
        carrier.queue, last.body(), headers=last.headers, message_id=last.id
    )
    assert outcome.action is Action.DROPPED and outcome.scheduled is None


def test_an_occurrence_that_arrives_early_is_sent_on_without_running() -> None:
    runs: list[datetime] = []
    outcome = HandlerHarness(app_with(runs)).occurrence("cleanup", at(11, 0), received=at(10, 45))
    assert outcome.action is Action.RESCHEDULED and outcome.skipped and runs == []
    assert outcome.scheduled is not None and outcome.scheduled.scheduled == at(11, 0)


def test_the_harness_names_the_jobs_it_knows() -> None:
    with pytest.raises(AppError, match="periodic jobs: cleanup"):
        HandlerHarness(app_with([])).occurrence("missing")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
