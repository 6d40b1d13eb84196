"""Handlers on every queue the spec declares: shards, super streams, streams, several vhosts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer import Action, App, AppError
from rabbitry.consumer.decision import after_stream_failure
from rabbitry.consumer.engine import WorkerCore, WorkerOptions, vhost_parts
from rabbitry.consumer.positions import StreamPosition
from rabbitry.consumer.targets import TargetError, group_of, target_of
from rabbitry.topology import load_spec
from tests.unit.consumer.test_engine import client_acks, ready

SPEC = """
version: 1
vhosts:
  - name: shop
    queues:
      - {name: work, type: quorum, retry: {attempts: 2, backoff: [1s]}}
      - {name: events, type: stream}
    sharded_exchanges:
      - name: orders
        shards: 3
        queue: {type: quorum, retry: {attempts: 3, backoff: [1s, 5s]}}
    modulus_sharding:
      - {name: images, shards_per_node: 2}
    super_streams:
      - {name: clicks, partitions: 2}
  - name: billing
    queues:
      - {name: work, type: quorum}
      - {name: invoices, type: quorum}
"""


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def test_a_shard_queue_is_declared_with_the_retry_its_template_expands_per_shard(
    spec_path: Path,
) -> None:
    shop = load_spec(spec_path).vhosts[0]
    target = target_of(shop, "orders.1")
    assert target.declared_by == "sharded_exchanges 'orders'" and not target.stream
    app = App(spec_path, vhost="shop")
    route = app.add("orders.1", lambda m: None)
    assert route.retry is not None and route.retry.parking_queue == "orders.1.parking"
    assert route.retry.tier_queues == {1000: "orders.1.retry.1s", 5000: "orders.1.retry.5s"}


def test_one_handler_takes_every_shard_of_a_sharded_exchange(spec_path: Path) -> None:
    app = App(spec_path, vhost="shop")

    @app.handler(shards="orders")
    def handle(message: object) -> None: ...

    assert app.queues == ["orders.0", "orders.1", "orders.2"]
    parking = {r.retry.parking_queue for r in app.routes.values() if r.retry is not None}
    assert parking == {"orders.0.parking", "orders.1.parking", "orders.2.parking"}
    with pytest.raises(AppError, match=r"orders\.0, orders\.1, orders\.2 already has a handler"):
        app.add_shards("orders", handle)
    retry = app.routes["orders.0"].retry
    with pytest.raises(AppError, match="each shard retries as the spec's `queue:` template"):
        App(spec_path, vhost="shop").add_shards("orders", handle, retry=retry)


def test_a_super_stream_group_is_its_partitions_and_they_are_streams(spec_path: Path) -> None:
    app = App(spec_path, vhost="shop")
    routes = app.add_shards("clicks", lambda m: None, offset="first")
    assert [r.queue for r in routes] == ["clicks-0", "clicks-1"]
    assert all(r.stream and r.consume_arguments == {"x-stream-offset": "first"} for r in routes)


def test_a_modulus_sharded_exchange_opens_one_consumer_per_plugin_shard(spec_path: Path) -> None:
    shop = load_spec(spec_path).vhosts[0]
    assert [(t.queue, t.consumers) for t in group_of(shop, "images", nodes=3)] == [("images", 6)]
    assert target_of(shop, "sharding: images - rabbit@a - 1").declared_by.startswith("modulus")
    with pytest.raises(TargetError):
        target_of(shop, "sharding: images - rabbit@a - 2")  # 2 shards per node: 0 and 1
    app = App(spec_path, vhost="shop")
    app.add_shards("images", lambda m: None)
    core = WorkerCore(app, ConnectionSettings(), WorkerOptions())
    assert [s.queue for s in core.subscriptions] == ["images", "images"]


def test_a_name_that_is_not_declared_lists_what_is_in_each_vhost(spec_path: Path) -> None:
    app = App(spec_path)
    with pytest.raises(AppError) as caught:
        app.add("nope", lambda m: None)
    text = str(caught.value)
    assert "queue 'nope' is not declared in vhost 'shop'" in text
    assert "orders.0" in text and "clicks-1" in text and "shards= groups: orders" in text
    assert "not declared in vhost 'billing' (queues: work, invoices)" in text
    with pytest.raises(AppError, match="is a sharded exchange: consume its shards with shards="):
        app.add("orders", lambda m: None, vhost="shop")
    with pytest.raises(AppError, match="declares no sharded exchange or super stream"):
        app.add_shards("work", lambda m: None)


def test_in_an_app_of_several_vhosts_a_queue_of_two_needs_its_vhost(spec_path: Path) -> None:
    app = App(spec_path)
    assert [v.name for v in app.vhosts] == ["shop", "billing"] and app.vhost is None
    with pytest.raises(AppError, match=r"queue 'work' is declared in several vhosts .*vhost="):
        app.add("work", lambda m: None)
    app.add("work", lambda m: None, vhost="billing")
    app.add("invoices", lambda m: None)  # only billing declares it
    app.add("work", lambda m: None, vhost="shop")
    assert app.queues == ["billing/work", "billing/invoices", "shop/work"]
    assert app.routes["shop/work"].retry is not None and app.routes["billing/work"].retry is None
    with pytest.raises(AppError, match=r"vhost 'x' is not one of the app's vhosts"):
        app.add("invoices", lambda m: None, vhost="x")
    with pytest.raises(AppError, match=r"the spec declares no vhost 'x' \(vhosts: shop, billing"):
        App(spec_path, vhost=["shop", "x"])


def test_a_worker_of_several_vhosts_connects_to_each_with_its_own_handlers(
    spec_path: Path,
) -> None:
    app = App(spec_path)
    app.add("invoices", lambda m: None)
    app.add("events", lambda m: None)
    parts = vhost_parts(app, "amqp://u:p@h:5672", {})
    assert [(s.vhost, list(p.routes)) for p, s in parts] == [
        ("shop", ["events"]),
        ("billing", ["invoices"]),
    ]
    assert parts[0][1].connection_name == "rabbitry worker (shop)"
    assert vhost_parts(App(spec_path, vhost="shop"), None, {}) == []


def test_stream_offsets_are_checked_at_registration(spec_path: Path) -> None:
    app = App(spec_path, vhost="shop")
    with pytest.raises(AppError, match="offset= reads a stream, and queue 'work'"):
        app.add("work", lambda m: None, offset="first")
    with pytest.raises(AppError, match="is not a stream offset"):
        app.add("events", lambda m: None, offset="beginning")
    with pytest.raises(AppError, match="is not a stream offset"):
        app.add("events", lambda m: None, offset=-1)
    retry = App(spec_path, vhost="shop").add("work", lambda m: None).retry
    with pytest.raises(AppError, match=r"a stream cannot dead-letter.*drop retry="):
        app.add("events", lambda m: None, retry=retry)
    stream_with_retry = spec_path.parent / "stream.yaml"
    stream_with_retry.write_text(
        "version: 1\nvhosts:\n  - name: v\n    queues:\n"
        "      - {name: events, type: stream, retry: {attempts: 2}}\n"
    )
    with pytest.raises(AppError, match="drop the queue's `retry:` from the spec"):
        App(stream_with_retry).add("events", lambda m: None)
    naive = dt.datetime(2026, 1, 2, 3, 4, 5)
    route = app.add("events", lambda m: None, offset=naive)
    assert route.stream
    assert route.consume_arguments["x-stream-offset"] == naive.replace(tzinfo=dt.UTC)


def test_a_stream_position_resumes_at_the_lowest_unhandled_offset() -> None:
    position = StreamPosition("first")
    assert position.resume() == "first"
    for offset in (10, 11, 12):
        assert position.take(offset)
    position.handled(10)
    position.handled(12)
    assert position.resume() == 11, "11 was delivered and never handled: it comes again"
    assert not position.take(10), "a copy below the resume point, from the start of its chunk"
    assert position.take(11) and position.take(12)
    position.handled(11)
    position.handled(12)
    assert position.resume() == 13


def test_a_failure_on_a_stream_is_skipped_not_rejected() -> None:
    verdict = after_stream_failure("events", 42, ValueError("bad"))
    assert verdict.action is Action.SKIPPED
    assert "ValueError; events is a stream: the message at offset 42 is skipped" in verdict.reason


def stream_delivery(tag: int, offset: int) -> bytes:
    out = pamqp_frame.marshal(commands.Basic.Deliver("rabbitry.0", tag, False, "", "events"), 1)
    props = commands.Basic.Properties(headers={"x-stream-offset": offset})
    out += pamqp_frame.marshal(header.ContentHeader(0, 0, props), 1)
    return out


def test_a_stream_worker_acks_failures_and_subscribes_again_where_it_left_off() -> None:
    app = App()
    app.add("events", lambda m: None, offset="first")
    core = WorkerCore(app, ConnectionSettings(), WorkerOptions(prefetch=10))
    assert core.subscriptions[0].arguments == {"x-stream-offset": "first"}
    ready(core)
    session = core.session
    assert session is not None
    session.receive(b"".join(stream_delivery(tag, 100 + tag) for tag in (1, 2, 3)))
    first, second, third = session.inbox
    session.inbox = []
    assert core.admit(first) and core.admit(second) and core.admit(third)
    core.conclude(first, None, 0.001)
    verdict = core.conclude(second, RuntimeError("boom"), 0.001)
    assert verdict.action is Action.SKIPPED
    assert client_acks(core.take_output(flush=True)) == [(80, 2, True)], "acked, not rejected"
    counters = core.metrics["events"]
    assert counters.failed == 1 and counters.skipped == 1 and counters.rejected == 0
    core.connection_lost()  # offset 103 was delivered, never handled
    ready(core)
    assert core.subscriptions[0].arguments == {"x-stream-offset": 103}


def test_the_handler_harness_runs_one_vhost_of_an_app_of_several(spec_path: Path) -> None:
    from rabbitry.testing.handlers import HandlerHarness

    app = App(spec_path)
    got: list[str] = []
    app.add("invoices", lambda m: got.append(f"billing {m.text()}"))
    app.add("work", lambda m: got.append(f"shop {m.text()}"), vhost="shop")
    with pytest.raises(AppError, match=r"pass vhost= one of the vhosts with handlers \(shop, bil"):
        HandlerHarness(app)
    harness = HandlerHarness(app, vhost="billing")
    assert harness.deliver("invoices", b"i1").acked
    assert HandlerHarness(app, vhost="shop").deliver("work", b"w1").acked
    assert got == ["billing i1", "shop w1"]
