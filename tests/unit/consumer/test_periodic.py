"""Periodic jobs: occurrence ids, the plan for a delivered occurrence, the spec's periodic
queue, and the worker core holding an occurrence's ack until its next one is confirmed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.amqp.confirms import Status
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer import App, AppError, IncomingMessage
from rabbitry.consumer.engine import WorkerCore, WorkerOptions
from rabbitry.consumer.periodic import (
    EARLY_MS,
    JOB_HEADER,
    SCHEDULE_HEADER,
    SCHEDULED_HEADER,
    Occurrence,
    Step,
    delay_route,
    occurrence_id,
    periodic_job,
    plan_occurrence,
    read_occurrence,
)
from rabbitry.consumer.schedule import Every
from rabbitry.consumer.scheduling import RESEED_EVERY_S
from rabbitry.policies.delay import BinaryDelays, FixedDelays
from rabbitry.topology import validate
from rabbitry.topology.patterns.expand import expand
from rabbitry.topology.spec.loader import parse_spec
from rabbitry.topology.spec.model import Spec
from rabbitry.uri import mask_text
from tests.unit.consumer.test_engine import client_acks

SPEC = """
version: 1
vhosts:
  - name: ops
    queues:
      - {name: jobs, type: quorum, periodic: timers}
      - {name: work}
    delays:
      - {name: timers, unit: 1s, max: 1h}
