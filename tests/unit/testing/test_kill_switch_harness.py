"""A handler's kill switch in the handler harness: the worker's own core trips it, holds what
comes while it is open, half-opens it after the cool-down and hands the held messages over first;
the other handlers go on. Both ways in: ``deliver`` (``Worker``'s) and ``deliver_async``
(``AsyncWorker``'s dispatch)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from rabbitry.consumer import App, AppError, IncomingMessage, KillSwitch, SwitchState
from rabbitry.metrics import RabbitryCollector
from rabbitry.testing import HandlerHarness
from rabbitry.topology.patterns.retries import QueueRetry
from tests.unit.testing.retries import queue_retry

SWITCH = KillSwitch(failure_ratio=0.5, window_s=60, min_messages=4, cool_down_s=30, probes=2)


def retry_of(queue: str) -> QueueRetry:
    return queue_retry(queue, 1000, attempts=5)


class Dependency:
    def __init__(self) -> None:
        self.up = False
        self.calls = 0

    def call(self) -> None:
        self.calls += 1
        if not self.up:
            raise ConnectionError("payments API refused the connection")


def app_with(dependency: Dependency) -> App:
    app = App()

    @app.handler("payments", retry=retry_of("payments"), kill_switch=SWITCH)
    def pay(message: object) -> None:
        dependency.call()

    @app.handler("emails", retry=retry_of("emails"))
    def send(message: object) -> None:
        pass

    return app


def test_the_switch_trips_at_the_threshold_holds_what_follows_and_other_queues_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dependency = Dependency()
    harness = HandlerHarness(app_with(dependency))
    with caplog.at_level(logging.INFO, logger="rabbitry.worker"):
        failed = [harness.deliver("payments", b"x") for _ in range(4)]
    assert all(o.retried for o in failed), "the failures before the trip retry as ever"
    assert harness.kill_switch("payments") is SwitchState.OPEN
    tripped = [r for r in caplog.records if "tripped" in r.getMessage()]
    assert len(tripped) == 1
    assert "4 of 4 handled messages failed (100%, threshold 50%) in the last 60 s" in (
        tripped[0].getMessage()
    )
    held = [harness.deliver("payments", b"y") for _ in range(3)]
    assert all(o.held and o.copy is None for o in held)
    assert dependency.calls == 4, "no handler ran while the switch was open"
    assert harness.deliver("emails", b"z").acked, "another queue of the worker goes on"
    counters = harness.metrics["payments"]
    assert (counters.kill_switch, counters.kill_switch_trips) == ("open", 1)
    assert sum(counters.retried.values()) == 4 and counters.parked == 0


def test_after_the_cool_down_the_held_messages_go_first_and_a_failure_trips_it_at_once() -> None:
    dependency = Dependency()
    harness = HandlerHarness(app_with(dependency))
    for _ in range(4):
        harness.deliver("payments")
    held = [harness.deliver("payments", message_id=f"m{i}") for i in range(3)]
    assert harness.advance(29.0) == [], "not before the cool-down"
    outcomes = harness.advance(1.0)
    assert [o.message.message_id for o in outcomes] == ["m0", "m1", "m2"]
    assert outcomes[0].retried, "half-open: the first held message is tried, fails"
    assert [o.held for o in outcomes] == [False, True, True], "and trips the switch at once"
    assert harness.kill_switch("payments") is SwitchState.OPEN
    assert harness.metrics["payments"].kill_switch_trips == 2
    assert dependency.calls == 5
    assert held[0].message is outcomes[0].message


def test_successes_after_the_cool_down_close_the_switch(caplog: pytest.LogCaptureFixture) -> None:
    dependency = Dependency()
    harness = HandlerHarness(app_with(dependency))
    for _ in range(4):
        harness.deliver("payments")
    harness.deliver("payments")
    dependency.up = True
    with caplog.at_level(logging.INFO, logger="rabbitry.worker"):
        resumed = harness.advance(30.0)
        assert [o.acked for o in resumed] == [True]
        assert harness.kill_switch("payments") is SwitchState.HALF_OPEN
        assert harness.deliver("payments").acked
    assert harness.kill_switch("payments") is SwitchState.CLOSED
    lines = [r.getMessage() for r in caplog.records]
    assert any("half-open after its cool-down of 30 s" in line for line in lines)
    assert any("closed: 2 messages succeeded after resuming" in line for line in lines)


def test_the_async_dispatch_holds_and_hands_over_the_same_way() -> None:
    dependency = Dependency()
    harness = HandlerHarness(app_with(dependency))

    async def scenario() -> list[bool]:
        for _ in range(4):
            assert (await harness.deliver_async("payments")).retried
        return [(await harness.deliver_async("payments")).held for _ in range(2)]

    assert asyncio.run(scenario()) == [True, True]
    assert dependency.calls == 4
    dependency.up = True
    assert [o.acked for o in harness.advance(30.0)] == [True, True]
    assert harness.kill_switch("payments") is SwitchState.CLOSED


def test_the_state_and_the_trips_are_prometheus_metrics() -> None:
    harness = HandlerHarness(app_with(Dependency()))
    for _ in range(4):
        harness.deliver("payments")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in RabbitryCollector(workers=[harness.metrics]).collect()
        for s in family.samples
    }
    state = "rabbitry_worker_kill_switch_state"
    v = ("vhost", harness.metrics.vhost)
    assert samples[(state, (("queue", "payments"), ("state", "open"), v))] == 1
    assert samples[(state, (("queue", "payments"), ("state", "closed"), v))] == 0
    assert not any(k[0] == state and ("queue", "emails") in k[1] for k in samples)
    assert samples[("rabbitry_worker_kill_switch_trips_total", (("queue", "payments"), v))] == 1


def test_a_harness_question_about_a_queue_without_a_switch_says_which_have_one() -> None:
    harness = HandlerHarness(app_with(Dependency()))
    with pytest.raises(
        AppError, match=r"'emails' has no kill switch \(handlers with one: payments"
    ):
        harness.kill_switch("emails")


def test_a_kill_switch_that_is_not_one_is_refused_where_the_handler_is_added() -> None:
    app = App()
    with pytest.raises(AppError, match=r"give a rabbitry\.consumer\.KillSwitch"):
        app.add("work", lambda m: None, kill_switch={"failure_ratio": 0.5})  # type: ignore[typeddict-item]


def test_the_example_of_docs_worker_md_runs_and_prints_what_the_docs_show(
    tmp_path: Path,
) -> None:
    text = (Path(__file__).parents[3] / "docs" / "worker.md").read_text()
    section = text[text.index("## Kill switch") :]
    code = section[section.index("# kill_switch_demo.py") : section.index("```\n")]
    shown = section[section.index("$ python kill_switch_demo.py\n") :]
    shown = shown[shown.index("\n") + 1 : shown.index("```")]
    (tmp_path / "kill_switch_demo.py").write_text(code)
    ran = subprocess.run(
        [sys.executable, "kill_switch_demo.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout == shown


def test_a_half_open_switch_runs_one_probe_at_a_time_and_holds_the_rest() -> None:
    app = App()
    gate = asyncio.Event()
    calls: list[str] = []

    @app.handler("payments", retry=retry_of("payments"), kill_switch=SWITCH)
    async def pay(message: IncomingMessage) -> None:
        calls.append(message.message_id or "")
        await gate.wait()
        if message.message_id and message.message_id.startswith("down"):
            raise ConnectionError("payments API refused the connection")

    harness = HandlerHarness(app)

    async def scenario() -> None:
        gate.set()
        for i in range(4):
            assert (await harness.deliver_async("payments", message_id=f"down-{i}")).retried
        assert harness.kill_switch("payments") is SwitchState.OPEN
        harness._offset += SWITCH.cool_down_s
        assert harness.core.resume_due() == []
        assert harness.kill_switch("payments") is SwitchState.HALF_OPEN
        gate.clear()
        probe = asyncio.ensure_future(harness.deliver_async("payments", message_id="up-0"))
        await asyncio.sleep(0)
        # bounded: without the probe rule the second handler would wait on the gate too
        held = await asyncio.wait_for(harness.deliver_async("payments", message_id="up-1"), 10)
        assert held.held, "a second handler does not start beside the probe"
        gate.set()
        assert (await probe).acked

    asyncio.run(scenario())
    assert calls == [*(f"down-{i}" for i in range(4)), "up-0"]
    assert [o.message.message_id for o in harness.advance(0)] == ["up-1"]
    assert harness.kill_switch("payments") is SwitchState.CLOSED, "two probes (probes=2)"
