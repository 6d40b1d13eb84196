"""The kill switch rule, pure: closed -> open -> half-open -> closed or open, on a given clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitry.consumer.kill_switch import KillSwitch, QueueKillSwitch, SwitchState

SETTINGS = KillSwitch(failure_ratio=0.5, window_s=10.0, min_messages=4, cool_down_s=30.0, probes=2)


def feed(switch: QueueKillSwitch, outcomes: str, now: float, step: float = 0.0) -> list[str]:
    """Record outcomes (``f`` failed, ``s`` succeeded); the states entered, in order."""
    entered = []
    for i, outcome in enumerate(outcomes):
        turn = switch.record(outcome == "f", now + i * step)
        if turn is not None:
            entered.append(turn.state.value)
    return entered


@pytest.mark.parametrize(
    ("outcomes", "entered", "state"),
    [
        ("fff", [], SwitchState.CLOSED),  # below min_messages: never trips
        ("ffff", ["open"], SwitchState.OPEN),  # 4 of 4 at min_messages
        ("sfsf", ["open"], SwitchState.OPEN),  # exactly the ratio trips
        ("sssf", [], SwitchState.CLOSED),  # 1 of 4 is below it
        ("ssssfff", [], SwitchState.CLOSED),  # 3 of 7
        ("ssssffff", ["open"], SwitchState.OPEN),  # 4 of 8
        ("ffffffff", ["open"], SwitchState.OPEN),  # outcomes while open change nothing
    ],
)
def test_a_closed_switch_trips_at_the_ratio_once_it_counted_min_messages(
    outcomes: str, entered: list[str], state: SwitchState
) -> None:
    switch = QueueKillSwitch(SETTINGS)
    assert feed(switch, outcomes, now=100.0) == entered
    assert switch.state is state
    assert switch.trips == (1 if state is SwitchState.OPEN else 0)


def test_the_trip_says_its_counts_and_when_the_cool_down_ends() -> None:
    switch = QueueKillSwitch(SETTINGS)
    turns = [switch.record(failed, 50.0) for failed in (True, False, True, True)]
    trip = turns[-1]
    assert trip is not None and trip.state is SwitchState.OPEN
    assert (trip.failures, trip.handled, trip.ratio) == (3, 4, 0.75)
    assert trip.window_s == 10.0 and trip.reopens_at == 80.0
    assert not switch.due(79.9) and switch.due(80.0)


def test_outcomes_older_than_the_window_leave_it() -> None:
    switch = QueueKillSwitch(SETTINGS)
    assert feed(switch, "fff", now=0.0) == []
    # 10.5 s later the first three failures have left the 10 s window: 1 failure of 2
    assert feed(switch, "fs", now=10.5) == []
    assert switch.counts == (2, 1)
    assert feed(switch, "ff", now=10.6) == ["open"], "3 failures of 4 within the window"


def test_the_window_moves_a_tenth_at_a_time() -> None:
    switch = QueueKillSwitch(SETTINGS)
    switch.record(True, 0.0)  # slice 0 (0.0-1.0 s)
    switch.record(False, 9.99)  # slice 9: slice 0 is still in
    assert switch.counts == (2, 1)
    switch.record(False, 10.0)  # slice 10: slice 0 leaves whole
    assert switch.counts == (2, 0)


def test_after_the_cool_down_it_resumes_half_open_and_one_failure_trips_it_at_once() -> None:
    switch = QueueKillSwitch(SETTINGS)
    feed(switch, "ffff", now=0.0)
    assert switch.resume().state is SwitchState.HALF_OPEN
    assert switch.reopens_at is None
    turn = switch.record(True, 30.0)
    assert turn is not None and turn.state is SwitchState.OPEN
    assert (turn.failures, turn.handled) == (1, 1), "min_messages does not hold half-open"
    assert switch.trips == 2 and switch.reopens_at == 60.0


def test_half_open_closes_after_probes_successes_with_a_fresh_window() -> None:
    switch = QueueKillSwitch(SETTINGS)
    feed(switch, "ffff", now=0.0)
    switch.resume()
    assert feed(switch, "ss", now=31.0) == ["closed"]
    assert switch.state is SwitchState.CLOSED and switch.counts == (0, 0)
    assert feed(switch, "fff", now=31.0) == [], "the old failures do not count again"


def test_a_failure_after_some_probes_trips_again() -> None:
    switch = QueueKillSwitch(KillSwitch(min_messages=1, probes=3))
    switch.record(True, 0.0)
    switch.resume()
    assert feed(switch, "ssf", now=31.0) == ["open"]


def test_only_an_open_switch_resumes() -> None:
    with pytest.raises(ValueError, match="only an open kill switch resumes"):
        QueueKillSwitch(SETTINGS).resume()


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"failure_ratio": 0}, "failure_ratio must be above 0 and at most 1"),
        ({"failure_ratio": 1.5}, "failure_ratio must be above 0 and at most 1"),
        ({"window_s": 0}, "window_s must be a positive number of seconds"),
        ({"cool_down_s": float("inf")}, "cool_down_s must be a positive number"),
        ({"min_messages": 0}, "min_messages must be a whole number of at least 1"),
        ({"probes": 1.5}, "probes must be a whole number of at least 1"),
    ],
)
def test_settings_that_cannot_work_are_refused_with_what_to_give(
    keywords: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KillSwitch(**keywords)  # type: ignore[arg-type]


@given(
    outcomes=st.lists(st.tuples(st.booleans(), st.floats(0, 5)), max_size=200),
    ratio=st.floats(0.05, 1.0),
    min_messages=st.integers(1, 30),
)
def test_a_closed_switch_trips_exactly_when_the_window_it_counted_passes_the_threshold(
    outcomes: list[tuple[bool, float]], ratio: float, min_messages: int
) -> None:
    """Against a plain recount of the outcomes in the window, one outcome at a time."""
    settings = KillSwitch(failure_ratio=ratio, window_s=10.0, min_messages=min_messages)
    switch = QueueKillSwitch(settings)
    now = 0.0
    seen: list[tuple[int, bool]] = []  # (slice, failed) since the last trip
    for failed, gap in outcomes:
        now += gap
        number = int(now * 10 // 10.0)
        seen = [(n, f) for n, f in seen if n > number - 10] + [(number, failed)]
        handled, failures = len(seen), sum(f for _, f in seen)
        expect_trip = handled >= min_messages and failures >= ratio * handled
        turn = switch.record(failed, now)
        assert (turn is not None) == expect_trip
        if expect_trip:
            assert turn is not None and (turn.handled, turn.failures) == (handled, failures)
            switch.resume()
            for _ in range(settings.probes):
                switch.record(False, now)
            assert switch.state is SwitchState.CLOSED
            seen = []
        else:
            assert switch.counts == (handled, failures)
