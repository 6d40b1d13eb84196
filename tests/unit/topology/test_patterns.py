"""Delay and retry patterns: what a few spec lines expand into, and the checks around them."""

from __future__ import annotations

import pytest

from rabbitry.policies.delay import BinaryDelays, DelayError, FixedDelays
from rabbitry.topology import expand
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.retries import queue_retry
from rabbitry.topology.primitives import DestinationType, QueueType, Vhost

from .conftest import check, load, vhost_spec


def expanded(body: str) -> Vhost:
    return expand(load(vhost_spec(body))).vhosts[0]


BINARY = """
queues: [{name: due, type: quorum}]
exchanges: [{name: events, type: topic}]
delays:
  - name: delay
    unit: 1s
    max: 30d
    targets:
      - queue: due
      - {name: expired, exchange: events, routing_key: order.expired}
"""


def test_binary_levels_cover_max_and_chain_down_to_delivery() -> None:
    vhost = expanded(BINARY)
    levels = sorted(
        q.name for q in vhost.queues if q.name.startswith("delay.") and q.name[6:].isdigit()
    )
    assert levels == [f"delay.{k:02d}" for k in range(22)], "30 days of 1 s units need 22 levels"
    queues = {q.name: q for q in vhost.queues}
    top = queues["delay.21"]
    assert top.type is QueueType.QUORUM
    assert top.arguments == {
        "x-message-ttl": 1000 * 2**21,
        "x-dead-letter-exchange": "delay.20",
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
    }
    assert queues["delay.00"].arguments["x-dead-letter-exchange"] == "delay.deliver"
    skips = {
        (b.source, b.destination)
        for b in vhost.bindings
        if b.destination_type is DestinationType.EXCHANGE
    }
    assert ("delay.05", "delay.04") in skips and ("delay.00", "delay.deliver") in skips


def test_targets_and_the_unroutable_path() -> None:
    vhost = expanded(BINARY)
    exchanges = {e.name: e for e in vhost.exchanges}
    assert exchanges["delay.deliver"].arguments == {"alternate-exchange": "delay.unroutable"}
    bound = {(b.source, b.destination, b.routing_key) for b in vhost.bindings}
    assert ("delay.deliver", "due", "*." * 22 + "due") in bound
    assert ("delay.deliver", "delay.to.expired", "*." * 22 + "expired") in bound
    assert ("delay.unroutable", "delay.parking", "") in bound
    landing = next(q for q in vhost.queues if q.name == "delay.to.expired")
    assert landing.arguments["x-message-ttl"] == 0
    assert landing.arguments["x-dead-letter-exchange"] == "events"
    assert landing.arguments["x-dead-letter-routing-key"] == "order.expired"


def test_fixed_levels_default_to_the_classic_eighteen() -> None:
    spec = load(
        vhost_spec(
            "queues: [{name: due}]\ndelays: [{name: f, levels: fixed, queue_type: classic, targets: [{queue: due}]}]"
        )
    )
    scheme = delay_scheme(spec.vhosts[0].delays[0])
    assert isinstance(scheme, FixedDelays) and len(scheme.levels_ms) == 18
    vhost = expand(spec).vhosts[0]
    level = next(q for q in vhost.queues if q.name == "f.17")
    assert level.type is QueueType.CLASSIC
    assert level.arguments == {"x-message-ttl": 7_200_000, "x-dead-letter-exchange": "f.deliver"}


RETRY = """
queues:
  - name: work
    type: quorum
    delivery_limit: 10
    retry: {attempts: 5, backoff: {initial: 1s, multiplier: 2, max: 4s}}
"""


def test_retry_via_queues_declares_distinct_tiers_parking_and_dead_lettering() -> None:
    vhost = expanded(RETRY)
    queues = {q.name: q for q in vhost.queues}
    # retries 1..4 wait 1s, 2s, 4s, 4s: three distinct tiers
    assert {n for n in queues if ".retry." in n} == {
        "work.retry.1s",
        "work.retry.2s",
        "work.retry.4s",
    }
    tier = queues["work.retry.2s"]
    assert tier.arguments["x-message-ttl"] == 2000
    assert tier.arguments["x-dead-letter-exchange"] == ""
    assert tier.arguments["x-dead-letter-routing-key"] == "work"
    work = queues["work"].arguments
    assert work["x-dead-letter-routing-key"] == "work.parking"
    assert work["x-delivery-limit"] == 10
    assert work["x-dead-letter-strategy"] == "at-least-once"
    assert queues["work.parking"].type is QueueType.QUORUM
    # inspecting a parking lot returns messages: never let that count towards dropping them
    assert queues["work.parking"].arguments == {"x-delivery-limit": 1_000_000}
    retry = queue_retry(
        load(vhost_spec(RETRY)).vhosts[0], load(vhost_spec(RETRY)).vhosts[0].queues[0]
    )
    assert retry is not None and retry.tier_queue(4000) == "work.retry.4s"
    assert retry.policy.attempts == 5


def test_retry_via_delay_binds_the_queue_as_a_target() -> None:
    vhost = expanded(
        """
        queues:
          - name: mail
            retry: {attempts: 3, backoff: {initial: 1s, jitter: 0.2}, via: later}
        delays: [{name: later, count: 8}]
        """
    )
    assert not any(".retry." in q.name for q in vhost.queues)
    assert any(b.source == "later.deliver" and b.destination == "mail" for b in vhost.bindings)
    spec_vhost = load(
        vhost_spec(
            "queues:\n  - name: mail\n    retry: {via: later}\ndelays: [{name: later, count: 8}]"
        )
    ).vhosts[0]
    retry = queue_retry(spec_vhost, spec_vhost.queues[0])
    assert retry is not None and isinstance(retry.delay, BinaryDelays)


