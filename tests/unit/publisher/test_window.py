"""The adaptive window's rule: shrink when confirms slow down, grow while they stay fast."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitry.amqp.confirms import Latency
from rabbitry.publisher.window import AdaptiveWindow, WindowRule, next_window

RULE = WindowRule(start=64, floor=16, ceiling=512, allowance=0.005, ratio=3.0)


# One round of the rule: (window, latency s, base s, window filled, the new window), and why.
ROUNDS: list[tuple[int, float, float, bool, int, str]] = [
    (64, 0.003, 0.001, True, 72, "a full round under the target grows the window by an eighth"),
    (500, 0.002, 0.001, True, 512, "growth stops at the ceiling"),
    (512, 0.002, 0.001, True, 512, "a window at the ceiling stays there"),
    (64, 0.002, 0.001, False, 64, "a round that did not fill the window leaves it as it is"),
    # target 6 ms, measured 7 ms: six sevenths of the window
    (700, 0.007, 0.001, True, 600, "latency above the target shrinks it in proportion"),
    (400, 0.600, 0.001, True, 300, "one slow round shrinks it by a quarter at most"),
    (20, 0.600, 0.001, True, 16, "the window never shrinks below the floor"),
    # 40 ms of network round trip is base, not queueing: 150 ms is under 40 + 3 * 40
    (256, 0.150, 0.040, True, 288, "a long round trip raises the target (remote broker)"),
    # the queueing allowed is 5 ms or three times the base, whichever is more
    (100, 0.0059, 0.001, True, 112, "1 + 5 ms is still under the target"),
    (100, 0.0399, 0.010, True, 112, "10 + 30 ms is still under the target"),
]


@pytest.mark.parametrize(
    ("window", "latency", "base", "full", "expected"),
    [pytest.param(*case[:5], id=case[5]) for case in ROUNDS],
)
def test_one_round_moves_the_window(
    window: int, latency: float, base: float, full: bool, expected: int
) -> None:
    assert next_window(window, latency, base, full, RULE) == expected


@pytest.mark.parametrize(("latency", "base"), [(0.0061, 0.001), (0.0401, 0.010)])
def test_a_round_just_over_the_target_shrinks_the_window(latency: float, base: float) -> None:
    assert next_window(100, latency, base, True, RULE) < 100


def test_the_rule_rejects_bounds_that_cannot_hold() -> None:
    with pytest.raises(ValueError, match="floor <= start <= ceiling"):
        WindowRule(start=8, floor=16)
    with pytest.raises(ValueError, match="allowance must be positive and ratio not negative"):
        WindowRule(allowance=0)
    with pytest.raises(ValueError, match="allowance must be positive and ratio not negative"):
        WindowRule(ratio=-1)
    with pytest.raises(ValueError, match="probe_every, sustained and delayed must be at least 1"):
        WindowRule(probe_every=0)
    with pytest.raises(ValueError, match="probe_every, sustained and delayed must be at least 1"):
        WindowRule(sustained=0)
    with pytest.raises(ValueError, match="probe_every, sustained and delayed must be at least 1"):
        WindowRule(delayed=0)


@given(
    window=st.integers(16, 512),
    latency=st.floats(0, 10, allow_nan=False),
    base=st.floats(0, 10, allow_nan=False),
    full=st.booleans(),
)
def test_the_window_stays_within_its_bounds_and_moves_the_right_way(
    window: int, latency: float, base: float, full: bool
) -> None:
    new = next_window(window, latency, base, full, RULE)
    assert RULE.floor <= new <= RULE.ceiling
    if latency > base + max(RULE.allowance, RULE.ratio * base):
        assert new <= window
    else:
        assert new >= window


def outside_probes(windows: list[int]) -> list[int]:
    """The windows of ordinary rounds (a probe's rounds run at the floor)."""
    return [w for w in windows if w != RULE.floor]


def full_round(adaptive: AdaptiveWindow, latency: Latency, seconds: float) -> None:
    """One window's worth of confirms, each taking ``seconds``, with the window kept full."""
    adaptive.filled()
    for _ in range(adaptive.window):
        latency.observe(seconds)
        adaptive.update(latency)


def test_the_window_settles_where_confirms_take_the_target() -> None:
    """A broker that confirms in (window / 32,000) s, 1 ms at least: base is what the probes
    measure at the floor (1 ms), the target 1 + max(5, 3 * 1) = 6 ms, and the window settles
    near rate * target, about 192 messages, under the sawtooth of its rounds (rounds that never
    come in a long full streak: no bulk load)."""
    adaptive = AdaptiveWindow(WindowRule(sustained=10_000))
    latency = Latency()
    seen = []
    for _ in range(200):
        full_round(adaptive, latency, max(0.001, adaptive.window / 32_000))
        seen.append(adaptive.window)
    settled = outside_probes(seen[-40:])
    assert adaptive.base == pytest.approx(0.001)
    assert 170 <= min(settled) <= max(settled) <= 240


def broker_latency(window: int, load: float) -> float:
    """A broker that confirms 32,000 messages a second, plus what the host's load adds."""
    return load + max(0.001, window / 32_000)


def test_a_loaded_host_raises_the_base_instead_of_collapsing_the_window() -> None:
    """The base measured on a quiet host (2 ms) would make every round on a host whose load
    adds 18 ms look queued; the probes measure the base again and the window settles near
    rate * (base + allowance) for the new base (rounds never in a long full streak)."""
    adaptive = AdaptiveWindow(WindowRule(sustained=10_000))
    latency = Latency()
    for _ in range(200):
        full_round(adaptive, latency, broker_latency(adaptive.window, 0.0))
    quiet = adaptive.window
    seen = []
    for _ in range(400):
        full_round(adaptive, latency, broker_latency(adaptive.window, 0.018))
        seen.append(adaptive.window)
    assert adaptive.base > 0.018
    assert min(outside_probes(seen[-100:])) >= 100 and quiet >= 100
    assert max(seen[-100:]) <= RULE.ceiling


def test_the_window_does_not_creep_up_when_every_round_is_as_slow_as_the_last() -> None:
    """Latency that grows with the window keeps it bounded, probes or not, while rounds do
    not come in a long full streak."""
    adaptive = AdaptiveWindow(WindowRule(sustained=10_000))
    latency = Latency()
    for _ in range(1_000):
        full_round(adaptive, latency, broker_latency(adaptive.window, 0.0))
    assert adaptive.window <= 320


def test_a_stream_that_keeps_the_window_full_is_a_bulk_load_and_grows_to_the_ceiling() -> None:
    assert next_window(200, 0.050, 0.001, True, RULE, streak=RULE.sustained - 1) < 200
    assert next_window(200, 0.050, 0.001, True, RULE, streak=RULE.sustained) == 225
    assert next_window(500, 0.050, 0.001, True, RULE, streak=100) == 512


def test_a_burst_stays_near_the_target_and_a_long_stream_reaches_the_full_window() -> None:
    adaptive = AdaptiveWindow(RULE)
    latency = Latency()
    sent, windows = 0, []
    while sent < 60_000:
        full_round(adaptive, latency, broker_latency(adaptive.window, 0.0))
        sent += adaptive.window
        windows.append((sent, adaptive.window))
    assert max(w for n, w in windows if n <= 3_000) <= 300  # a burst of 3,000: near the target
    assert outside_probes([w for n, w in windows if n > 30_000])[-1] == RULE.ceiling


def test_a_round_that_does_not_fill_the_window_ends_the_stream() -> None:
    adaptive = AdaptiveWindow(RULE)
    latency = Latency()
    for _ in range(100):
        full_round(adaptive, latency, broker_latency(adaptive.window, 0.0))
    assert adaptive.window > 400
    for _ in range(adaptive.window):  # one round not filled, slow: the window shrinks again
        latency.observe(0.05)
        adaptive.update(latency)
    for _ in range(3):
        full_round(adaptive, latency, broker_latency(adaptive.window, 0.0))
    assert adaptive.window < 400


def test_an_idle_publisher_does_not_grow_a_window_it_never_filled() -> None:
    adaptive = AdaptiveWindow(RULE)
    latency = Latency()
    for _ in range(1_000):  # one message at a time, confirmed in 1 ms
        latency.observe(0.001)
        adaptive.update(latency)
    assert adaptive.window == RULE.start


def test_a_delayed_message_gets_at_most_the_rules_delayed_limit() -> None:
    adaptive = AdaptiveWindow(WindowRule(start=64, delayed=32))
    assert adaptive.limit(delayed=False) == 64 and adaptive.limit(delayed=True) == 32
    adaptive.window = 20  # a window shrunk below the limit stays the limit
    assert adaptive.limit(delayed=True) == 20
