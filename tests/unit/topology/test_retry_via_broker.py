"""``retry: {via: broker}``: the arguments it declares, how a back-off maps onto the broker's
linear delay, what the checks refuse, and the refusal by brokers older than 4.3."""

from __future__ import annotations

import pytest

from rabbitry.errors import SpecProblem
from rabbitry.provisioner.capabilities import BrokerCapabilities, missing, requirements
from rabbitry.topology import expand, validate
from rabbitry.topology.patterns.retries import BrokerRetry
from rabbitry.topology.spec.loader import load_spec_text
from rabbitry.topology.spec.model import RetrySpec


def problems(queue: str, version: str | None = None) -> list[SpecProblem]:
    broker = f'broker:\n  version: "{version}"\n' if version else ""
    text = f"version: 1\nname: app\n{broker}vhosts:\n  - name: v\n    queues:\n      - {queue}\n"
    return validate(load_spec_text(text, "spec.yaml", environ={}))


def errors(queue: str, version: str | None = None) -> list[str]:
    return [f"{p.path}: {p.message}" for p in problems(queue, version) if p.severity == "error"]


def retry(**fields: object) -> RetrySpec:
    return RetrySpec.model_validate({"via": "broker", **fields})


GOOD = "{name: work, type: quorum, retry: {attempts: 4, backoff: [1s, 2s, 3s], via: broker}}"


def test_attempts_become_the_delivery_limit_and_a_ramp_the_delay_arguments() -> None:
    spec = load_spec_text(
        f"version: 1\nvhosts:\n  - name: v\n    queues:\n      - {GOOD}\n", "s.yaml", environ={}
    )
    (vhost,) = expand(spec).vhosts
    queues = {q.name: q for q in vhost.queues}
    assert set(queues) == {"work", "work.parking"}  # no tier queue
    arguments = queues["work"].arguments
    assert arguments["x-delivery-limit"] == 3
    assert arguments["x-delayed-retry-type"] == "failed"
    assert (arguments["x-delayed-retry-min"], arguments["x-delayed-retry-max"]) == (1000, 3000)
    assert arguments["x-dead-letter-routing-key"] == "work.parking"
    assert vhost.retried_by_broker == ("work",)


@pytest.mark.parametrize(
    ("fields", "step", "cap", "delays"),
    [
        ({"attempts": 4, "backoff": ["1s", "2s", "3s"]}, 1000, 3000, [1000, 2000, 3000]),
        ({"attempts": 5, "backoff": ["1s", "2s"]}, 1000, 2000, [1000, 2000, 2000, 2000]),
        ({"attempts": 3, "backoff": ["5s"]}, 5000, 5000, [5000, 5000]),
        # exponential: the same first and longest delay, linear in between
        ({"attempts": 5, "backoff": {"initial": "1s"}}, 1000, 8000, [1000, 2000, 3000, 4000]),
        ({"attempts": 6, "backoff": {"initial": "1s", "max": "3s"}}, 1000, 3000, None),
        ({"attempts": 1, "backoff": ["2s"]}, 2000, 2000, []),
    ],
)
def test_the_broker_delay_is_the_first_delay_times_the_failures_up_to_the_longest(
    fields: dict[str, object], step: int, cap: int, delays: list[int] | None
) -> None:
    broker = BrokerRetry.of(retry(**fields))
    assert (broker.min_ms, broker.max_ms) == (step, cap)
    assert broker.delivery_limit == int(str(fields["attempts"])) - 1
    if delays is not None:
        assert broker.schedule_ms() == delays


def test_a_good_spec_is_valid_on_4_3_and_refused_before_naming_4_3() -> None:
    assert errors(GOOD, "4.3") == []
    (refusal,) = errors(GOOD, "4.0")
    assert refusal.startswith("vhosts[0].queues[0].retry.via: ")
    assert "needs RabbitMQ 4.3" in refusal and "broker.version is 4.0" in refusal


