"""The worker's start-up check without a broker: what a spec's handlers need, the refusal's text,
the side-channel probe, and a session that consumes only once the check passed."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from pamqp import commands
from pamqp import frame as pamqp_frame

from rabbitry.amqp.confirms import ConfirmTracker
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.aio import AsyncWorker
from rabbitry.consumer.app import App, Route
from rabbitry.consumer.engine import WorkerCore, WorkerOptions
from rabbitry.consumer.periodic import PeriodicQueue
from rabbitry.consumer.preflight import (
    STEPS,
    BrokerFacts,
    Need,
    Needed,
    StartCheck,
    Step,
    TopologyMissing,
    needs_of,
)
from rabbitry.consumer.probe import PROBE_CHANNEL, Probe
from rabbitry.consumer.session import ConsumerSession, Subscription
from rabbitry.policies.delay import BinaryDelays, FixedDelays
from rabbitry.policies.retry import Backoff, RetryPolicy
from rabbitry.topology.patterns.retry_setup import BrokerRetry, QueueRetry

POLICY = RetryPolicy(attempts=3, backoff=Backoff(tiers_ms=(1000, 2000)))
LADDER = QueueRetry("work", POLICY, "work.parking", {1000: "work.retry.1s", 2000: "work.retry.2s"})
VIA_DELAY = QueueRetry("mail", POLICY, "mail.parking", delay=BinaryDelays("delay", 100, 3))
VIA_BROKER = QueueRetry("jobs", POLICY, "jobs.parking", broker=BrokerRetry(1000, 2000, 2))
RABBITMQ_4_0 = BrokerFacts("RabbitMQ", (4, 0, 5))
RABBITMQ_4_3 = BrokerFacts("RabbitMQ", (4, 3, 0))


def route(queue: str, retry: QueueRetry | None = None, **fields: Any) -> Route:
    return Route(queue=queue, handler=lambda m: None, is_async=False, retry=retry, **fields)


def named(needs: list[Need]) -> list[tuple[str, str]]:
    return [(str(n.kind), n.name) for n in needs]


def queues(*names: str) -> list[tuple[str, str]]:
    """What ``named`` gives for needs that are all queues."""
    return [("queue", name) for name in names]


# -- what a spec needs ----------------------------------------------------------------------------


def test_a_ladder_needs_its_queue_its_tier_queues_and_its_parking_lot() -> None:
    needs = needs_of([route("work", LADDER)], RABBITMQ_4_0)
    assert named(needs) == queues("work", "work.retry.1s", "work.retry.2s", "work.parking")
    assert [n.step for n in needs] == [
        "consumed queues",
        "retry mechanism",
        "retry mechanism",
        "parking lots",
    ]


def test_a_queue_with_fault_events_needs_its_fault_exchange() -> None:
    faults = QueueRetry("work", POLICY, "work.parking", {1000: "work.retry.1s"}, fault_exchange="f")
    needs = needs_of([route("work", faults)], RABBITMQ_4_0)
    assert needs[-1] == Need(Needed.EXCHANGE, "f", "fault events of 'work'", "fault exchanges")


def test_a_retry_via_a_delay_needs_every_level_the_delivery_exchange_and_the_layout_marker() -> (
    None
):
    needs = needs_of([route("mail", VIA_DELAY)], RABBITMQ_4_0)
    levels = [(k, n) for k, n in named(needs) if n.startswith("delay")]
    assert levels == [
        ("exchange", "delay.00"),
        ("queue", "delay.00"),
        ("exchange", "delay.01"),
        ("queue", "delay.01"),
        ("exchange", "delay.02"),
        ("queue", "delay.02"),
        ("exchange", "delay.deliver"),
        # the marker of the spec's layout: levels laid out otherwise would strand a retry
        ("exchange", "delay.layout.binary-100ms-3"),
    ]
    assert ("queue", "mail.parking") in named(needs)


def test_a_periodic_queue_needs_the_levels_of_the_delay_that_carries_its_occurrences() -> None:
    carrier = PeriodicQueue("tick", FixedDelays("every", (1000, 5000)))
    needs = needs_of([route("tick", periodic=carrier)], RABBITMQ_4_0)
    assert named(needs) == [
        ("queue", "tick"),
        ("exchange", "every"),
        ("queue", "every.00"),
        ("queue", "every.01"),
        ("exchange", "every.deliver"),
        ("exchange", FixedDelays("every", (1000, 5000)).layout_exchange),
    ]


def test_a_modulus_sharded_exchange_is_needed_as_an_exchange() -> None:
    needs = needs_of([route("images", sharded_exchange=True, consumers=2)], RABBITMQ_4_0)
    assert named(needs) == [("exchange", "images")]


def test_each_object_is_needed_once_with_the_first_reason() -> None:
    shared = QueueRetry("b", POLICY, "work.parking", {1000: "work.retry.1s"})
    needs = needs_of([route("work", LADDER), route("b", shared)], RABBITMQ_4_0)
    assert named(needs).count(("queue", "work.parking")) == 1
    assert named(needs).count(("queue", "work.retry.1s")) == 1
    first = next(n for n in needs if n.name == "work.retry.1s")
    assert first.why == "retry tier of 'work', 1000 ms"


def test_a_retry_via_the_broker_needs_4_3_by_the_version_table_and_a_dead_letter_target() -> None:
    old = needs_of([route("jobs", VIA_BROKER)], RABBITMQ_4_0)
    assert named(old) == [
        ("broker", "quorum queue delayed retry (retry: {via: broker})"),
        *queues("jobs", "jobs.parking"),
    ]
    assert str(old[0]).startswith("queue 'jobs': feature quorum queue delayed retry")
    assert "needs RabbitMQ 4.3 or newer (the broker runs 4.0.5)" in str(old[0])
    assert "retry `via: queues`" in str(old[0]), "the table's advice"
    assert old[2].why == "dead-letter target of 'jobs', which retries via the broker"
    assert named(needs_of([route("jobs", VIA_BROKER)], RABBITMQ_4_3)) == queues(
        "jobs", "jobs.parking"
    )
    assert needs_of([route("jobs", VIA_BROKER)], BrokerFacts("RabbitMQ", (4, 2, 9)))[0].kind == (
        Needed.BROKER
    )


def test_a_broker_that_does_not_say_its_version_is_refused_for_a_retry_via_the_broker() -> None:
    (first, *_) = needs_of([route("jobs", VIA_BROKER)], BrokerFacts("SomeProxy", ()))
    assert first.kind is Needed.BROKER
    assert "SomeProxy" in first.why and "did not say its version" in first.why


def test_a_worker_without_retries_needs_only_its_queues_and_no_version_table() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rabbitry.consumer.app import App\n"
        "from rabbitry.consumer.preflight import BrokerFacts, needs_of\n"
        "app = App()\n"
        "app.add('a', lambda m: None)\n"
        "print([n.name for n in needs_of(list(app.routes.values()), BrokerFacts())])\n"
        "print('rabbitry.topology.versions' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['a']", "False"]


def test_a_retry_via_the_broker_loads_the_version_table_but_not_the_topology_models() -> None:
    """Judging the broker's version is a few milliseconds, not pydantic's tens (a warm worker
    holds no spec model: ``test_worker_footprint``)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rabbitry.consumer.app import App\n"
        "from rabbitry.consumer.preflight import BrokerFacts, needs_of\n"
        "from rabbitry.policies.retry import Backoff, RetryPolicy\n"
        "from rabbitry.topology.patterns.retry_setup import BrokerRetry, QueueRetry\n"
        "policy = RetryPolicy(attempts=2, backoff=Backoff(tiers_ms=(1000,)))\n"
        "app = App()\n"
        "app.add('a', lambda m: None, retry=QueueRetry('a', policy, 'a.p', broker=BrokerRetry(1, 1, 1)))\n"
        "needs = needs_of(list(app.routes.values()), BrokerFacts('RabbitMQ', (4, 0, 5)))\n"
        "print(needs[0].kind, 'rabbitry.topology.versions' in sys.modules, 'pydantic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["broker", "True", "False"]


