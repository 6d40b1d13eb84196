"""A partition's task against an in-process broker: all confirmed, or a clear failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.spark.checks import resolve_spec
from rabbitry.spark.options import SinkOptionError, SinkOptions, SparkSinkError
from rabbitry.spark.partition import SinkPlan, publish_rows
from rabbitry.spark.rows import Column, ColumnKind
from tests.unit.publisher.fake_broker import FakeBroker

COLUMNS = (Column("kind", ColumnKind.STRING), Column("body", ColumnKind.BINARY))


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    broker = FakeBroker(ack_every=7)
    yield broker
    broker.close()


def plan(url: str, **options: str) -> SinkPlan:
    opts = SinkOptions.parse({"url": url, "body_column": "body", **options}, {})
    return SinkPlan(opts, COLUMNS, "job")


def test_every_row_confirmed_and_reported(fake: FakeBroker) -> None:
    rows = [("k", b"x" * 10)] * 1000
    report = publish_rows(plan(fake.url, window="64"), rows, partition=2, attempt=1)
    assert (report.rows, report.bytes, report.confirms, report.attempt) == (1000, 10000, 1000, 1)
    assert report.partition == 2
    assert fake.published == 1000
    assert fake.peak_unacked <= 64


def test_a_nacked_row_fails_the_task_naming_row_and_id(fake: FakeBroker) -> None:
    # the fake numbers messages from 1: message 301 is row 300
    fake.decide = lambda i, e, k: "nack" if i == 301 else "ack"
    with pytest.raises(SparkSinkError) as err:
        publish_rows(plan(fake.url, exchange="ev"), [("k", b"x")] * 1000, partition=4)
    text = str(err.value)
    assert "partition 4 (task attempt 0)" in text
    assert "partition 4, row 300 (message id job:0:4:300, exchange 'ev'" in text
    assert "Nacked" in text
    assert "300 earlier row(s) of this partition were confirmed" in text
    assert "secret-pw" not in text and "u:***@127.0.0.1" in text


def test_an_unroutable_mandatory_row_fails_the_task(fake: FakeBroker) -> None:
    fake.decide = lambda i, e, k: "return" if k == "lost" else "ack"
    rows = [("k", b"x")] * 10 + [("lost", b"x")]
    with pytest.raises(SparkSinkError, match=r"row 10 .* Unroutable"):
        publish_rows(plan(fake.url, mandatory="true", routing_key_column="kind"), rows, partition=0)


def test_spec_resolves_delays_and_rejects_unknown_exchanges(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "version: 1\n"
        "vhosts:\n"
        "  - name: shop\n"
        "    exchanges: [{name: events, type: topic}]\n"
        "    queues: [{name: reminders}]\n"
        "    bindings: [{source: events, destination: reminders, routing_key: 'order.*'}]\n"
        "    delays: [{name: delay, unit: 1s, max: 1h, targets: [{queue: reminders}]}]\n"
    )
    url = "amqp://guest:guest@localhost/shop"

    def opts(**o: str) -> SinkOptions:
        return SinkOptions.parse({"url": url, "spec": str(spec), **o}, {})

    scheme = resolve_spec(opts(delay_column="d", routing_key="reminders"))
    assert scheme is not None and scheme.delivery_exchange == "delay.deliver"
    assert resolve_spec(opts(exchange="events", routing_key="order.placed")) is None
    # mandatory by default: rows that no queue takes would all fail, so the write is refused
    with pytest.raises(SinkOptionError, match="routes '' to no queue"):
        resolve_spec(opts(exchange="events"))
    assert resolve_spec(opts(exchange="events", mandatory="false")) is None
    with pytest.raises(SinkOptionError, match="exchange 'evnts' is not declared in vhost 'shop'"):
        resolve_spec(opts(exchange="evnts"))
    with pytest.raises(SinkOptionError, match=r"routes 'shipment\.sent' to no queue"):
        resolve_spec(opts(exchange="events", routing_key="shipment.sent", mandatory="true"))
    with pytest.raises(
        SinkOptionError, match="has no delays entry 'later' \\(delays declared: delay\\)"
    ):
        resolve_spec(opts(delay_column="d", delays="later"))
    with pytest.raises(SinkOptionError, match="no such file"):
        resolve_spec(SinkOptions.parse({"url": url, "spec": str(tmp_path / "x.yaml")}, {}))


def test_a_task_given_a_clusters_urls_fails_over_when_its_node_goes_away(
    fake: FakeBroker,
) -> None:
    first = FakeBroker(ack_every=10_000)
    first.drop_after = 300  # the node goes away with 300 rows unconfirmed
    try:
        urls = f"{first.url},{fake.url}"
        report = publish_rows(plan(urls, node_order="in-order"), [("k", b"x")] * 1000, partition=1)
        assert report.confirms == 1000
        assert (first.connections, fake.connections) == (1, 1)
        assert fake.published >= 1000  # the unconfirmed ones again, with the same ids
    finally:
        first.close()