def test_dead_letter_choices() -> None:
    vhost = expanded(
        "queues: [{name: a, dead_letter: true}, {name: b, dead_letter: elsewhere}, {name: elsewhere}]"
    )
    queues = {q.name: q for q in vhost.queues}
    assert queues["a"].arguments["x-dead-letter-routing-key"] == "a.dead" and "a.dead" in queues
    assert queues["b"].arguments["x-dead-letter-routing-key"] == "elsewhere"
    assert "x-dead-letter-strategy" not in queues["a"].arguments, "classic: at-most-once only"


def messages(body: str) -> list[str]:
    return [f"{p.severity}: {p.location()}: {p.message}" for p in check(vhost_spec(body))]


def test_retry_via_unknown_delay_names_the_known_ones() -> None:
    (problem,) = messages("queues: [{name: q, retry: {via: nowhere}}]\ndelays: [{name: later}]")
    assert "queues[0].retry.via" in problem and "later" in problem and "spec.yaml:4" in problem


def test_jitter_needs_delay_levels() -> None:
    (problem,) = messages("queues: [{name: q, retry: {backoff: {jitter: 0.1}}}]")
    assert "retry.backoff.jitter" in problem and "via" in problem


def test_streams_cannot_retry_and_classic_has_no_delivery_limit() -> None:
    problems = messages(
        "queues: [{name: s, type: stream, retry: {}}, {name: c, delivery_limit: 3}]"
    )
    assert any("stream" in p and "retry" in p for p in problems)
    assert any("delivery_limit" in p and "quorum" in p for p in problems)


def test_own_dead_letter_exchange_conflicts_with_parking() -> None:
    problems = messages(
        "exchanges: [{name: dlx}]\nqueues: [{name: q, retry: {}, arguments: {x-dead-letter-exchange: dlx}}]"
    )
    assert any("dead_letter: false" in p for p in problems)


def test_generated_names_must_not_clash() -> None:
    problems = messages(
        "queues: [{name: q, retry: {}}, {name: later.parking}]\ndelays: [{name: later}]"
    )
    assert any("later.parking" in p and "also declared" in p for p in problems)


def test_a_delay_named_twice_is_reported_at_its_second_name() -> None:
    problems = messages("delays: [{name: later}, {name: later}]")
    assert any("delays[1].name" in p and "delay 'later' is declared twice" in p for p in problems)
    assert not any("delays[0].name" in p for p in problems)


def test_delay_targets_must_exist() -> None:
    problems = messages("delays: [{name: d, targets: [{queue: ghost}, {name: x, exchange: nope}]}]")
    assert any("ghost" in p for p in problems) and any("nope" in p for p in problems)


def test_a_binary_delay_keeps_its_declared_max() -> None:
    spec = load(
        vhost_spec(
            """
queues: [{name: due}]
delays:
  - {name: later, unit: 100ms, max: 10s, targets: [{queue: due}]}
  - {name: counted, unit: 100ms, count: 7, targets: [{queue: due}]}
"""
        )
    )
    later, counted = (delay_scheme(d) for d in spec.vhosts[0].delays)
    assert isinstance(later, BinaryDelays) and isinstance(counted, BinaryDelays)
    assert later.levels == counted.levels == 7
    assert later.max_delay_ms == 10_000 and counted.max_delay_ms == 12_700
    assert counted.route(12.7, "due").delay_ms == 12_700
    with pytest.raises(DelayError, match="declared max of 10000 ms"):
        later.route(12.7, "due")


def test_a_retry_back_off_longer_than_its_delay_holds_is_refused() -> None:
    (problem,) = messages(
        "queues: [{name: q, retry: {attempts: 6, via: later}}]\n"
        "delays: [{name: later, unit: 1s, max: 10s}]"
    )
    assert "queues[0].retry.backoff" in problem and "16000 ms" in problem
    assert "10000 ms" in problem and "`max`" in problem
    # the same back-offs fit once the delay holds them
    assert not messages(
        "queues: [{name: q, retry: {attempts: 6, via: later}}]\n"
        "delays: [{name: later, unit: 1s, max: 16s}]"
    )


def test_jitter_counts_towards_the_longest_retry_delay() -> None:
    body = (
        "queues: [{name: q, retry: {attempts: 4, via: later, backoff: {jitter: 0.5}}}]\n"
        "delays: [{name: later, unit: 100ms, max: %s}]"
    )
    (problem,) = messages(body % "5s")
    assert "6000 ms (4000 ms with 0.5 jitter)" in problem
    assert not messages(body % "6s")


def test_fixed_levels_that_reject_other_delays_must_hold_every_back_off() -> None:
    (problem,) = messages(
        "queues: [{name: q, retry: {attempts: 3, via: later, backoff: [1s, 2s]}}]\n"
        "delays: [{name: later, levels: [1s, 5s], round: reject}]"
    )
    assert "[2000]" in problem and "round: reject" in problem
    assert not messages(
        "queues: [{name: q, retry: {attempts: 3, via: later, backoff: [1s, 2s]}}]\n"
        "delays: [{name: later, levels: [1s, 5s]}]"
    )