def test_one_more_step_is_one_more_entry() -> None:
    def fingerprint(routes: Any, broker: BrokerFacts) -> Iterator[Need]:
        yield Need(Needed.EXCHANGE, "delay.layout.abc", "layout of delay 'delay'")

    steps = (*STEPS, Step("delay layouts", fingerprint))
    needs = needs_of([route("work")], RABBITMQ_4_0, steps)
    assert named(needs) == [("queue", "work"), ("exchange", "delay.layout.abc")]
    assert needs[-1].step == "delay layouts"


def test_server_properties_give_the_version() -> None:
    assert BrokerFacts.of({"product": b"RabbitMQ", "version": b"4.0.5"}) == RABBITMQ_4_0
    assert BrokerFacts.of({"product": "RabbitMQ", "version": "4.1.0-beta.2"}).version == (4, 1, 0)
    assert BrokerFacts.of({}).version == () and BrokerFacts.of(None).version_text == (
        "an unknown version"
    )


# -- the refusal ----------------------------------------------------------------------------------


def test_the_refusal_is_one_line_naming_each_missing_thing_and_the_command() -> None:
    missing = needs_of([route("work", LADDER)], RABBITMQ_4_0)[2:]
    error = StartCheck([], "specs/shop.yaml").refusal(missing, "shop", "amqp://u@h:5672")
    text = str(error)
    assert "\n" not in text
    assert text == (
        "the worker refused to start (nothing was consumed): vhost 'shop' on amqp://u@h:5672"
        " lacks queue 'work.retry.2s' (retry tier of 'work', 2000 ms); queue 'work.parking'"
        " (parking lot of 'work'): run `rabbitry apply specs/shop.yaml` to make them"
    )
    assert isinstance(error, TopologyMissing) and error.missing == missing
    from rabbitry.errors import CapabilityError

    assert isinstance(error, CapabilityError)