"""
FIVE_MINUTES = 300_000


def spec(text: str = SPEC) -> Spec:
    return parse_spec(text)


def job(name: str = "cleanup", every: str = "5m") -> dict[str, object]:
    found = periodic_job(lambda: None, Every.parse(every), name)
    return {found.name: found}


def occurrence_headers(at: int, schedule: str = "every 5m", name: str = "cleanup") -> dict:
    return Occurrence(name, at, schedule).headers


# -- ids and headers ---------------------------------------------------------------------------


def test_an_occurrence_id_is_the_same_wherever_it_is_computed() -> None:
    first = occurrence_id("cleanup", "every 5m", 1_700_000_100_000)
    assert first == occurrence_id("cleanup", "every 5m", 1_700_000_100_000)
    assert first.startswith("cleanup@2023-11-14T22:15:00.000Z/")


def test_an_occurrence_id_differs_by_job_time_and_schedule() -> None:
    ids = {
        occurrence_id("cleanup", "every 5m", 0),
        occurrence_id("cleanup", "every 5m", FIVE_MINUTES),
        occurrence_id("report", "every 5m", 0),
        occurrence_id("cleanup", "cron */5 * * * *", 0),
    }
    assert len(ids) == 4


def test_headers_carry_the_occurrence_and_read_back() -> None:
    made = Occurrence("cleanup", FIVE_MINUTES, "every 5m")
    assert read_occurrence(made.headers) == made
    assert read_occurrence({JOB_HEADER: b"cleanup", SCHEDULED_HEADER: 1, SCHEDULE_HEADER: b"x"})
    assert read_occurrence({JOB_HEADER: "cleanup"}) is None
    assert read_occurrence(None) is None


# -- the plan for one delivered occurrence ---------------------------------------------------


def test_a_due_occurrence_runs_and_publishes_the_one_after_it() -> None:
    tick = plan_occurrence(
        job(), occurrence_headers(FIVE_MINUTES), attempt=1, now_ms=FIVE_MINUTES, duplicate=False
    )
    assert tick.step is Step.RUN
    assert tick.publish == Occurrence("cleanup", 2 * FIVE_MINUTES, "every 5m")


def test_a_late_occurrence_still_runs_and_its_successor_follows_its_own_time() -> None:
    tick = plan_occurrence(
        job(), occurrence_headers(FIVE_MINUTES), attempt=1, now_ms=10**9, duplicate=False
    )
    assert tick.step is Step.RUN
    assert tick.publish is not None and tick.publish.scheduled_ms == 2 * FIVE_MINUTES


def test_a_run_whose_next_occurrence_is_due_already_says_it_is_behind() -> None:
    on_time = plan_occurrence(
        job(), occurrence_headers(FIVE_MINUTES), attempt=1, now_ms=FIVE_MINUTES, duplicate=False
    )
    assert not on_time.behind and on_time.reason == ""
    late = FIVE_MINUTES + 2 * FIVE_MINUTES + 1500
    tick = plan_occurrence(
        job(), occurrence_headers(FIVE_MINUTES), attempt=1, now_ms=late, duplicate=False
    )
    assert tick.step is Step.RUN and tick.behind
    assert tick.publish == Occurrence("cleanup", 2 * FIVE_MINUTES, "every 5m")
    assert "due 601.5 s ago, and the next (1970-01-01T00:10:00.000Z) is due too" in tick.reason


def test_a_second_copy_of_an_occurrence_is_a_duplicate() -> None:
    tick = plan_occurrence(
        job(), occurrence_headers(FIVE_MINUTES), attempt=1, now_ms=FIVE_MINUTES, duplicate=True
    )
    assert tick.step is Step.DUPLICATE and tick.publish is None


def test_a_retry_of_a_failed_occurrence_runs_without_publishing_another() -> None:
    tick = plan_occurrence(
        job(), occurrence_headers(FIVE_MINUTES), attempt=2, now_ms=10**9, duplicate=True
    )
    assert tick.step is Step.RETRY and tick.publish is None


def test_an_occurrence_that_arrives_early_is_delayed_again_not_run() -> None:
    at = 10 * FIVE_MINUTES
    tick = plan_occurrence(
        job(), occurrence_headers(at), attempt=1, now_ms=at - EARLY_MS - 1, duplicate=False
    )
    assert tick.step is Step.EARLY
    assert tick.publish == Occurrence("cleanup", at, "every 5m")
    on_time = plan_occurrence(
        job(), occurrence_headers(at), attempt=1, now_ms=at - EARLY_MS, duplicate=False
    )
    assert on_time.step is Step.RUN


def test_an_occurrence_of_a_changed_schedule_is_replaced_by_the_new_schedules_next() -> None:
    at = 12 * 60_000  # 00:12, due under "every 1m"
    tick = plan_occurrence(
        job(), occurrence_headers(at, "every 1m"), attempt=1, now_ms=at, duplicate=False
    )
    assert tick.step is Step.RESCHEDULED
    assert tick.publish == Occurrence("cleanup", 15 * 60_000, "every 5m")
    assert "every 1m" in tick.reason


def test_an_old_schedules_occurrence_on_a_time_the_new_one_shares_is_replaced_by_it() -> None:
    tick = plan_occurrence(
        job(),
        occurrence_headers(2 * FIVE_MINUTES, "every 1m"),
        attempt=1,
        now_ms=0,
        duplicate=False,
    )
    assert tick.publish == Occurrence("cleanup", 2 * FIVE_MINUTES, "every 5m")


def test_an_occurrence_of_a_job_that_is_gone_is_dropped() -> None:
    tick = plan_occurrence(
        job(), occurrence_headers(0, name="retired"), attempt=1, now_ms=0, duplicate=False
    )
    assert tick.step is Step.UNKNOWN and tick.publish is None
    assert "retired" in tick.reason


def test_a_message_that_is_not_an_occurrence_is_dropped() -> None:
    tick = plan_occurrence(job(), {"other": 1}, attempt=1, now_ms=0, duplicate=False)
    assert tick.step is Step.UNKNOWN and tick.occurrence is None


# -- where an occurrence is published -----------------------------------------------------------


def test_binary_levels_carry_an_occurrence_to_its_time_rounded_up() -> None:
    levels = BinaryDelays("timers", unit_ms=1000, levels=12)
    route = delay_route(levels, "jobs", 2500)
    assert route.delay_ms == 3000 and route.routing_key.endswith(".jobs")
    at_once = delay_route(levels, "jobs", -40)
    assert at_once.exchange == "timers.layout.binary-1000ms-12" and at_once.delay_ms == 0


def test_a_wait_past_the_levels_goes_as_far_as_they_reach() -> None:
    levels = BinaryDelays("timers", unit_ms=1000, levels=12, max_ms=3_600_000)
    assert delay_route(levels, "jobs", 86_400_000).delay_ms == 3_600_000
    fixed = FixedDelays("f", (1000, 60_000))
    assert delay_route(fixed, "jobs", 5000).delay_ms == 60_000
    assert delay_route(fixed, "jobs", 10**9).routing_key == "1.jobs"
    assert delay_route(fixed, "jobs", 0).exchange == "f.deliver"


# -- the spec ----------------------------------------------------------------------------------


def test_a_periodic_queue_is_a_single_active_consumer_target_of_its_delay() -> None:
    topology = expand(spec())
    vhost = topology.vhosts[0]
    jobs = next(q for q in vhost.queues if q.name == "jobs")
    assert jobs.arguments["x-single-active-consumer"] is True
    assert any(b.source == "timers.deliver" and b.destination == "jobs" for b in vhost.bindings)


@pytest.mark.parametrize(
    ("queue", "says"),
    [
        ("{name: jobs, periodic: nowhere}", "'nowhere' is not a delay of this vhost"),
        ("{name: jobs, type: stream, periodic: timers}", "is a stream"),
        (
            "{name: jobs, periodic: timers, arguments: {x-single-active-consumer: false}}",
            "one worker at a time",
        ),
    ],
)
def test_a_periodic_queue_that_cannot_work_is_an_error(queue: str, says: str) -> None:
    text = SPEC.replace("{name: jobs, type: quorum, periodic: timers}", queue)
    problems = [p for p in validate(parse_spec(text)) if p.severity == "error"]
    assert any(says in str(p) for p in problems), problems


# -- registering jobs --------------------------------------------------------------------------


def test_jobs_register_on_the_spec_periodic_queue() -> None:
    app = App(spec=spec())

    @app.periodic("5m")
    def cleanup() -> None: ...

    @app.periodic(cron="0 3 * * *", name="nightly")
    async def report(occurrence: Occurrence) -> None: ...

    assert set(app.periodic_jobs) == {"cleanup", "nightly"}
    route = app.routes["jobs"]
    assert route.periodic is not None and set(route.periodic.jobs) == {"cleanup", "nightly"}
    assert not route.ordered  # one job's long run does not hold back the others


@pytest.mark.parametrize(
    ("register", "says"),
    [
        (lambda app: app.periodic("5m", name="two words")(lambda: None), "must be 1-200"),
        (lambda app: app.periodic("5m")(lambda: None), "'<lambda>' must be"),
        (lambda app: app.periodic("soon", name="x")(lambda: None), "periodic interval"),
        (lambda app: app.periodic("5m", cron="* * * * *", name="x")(lambda: None), "not both"),
        (lambda app: app.periodic("5m", name="x")(lambda a, b: None), "2 required parameters"),
        (lambda app: app.periodic("5m", name="x", queue="work")(lambda: None), "not a periodic"),
    ],
)
def test_a_job_that_cannot_be_registered_says_why(
    register: Callable[[App], object], says: str
) -> None:
    with pytest.raises(AppError, match=says):
        register(App(spec=spec()))


def test_a_job_name_is_registered_once() -> None:
    app = App(spec=spec())
    app.periodic("5m", name="cleanup")(lambda: None)
    with pytest.raises(AppError, match="registered twice"):
        app.periodic("1m", name="cleanup")(lambda: None)


def test_periodic_jobs_need_a_spec_with_a_periodic_queue() -> None:
    with pytest.raises(AppError, match="need a spec"):
        App().periodic("5m", name="x")(lambda: None)
    without = SPEC.replace("periodic: timers", "arguments: {}")
    with pytest.raises(AppError, match="no periodic queues"):
        App(spec=spec(without)).periodic("5m", name="x")(lambda: None)


# -- the worker core ---------------------------------------------------------------------------


def ready_core(app: App, now_s: float) -> WorkerCore:
    core = WorkerCore(app, ConnectionSettings(), WorkerOptions(prefetch=10))
    core.clock = lambda: now_s
    core.start_check.passed = True  # as after the start-up check (test_preflight)
    session = core.new_session()
    session.state = State.OPENING_CHANNEL
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    core.sync_generation()
    return core


def occurrence_delivery(tag: int, at: int) -> bytes:
    found = Occurrence("cleanup", at, "every 5m")
    props = commands.Basic.Properties(message_id=found.id, headers=found.headers)
    return pamqp_frame.marshal(
        commands.Basic.Deliver("rabbitry.0", tag, False, "", "jobs"), 1
    ) + pamqp_frame.marshal(header.ContentHeader(0, 0, props), 1)


def test_a_worker_seeds_the_first_occurrence_of_every_job_when_it_connects() -> None:
    app = App(spec=spec())
    app.periodic("5m", name="cleanup")(lambda: None)
    core = ready_core(app, now_s=1000.5)
    seeds = [d for d in core.tracker.pending() if d.message_id.startswith("cleanup@")]
    assert [d.message_id for d in seeds] == [occurrence_id("cleanup", "every 5m", 1_200_000)]
    assert seeds[0].exchange.startswith("timers.")  # through the delay levels


def delivered(at: int, now_ms: int, copies: int = 1) -> tuple[WorkerCore, list[IncomingMessage]]:
    """A core with the job ``cleanup`` (every 5m), its seeds confirmed, that received
    ``copies`` copies of the occurrence due at ``at`` at ``now_ms`` (not admitted yet)."""
    app = App(spec=spec())
    app.periodic("5m", name="cleanup")(lambda: None)
    core = ready_core(app, now_s=now_ms / 1000)
    session = core.session
    assert session is not None
    for seed in core.tracker.pending():
        core.tracker.ack(seed.tag, multiple=False)
    session.take_output()
    session.receive(b"".join(occurrence_delivery(tag, at) for tag in range(1, copies + 1)))
    return core, session.inbox


def test_a_run_is_acked_only_once_its_next_occurrence_is_confirmed() -> None:
    core, [message] = delivered(FIVE_MINUTES, FIVE_MINUTES)
    assert core.admit(message)
    [following] = core.tracker.pending()
    assert following.message_id == occurrence_id("cleanup", "every 5m", 2 * FIVE_MINUTES)
    core.conclude(message, None, 0.01)  # the job ended: still waiting for the confirm
    assert client_acks(core.take_output(flush=True)) == []
    core.tracker.ack(following.tag, multiple=False)
    assert following.status is Status.CONFIRMED
    assert client_acks(core.take_output(flush=True)) == [(80, 1, False)]


def test_a_second_copy_is_acked_without_running_and_without_publishing() -> None:
    core, [first, second] = delivered(FIVE_MINUTES, FIVE_MINUTES, copies=2)
    assert core.admit(first)
    assert not core.admit(second)
    assert len(core.tracker.pending()) == 1  # only the first copy's next occurrence
    assert core.metrics["jobs"].duplicates == 1


def test_a_refused_next_occurrence_is_published_again_then_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    core, [message] = delivered(FIVE_MINUTES, FIVE_MINUTES)
    assert core.admit(message)
    core.conclude(message, None, 0.01)
    for _ in range(3):
        [following] = core.tracker.pending()
        assert following.message_id == occurrence_id("cleanup", "every 5m", 2 * FIVE_MINUTES)
        assert client_acks(core.take_output(flush=True)) == []
        core.tracker.nack(following.tag, multiple=False)
    assert core.tracker.pending() == []
    assert client_acks(core.take_output(flush=True)) == [(80, 1, False)]
    assert "the job is seeded again when a worker connects" in caplog.text


def test_an_early_occurrence_whose_replacement_is_refused_goes_back_to_its_queue() -> None:
    core, [message] = delivered(10 * FIVE_MINUTES, FIVE_MINUTES)
    assert not core.admit(message)
    for _ in range(3):
        [again] = core.tracker.pending()
        core.tracker.nack(again.tag, multiple=False)
    assert client_acks(core.take_output(flush=True)) == [(120, 1, False)]  # nack, requeue
    assert core.metrics["jobs"].requeued == 1


def test_a_running_worker_seeds_its_jobs_again_now_and_then() -> None:
    app = App(spec=spec())
    app.periodic("5m", name="cleanup")(lambda: None)
    core = ready_core(app, now_s=1000.5)
    for seed in core.tracker.pending():
        core.tracker.ack(seed.tag, multiple=False)
    soon = time.monotonic() + 1
    core.reseed(soon)
    assert core.tracker.pending() == []
    core.clock = lambda: 1400.0
    core.reseed(soon + RESEED_EVERY_S)
    [seed] = core.tracker.pending()
    assert seed.message_id == occurrence_id("cleanup", "every 5m", 1_500_000)
    core.reseed(soon + RESEED_EVERY_S + 1)
    assert len(core.tracker.pending()) == 1  # not again before the next period


def test_a_run_behind_its_schedule_is_logged_as_late(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", "rabbitry.worker")
    core, [message] = delivered(FIVE_MINUTES, 3 * FIVE_MINUTES)
    assert core.admit(message)
    [line] = [r.getMessage() for r in caplog.records if "runs late" in r.getMessage()]
    assert line.startswith("occurrence cleanup at 1970-01-01T00:05:00.000Z on jobs runs late")
    assert "due 600.0 s ago, and the next (1970-01-01T00:10:00.000Z) is due too" in line
    caplog.clear()
    on_time, [message] = delivered(FIVE_MINUTES, FIVE_MINUTES)
    assert on_time.admit(message)
    assert not [r for r in caplog.records if "runs late" in r.getMessage()]


def test_a_next_occurrence_its_delay_levels_no_longer_route_stops_the_worker_unacked() -> None:
    from tests.unit.consumer.test_topology_lost import returned

    core, [message] = delivered(FIVE_MINUTES, FIVE_MINUTES)
    assert core.admit(message)
    [following] = core.tracker.pending()
    session = core.session
    assert session is not None
    session.take_output()
    session.receive(
        returned(following.message_id, following.routing_key, following.tag, following.exchange)
    )
    core.conclude(message, None, 0.01)
    assert core.tracker.pending() == [], "not published again, not given up"
    assert client_acks(core.take_output(flush=True)) == [], "it goes back when the channel closes"
    assert core.lost is not None and core.lost.queue == "jobs"
    [need] = core.lost.missing
    assert (need.kind, need.name) == ("exchange", following.exchange)
    held = "occurrence cleanup at 1970-01-01T00:05:00.000Z of 'jobs' that needed it is back"
    assert held in str(core.lost)
    assert mask_text(str(core.lost)) == str(core.lost), "log lines show it as it is"