@pytest.mark.parametrize(
    ("queue", "where", "said"),
    [
        ("{name: q, retry: {via: broker}}", "retry.via", "is classic"),
        (
            "{name: q, type: quorum, retry: {backoff: [1s, 10s], via: broker}}",
            "retry.backoff",
            "would wait 1s, 2s, 3s, 4s, not 1s, 10s, 10s, 10s",
        ),
        (
            "{name: q, type: quorum, retry: {backoff: {jitter: 0.1}, via: broker}}",
            "retry.backoff.jitter",
            "remove jitter",
        ),
        (
            "{name: q, type: quorum, retry: {backoff: [0ms], via: broker}}",
            "retry.backoff",
            "at least 1ms",
        ),
        (
            "{name: q, type: quorum, delivery_limit: 5, retry: {via: broker}}",
            "delivery_limit",
            "remove delivery_limit",
        ),
        (
            "{name: q, type: quorum, arguments: {x-delayed-retry-min: 1s}, retry: {via: broker}}",
            "arguments.x-delayed-retry-min",
            "remove it",
        ),
        (
            "{name: q, type: quorum, dead_letter: true, retry: {via: broker}}",
            "dead_letter",
            "parking lot 'q.parking'",
        ),
    ],
)
def test_what_the_broker_cannot_do_is_refused_where_it_is_written(
    queue: str, where: str, said: str
) -> None:
    found = [e for e in errors(queue, "4.3") if e.startswith(f"vhosts[0].queues[0].{where}: ")]
    assert found and said in found[0], errors(queue, "4.3")


def test_an_exponential_back_off_is_approximated_with_a_warning() -> None:
    queue = "{name: q, type: quorum, retry: {attempts: 4, via: broker}}"
    found = [p for p in problems(queue, "4.3") if p.severity == "warning"]
    assert [p.path for p in found] == ["vhosts[0].queues[0].retry.backoff"]
    assert "1s, 2s, 3s, not 1s, 2s, 4s" in found[0].message


def test_plan_against_a_live_broker_older_than_4_3_refuses_the_queue() -> None:
    spec = load_spec_text(
        f"version: 1\nvhosts:\n  - name: v\n    queues:\n      - {GOOD}\n", "s.yaml", environ={}
    )
    needs = requirements(expand(spec))
    flags = frozenset({"quorum_queue", "stream_queue"})
    (refusal,) = missing(needs, BrokerCapabilities(version=(4, 2, 1), feature_flags=flags))
    assert "queue work (vhost v)" in refusal and "needs RabbitMQ 4.3" in refusal
    assert missing(needs, BrokerCapabilities(version=(4, 3, 6), feature_flags=flags)) == []
    # the same arguments written by hand only warn: nothing in rabbitry relies on them
    plain = expand(spec).model_copy(
        update={"vhosts": (expand(spec).vhosts[0].model_copy(update={"retried_by_broker": ()}),)}
    )
    assert (
        missing(requirements(plain), BrokerCapabilities(version=(4, 2, 1), feature_flags=flags))
        == []
    )


SHARDED = """version: 1
broker: {version: "4.2"}
vhosts:
  - name: v
    sharded_exchanges:
      - name: orders
        shards: 2
        queue: {type: quorum, retry: {attempts: 3, backoff: [1s, 2s], via: broker}}
"""


def test_shards_retry_via_broker_each_with_the_arguments_and_the_version_refusal() -> None:
    spec = load_spec_text(SHARDED, "s.yaml", environ={})
    (vhost,) = expand(spec).vhosts
    assert vhost.retried_by_broker == ("orders.0", "orders.1")
    shard = next(q for q in vhost.queues if q.name == "orders.1")
    assert shard.arguments["x-delivery-limit"] == 2
    assert shard.arguments["x-delayed-retry-max"] == 2000
    found = [f"{p.path}: {p.message}" for p in validate(spec) if p.severity == "error"]
    assert len(found) == 1, found
    assert found[0].startswith("vhosts[0].sharded_exchanges[0].queue.retry.via: ")
    assert "needs RabbitMQ 4.3" in found[0]