def test_without_a_spec_file_the_command_says_spec_and_a_version_problem_follows() -> None:
    missing = needs_of([route("jobs", VIA_BROKER)], RABBITMQ_4_0)
    text = str(StartCheck([]).refusal([missing[0], missing[2]], "v", "amqp://h"))
    assert "queue 'jobs.parking' (dead-letter target of 'jobs', which retries via the broker)" in (
        text
    )
    assert "run `rabbitry apply SPEC` to make them; queue 'jobs': feature quorum" in text


# -- the probe ------------------------------------------------------------------------------------


def methods(data: bytes) -> list[tuple[int, Any]]:
    """(channel, method) of every frame in ``data``."""
    out = []
    while data:
        size, channel, frame = pamqp_frame.unmarshal(data)
        out.append((channel, frame))
        data = data[size:]
    return out


def passive_names(data: bytes) -> list[str]:
    names = []
    for channel, frame in methods(data):
        assert channel == PROBE_CHANNEL
        if isinstance(frame, commands.Queue.Declare | commands.Exchange.Declare):
            assert frame.passive
            names.append(
                frame.queue if isinstance(frame, commands.Queue.Declare) else frame.exchange
            )
    return names


NEEDS = [
    Need(Needed.QUEUE, "a", "consumed"),
    Need(Needed.QUEUE, "b", "parking lot"),
    Need(Needed.EXCHANGE, "c", "delay level"),
]


def test_the_probe_asks_everything_at_once_and_again_after_a_404_closed_its_channel() -> None:
    probe = Probe(NEEDS)
    first = probe.start()
    assert isinstance(methods(first)[0][1], commands.Channel.Open)
    assert passive_names(first) == ["a", "b", "c"]
    assert probe.receive(commands.Channel.OpenOk()) == b""
    assert probe.receive(commands.Queue.DeclareOk("a", 0, 0)) == b""
    again = probe.receive(commands.Channel.Close(404, "NOT_FOUND - no queue 'b'", 50, 10))
    kinds = [type(f) for _, f in methods(again)]
    assert kinds[:2] == [commands.Channel.CloseOk, commands.Channel.Open]
    assert passive_names(again) == ["c"], "only what was not answered"
    assert not probe.done
    end = probe.receive(commands.Exchange.DeclareOk())
    assert probe.done and [type(f) for _, f in methods(end)] == [commands.Channel.Close]
    assert [n.name for n in probe.missing] == ["b"]


def test_the_last_need_missing_ends_the_probe_and_another_refusal_says_the_broker_text() -> None:
    probe = Probe(NEEDS)
    probe.start()
    probe.receive(commands.Channel.Close(405, "RESOURCE_LOCKED - exclusive", 50, 10))
    probe.receive(commands.Queue.DeclareOk("b", 0, 0))
    probe.receive(commands.Channel.Close(404, "NOT_FOUND", 40, 10))
    assert probe.done and [n.name for n in probe.missing] == ["a", "c"]
    assert probe.missing[0].why == "consumed; the broker answered 405 RESOURCE_LOCKED - exclusive"


