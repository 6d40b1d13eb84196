"""The delay encoder: round-trips, never early, and routes through exactly the set bits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitry.amqp.topic import topic_matches
from rabbitry.policies.delay import (
    CLASSIC_FIXED_LEVELS_MS,
    BinaryDelays,
    DelayError,
    FixedDelays,
    is_level_object,
    layout_exchange,
    levels_for,
    parse_layout_exchange,
)


def simulate(
    scheme: BinaryDelays, entry: str, key: str, address: str, queues: list[str] | None = None
) -> list[int]:
    """Follow bindings from ``entry``: returns the levels whose queue the message sits in (and
    appends each such queue's name to ``queues``)."""
    visited: list[int] = []
    assert entry == scheme.layout_exchange  # every delayed message enters through the mark
    entries = [scheme.level_exchange(k) for k in range(scheme.levels)] + [scheme.delivery_exchange]
    patterns = [scheme.entry_pattern(k) for k in range(scheme.levels)] + [scheme.no_delay_pattern]
    [exchange] = [e for e, p in zip(entries, patterns, strict=True) if topic_matches(p, key)]
    while exchange != scheme.delivery_exchange:
        level = int(exchange.rsplit(".", 1)[1])
        lanes = range(scheme.lanes)
        held = [lane for lane in lanes if topic_matches(scheme.queue_pattern(level, lane), key)]
        skips = topic_matches(scheme.skip_pattern(level), key)
        assert len(held) <= 1, "at most one lane's queue holds a message"
        assert bool(held) != skips, "exactly one way out of every level"
        if held:
            visited.append(level)
            if queues is not None:
                queues.append(scheme.level_queue(level, held[0]))
        # the level queue dead-letters (and the skip binding leads) to the next exchange down
        exchange = scheme.level_exchange(level - 1) if level else scheme.delivery_exchange
    assert topic_matches(scheme.delivery_pattern(address), key)
    return visited


def test_topic_matcher_agrees_with_amqp_rules() -> None:
    assert topic_matches("*.1.#", "0.1.0.q")
    assert topic_matches("*.1.#", "0.1")
    assert not topic_matches("*.1.#", "1.0.0.q")
    assert topic_matches("*.*.q", "0.1.q") and not topic_matches("*.*.q", "0.1.x.q")


@given(st.integers(min_value=0, max_value=(1 << 12) - 1), st.sampled_from(["work", "a.b.c", "x-y"]))
def test_every_delay_routes_through_exactly_its_set_bits(ticks: int, address: str) -> None:
    scheme = BinaryDelays("delay", unit_ms=100, levels=12)
    route = scheme.route(timedelta(milliseconds=ticks * 100), address)
    assert scheme.decode(route.routing_key) == (ticks, address)
    visited = simulate(scheme, route.exchange, route.routing_key, address)
    assert sorted(visited, reverse=True) == visited
    assert sum(scheme.level_ttl_ms(level) for level in visited) == ticks * 100
    assert visited == [k for k in range(12) if ticks >> k & 1][::-1]


@given(st.floats(min_value=0, max_value=(2**20 - 1) * 250.0, allow_nan=False))
def test_rounding_is_never_early_and_under_one_unit_late(ms: float) -> None:
    scheme = BinaryDelays("d", unit_ms=250, levels=20)
    route = scheme.route(ms / 1000, "q")  # seconds: timedelta would truncate to microseconds
    assert route.delay_ms >= ms - 1e-6
    assert route.delay_ms - ms <= 250  # < one unit, but floats round 250 - 1e-143 to 250
    ticks, _ = scheme.decode(route.routing_key)
    assert ticks * 250 == route.delay_ms


def test_zero_delay_goes_straight_to_delivery_and_limits_are_enforced() -> None:
    scheme = BinaryDelays("d", unit_ms=1000, levels=3)
    assert scheme.route(0, "q").exchange == "d.layout.binary-1000ms-3"
    assert topic_matches(scheme.no_delay_pattern, scheme.route(0, "q").routing_key)
    assert scheme.route(7, "q").exchange == "d.layout.binary-1000ms-3"
    assert topic_matches(scheme.entry_pattern(2), scheme.route(7, "q").routing_key)
    with pytest.raises(DelayError, match="at most 7000 ms"):
        scheme.route(7.5, "q")
    with pytest.raises(DelayError, match="negative"):
        scheme.route(-1, "q")
    with pytest.raises(DelayError, match="address"):
        scheme.route(1, "a.#")


def test_28_levels_of_a_second_reach_about_eight_and_a_half_years() -> None:
    years = BinaryDelays("d").max_delay_ms / 1000 / 86400 / 365
    assert 8.4 < years < 8.6
    assert levels_for(30 * 86400 * 1000, 1000) == 22


@given(st.floats(min_value=0, max_value=7200 * 1000, allow_nan=False))
def test_fixed_levels_round_up_to_the_next_level(ms: float) -> None:
    scheme = FixedDelays("fixed", CLASSIC_FIXED_LEVELS_MS)
    route = scheme.route(ms / 1000, "work")
    assert route.delay_ms >= ms - 1e-6
    index = int(route.routing_key.split(".")[0])
    assert index == 0 or CLASSIC_FIXED_LEVELS_MS[index - 1] < ms
    assert topic_matches(scheme.queue_pattern(index), route.routing_key)
    assert topic_matches(scheme.delivery_pattern("work"), route.routing_key)


def test_fixed_levels_reject_beyond_last_or_inexact_when_asked() -> None:
    assert len(CLASSIC_FIXED_LEVELS_MS) == 18
    scheme = FixedDelays("f", (1000, 5000), round_up=False)
    assert scheme.route(5, "q").delay_ms == 5000
    with pytest.raises(DelayError, match="rounding up is off"):
        scheme.route(3, "q")
    with pytest.raises(DelayError, match="no fixed delay level"):
        FixedDelays("f", (1000,)).route(2, "q")
    with pytest.raises(DelayError, match="ascending"):
        FixedDelays("f", (5000, 1000))


def test_a_delay_past_the_declared_max_is_refused_though_the_levels_reach_further() -> None:
    # max 10 s in 100 ms units needs 7 levels, which reach 12.7 s: the max still holds
    scheme = BinaryDelays("later", unit_ms=100, levels=7, max_ms=10_000)
    assert scheme.max_delay_ms == 10_000
    assert scheme.route(10, "q").delay_ms == 10_000
    assert scheme.route(timedelta(milliseconds=9_950), "q").delay_ms == 10_000
    for beyond in (10.001, 12.7):
        with pytest.raises(DelayError, match=r"declared max of 10000 ms of delay 'later'") as e:
            scheme.route(beyond, "q")
        assert "raise its `max`" in str(e.value)
    with pytest.raises(DelayError, match="max must be positive"):
        BinaryDelays("later", max_ms=0)


def test_a_key_of_one_more_level_matches_no_way_out_of_level_zero_of_the_old_layout() -> None:
    # why a relayout strands: a 3 s delay keyed for 22 levels, dead-lettered into level 0 of
    # 23 levels, reads its address as bit 0; nothing matches and at-least-once keeps it
    old, new = BinaryDelays("d", levels=22), BinaryDelays("d", levels=23)
    key = old.route(3, "work").routing_key
    assert not topic_matches(new.queue_pattern(0), key)
    assert not topic_matches(new.skip_pattern(0), key)
    assert not topic_matches(new.delivery_pattern("work"), key)


def test_the_layout_names_what_the_routing_keys_depend_on_and_nothing_else() -> None:
    base = BinaryDelays("d", unit_ms=1000, levels=22, max_ms=30 * 86_400_000)
    assert base.layout == "binary-1000ms-22"
    assert base.layout_exchange == "d.layout.binary-1000ms-22"
    # another max within the same levels routes alike
    assert BinaryDelays("d", unit_ms=1000, levels=22, max_ms=1000).layout == base.layout
    assert BinaryDelays("d", unit_ms=1000, levels=23).layout != base.layout  # 30d -> 60d
    assert BinaryDelays("d", unit_ms=500, levels=22).layout != base.layout
    fixed = FixedDelays("f", (1000, 2000))
    assert fixed.layout.startswith("fixed-2-") and len(fixed.layout) == len("fixed-2-") + 12
    assert FixedDelays("f", (1000, 2000), round_up=False).layout == fixed.layout
    assert FixedDelays("f", (1000, 3000)).layout != fixed.layout
    assert FixedDelays("f", CLASSIC_FIXED_LEVELS_MS).layout != fixed.layout


def test_a_marker_exchange_name_reads_back_as_its_delay_and_layout() -> None:
    for scheme in (BinaryDelays("a.b", levels=5), FixedDelays("retry", (1000,))):
        assert parse_layout_exchange(scheme.layout_exchange) == (scheme.prefix, scheme.layout)
    assert parse_layout_exchange(layout_exchange("x", "binary-1ms-1")) == ("x", "binary-1ms-1")
    for other in ("d.00", "d.deliver", "d.layout", "d.layout.v2", "d.layout.binary-1ms-"):
        assert parse_layout_exchange(other) is None


def test_level_objects_are_the_numbered_levels_and_a_fixed_entry_exchange() -> None:
    assert is_level_object("d", "d.00") and is_level_object("d", "d.27")
    assert is_level_object("d", "d")  # a fixed delay's entry exchange
    for other in ("d.deliver", "d.parking", "d.unroutable", "d.to.x", "d.layout.binary-1ms-1"):
        assert not is_level_object("d", other)
    assert not is_level_object("d", "e.00") and not is_level_object("d", "d.x.00")
    assert not is_level_object("d", "d.1") and not is_level_object("d", "dd.01")


@given(
    st.integers(min_value=0, max_value=(1 << 8) - 1),
    st.integers(min_value=1, max_value=16),
    st.integers(min_value=0, max_value=1000),
    st.sampled_from(["work", "a.b.c"]),
)
def test_a_lane_keeps_its_messages_from_level_to_level(
    ticks: int, lanes: int, turn: int, address: str
) -> None:
    scheme = BinaryDelays("delay", unit_ms=100, levels=8, lanes=lanes)
    route = scheme.route(timedelta(milliseconds=ticks * 100), address, turn)
    assert scheme.decode_lane(route.routing_key) == (ticks, address, turn % lanes)
    queues: list[str] = []
    visited = simulate(scheme, route.exchange, route.routing_key, address, queues)
    assert visited == [k for k in range(8) if ticks >> k & 1][::-1]
    assert queues == [scheme.level_queue(level, turn % lanes) for level in visited]


def test_one_lane_is_the_layout_before_lanes_and_more_lanes_are_another_layout() -> None:
    one, three = BinaryDelays("d", levels=4), BinaryDelays("d", levels=4, lanes=3)
    assert one.route(5, "q", 7).routing_key == "0.1.0.1.q"  # no lane word
    assert three.route(5, "q", 7).routing_key == "1.0.1.0.1.q"
    assert one.level_queues(2) == ("d.02",)
    assert three.level_queues(2) == ("d.02.0", "d.02.1", "d.02.2")
    assert one.layout == "binary-1000ms-4" and three.layout == "binary-1000ms-4-3lanes"
    assert parse_layout_exchange(three.layout_exchange) == ("d", "binary-1000ms-4-3lanes")
    assert is_level_object("d", "d.02.1") and not is_level_object("d", "d.02.x")
    # a key of one lane, dead-lettered into the levels of three, matches nothing: a relayout
    key = one.route(1, "q").routing_key
    assert not any(topic_matches(three.queue_pattern(0, lane), key) for lane in range(3))
    assert not topic_matches(three.skip_pattern(0), key)
    with pytest.raises(DelayError, match="lanes must be between 1 and 16"):
        BinaryDelays("d", lanes=17)
    with pytest.raises(DelayError, match="not a key of delay layout"):
        three.decode("3.0.1.0.1.q")