def test_broker_needs_are_missing_without_asking_and_no_question_means_done() -> None:
    version = Need(Needed.BROKER, "4.3", "needs RabbitMQ 4.3")
    probe = Probe([version])
    assert probe.done and probe.start() == b"" and probe.missing == [version]


# -- the session ----------------------------------------------------------------------------------


def session_at_channel_ready(check: StartCheck, version: str = "4.0.5") -> ConsumerSession:
    session = ConsumerSession(
        ConnectionSettings(vhost="shop"),
        ConfirmTracker(),
        MessageBuilder(),
        subscriptions=[Subscription("work")],
        prefetch=10,
        start_check=check,
    )
    start = commands.Connection.Start(
        server_properties={"product": "RabbitMQ", "version": version},
        mechanisms="PLAIN",
        locales="en_US",
    )
    session.receive(pamqp_frame.marshal(start, 0))
    session.state = State.OPENING_CHANNEL
    session.take_output()
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    return session


def consumes(data: bytes) -> list[str]:
    return [f.queue for _, f in methods(data) if isinstance(f, commands.Basic.Consume)]


def test_a_session_consumes_only_once_the_broker_answered_every_need() -> None:
    check = StartCheck([route("work", LADDER)], "spec.yaml")
    session = session_at_channel_ready(check)
    out = session.take_output()
    assert not session.ready and consumes(out) == []
    assert passive_names(out) == ["work", "work.retry.1s", "work.retry.2s", "work.parking"]
    for name in ("work", "work.retry.1s", "work.retry.2s", "work.parking"):
        session.receive(pamqp_frame.marshal(commands.Queue.DeclareOk(name, 0, 0), PROBE_CHANNEL))
    out = session.take_output()
    assert session.ready and check.passed and consumes(out) == ["work"]
    assert session.start_refused is None


def test_a_session_that_misses_something_closes_the_connection_without_consuming() -> None:
    check = StartCheck([route("work", LADDER)], "spec.yaml")
    session = session_at_channel_ready(check)
    session.take_output()
    session.receive(pamqp_frame.marshal(commands.Queue.DeclareOk("work", 0, 0), PROBE_CHANNEL))
    closed = commands.Channel.Close(404, "NOT_FOUND", 50, 10)
    session.receive(pamqp_frame.marshal(closed, PROBE_CHANNEL))
    for name in ("work.retry.2s", "work.parking"):
        session.receive(pamqp_frame.marshal(commands.Queue.DeclareOk(name, 0, 0), PROBE_CHANNEL))
    out = session.take_output()
    assert consumes(out) == [] and not session.ready and not check.passed
    assert isinstance(methods(out)[-1][1], commands.Connection.Close)
    assert session.state is State.CLOSING
    refused = session.start_refused
    assert refused is not None and [n.name for n in refused.missing] == ["work.retry.1s"]
    assert "vhost 'shop' on amqp://guest@localhost:5672 lacks queue 'work.retry.1s'" in str(refused)


def test_a_retry_via_the_broker_on_4_0_is_refused_before_any_question() -> None:
    session = session_at_channel_ready(StartCheck([route("jobs", VIA_BROKER)]), "4.0.5")
    out = session.take_output()
    assert consumes(out) == [] and passive_names(out[: len(out)]) != []
    for name in ("jobs", "jobs.parking"):
        session.receive(pamqp_frame.marshal(commands.Queue.DeclareOk(name, 0, 0), PROBE_CHANNEL))
    refused = session.start_refused
    assert refused is not None and "needs RabbitMQ 4.3 or newer" in str(refused)
    assert consumes(session.take_output()) == []


def test_a_check_that_passed_is_not_run_again_on_a_reconnect() -> None:
    check = StartCheck([route("work")])
    check.passed = True
    session = session_at_channel_ready(check)
    assert session.ready and consumes(session.take_output()) == ["work"]


# -- what a via-broker failure logs -----------------------------------------------------------------


def test_a_via_broker_failure_logs_what_the_worker_did_not_a_delay_or_a_parking(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pamqp import body, header

    app = App()
    app.add("jobs", lambda m: None, retry=VIA_BROKER)
    core = WorkerCore(app, ConnectionSettings(), WorkerOptions(prefetch=10))
    core.start_check.passed = True
    session = core.new_session()
    session.state = State.OPENING_CHANNEL
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    caplog.set_level(logging.WARNING, "rabbitry.worker")
    for tag, count in ((1, 0), (2, 2)):  # the first attempt, then the last of 3
        props = commands.Basic.Properties(headers={"x-delivery-count": count})
        data = pamqp_frame.marshal(commands.Basic.Deliver("rabbitry.0", tag, False, "", "jobs"), 1)
        data += pamqp_frame.marshal(header.ContentHeader(0, 1, props), 1)
        data += pamqp_frame.marshal(body.ContentBody(b"x"), 1)
        session.receive(data)
        (message,) = session.inbox
        session.inbox.clear()
        core.admit(message)
        core.conclude(message, RuntimeError("boom"), 0.0)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].endswith("returned to the broker for retry (reject with requeue)")
    assert "at its last attempt, for the broker to dead-letter" in lines[1]
    assert not any("retry in" in line or "parked" in line for line in lines), lines


# -- stopping the asyncio worker ------------------------------------------------------------------


def test_await_stop_of_a_worker_that_is_not_running_returns_at_once_and_not_awaiting_is_fine() -> (
    None
):
    app = App()
    app.add("a", lambda m: None)
    worker = AsyncWorker(app)

    async def main() -> None:
        await worker.stop()
        await worker.stop()

    asyncio.run(main())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AsyncWorker(app).stop()  # from a signal handler or plain code: nothing to await


# -- gone while the worker runs -------------------------------------------------------------------


def test_a_copy_returned_unroutable_from_the_default_exchange_names_the_queue_gone() -> None:
    from rabbitry.consumer.preflight import Need, Needed, lost_need
    from rabbitry.errors import Unroutable

    error = Unroutable("message m to (default exchange) [work.parking]: reached no queue")
    assert lost_need(error, "", "work.parking", "parking lot of 'work'") == Need(
        Needed.QUEUE, "work.parking", "parking lot of 'work'"
    )


def test_a_copy_refused_with_404_or_lost_in_delay_levels_names_the_exchange() -> None:
    from rabbitry.amqp.errors import ExchangeNotFound
    from rabbitry.consumer.preflight import Needed, lost_need
    from rabbitry.errors import Unroutable

    refused = lost_need(ExchangeNotFound("404", 404), "d.layout.x", "0.0.work", "delay levels")
    assert refused is not None and (refused.kind, refused.name) == (Needed.EXCHANGE, "d.layout.x")
    through = lost_need(Unroutable("no queue"), "d.layout.x", "0.0.work", "delay levels")
    assert through is not None and "reached no queue" in through.why


def test_a_nack_or_another_channel_error_is_no_missing_object() -> None:
    from rabbitry.amqp.errors import ChannelClosed
    from rabbitry.consumer.preflight import lost_need
    from rabbitry.errors import Nacked

    assert lost_need(Nacked("nacked"), "", "work.parking", "parking lot") is None
    assert lost_need(ChannelClosed("406", 406), "", "work.parking", "parking lot") is None
    assert lost_need(None, "", "work.parking", "parking lot") is None


def test_the_stop_names_what_went_away_the_queue_of_the_message_and_the_command() -> None:
    from rabbitry.consumer.preflight import Need, Needed, TopologyMissing, topology_lost

    need = Need(Needed.QUEUE, "work.parking", "parking lot of 'work'")
    lost = topology_lost([need], "vhost 'shop' on amqp://rabbit:5672", "spec.yaml", "work")
    assert isinstance(lost, TopologyMissing) and lost.missing == [need]
    assert str(lost) == (
        "the worker stopped consuming: vhost 'shop' on amqp://rabbit:5672 lacks queue"
        " 'work.parking' (parking lot of 'work'), gone while the worker ran; the failed message"
        " of 'work' that needed it is back in its queue: run `rabbitry apply spec.yaml` to make"
        " it, then start the worker again"
    )


def test_a_delay_with_lanes_needs_every_lane_queue_of_every_level() -> None:
    lanes = QueueRetry("mail", POLICY, "mail.parking", delay=BinaryDelays("d", 100, 2, lanes=2))
    needs = named(needs_of([route("mail", lanes)], RABBITMQ_4_0))
    assert [n for k, n in needs if k == "queue" and n.startswith("d.")] == [
        "d.00.0",
        "d.00.1",
        "d.01.0",
        "d.01.1",
    ]
    assert ("exchange", "d.layout.binary-100ms-2-2lanes") in needs
