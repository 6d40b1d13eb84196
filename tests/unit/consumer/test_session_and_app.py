"""Delivery parsing of the worker's connection, and handlers bound to a spec's queues."""

from __future__ import annotations

from pathlib import Path

import pytest
from pamqp import body as pamqp_body
from pamqp import commands, header
from pamqp import frame as pamqp_frame

from rabbitry.amqp.confirms import ConfirmTracker
from rabbitry.amqp.message import MessageBuilder
from rabbitry.amqp.session import State
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.consumer.app import App, AppError, url_for_app
from rabbitry.consumer.session import ConsumerSession, Subscription
from rabbitry.errors import BrokerError


def delivery(tag: int, body: bytes, consumer: str = "rabbitry.1", frame_max: int = 0) -> bytes:
    out = pamqp_frame.marshal(commands.Basic.Deliver(consumer, tag, tag % 2 == 0, "ex", "key"), 1)
    props = commands.Basic.Properties(message_id=f"m-{tag}", headers={"n": tag})
    out += pamqp_frame.marshal(header.ContentHeader(0, len(body), props), 1)
    step = frame_max or max(1, len(body))
    for start in range(0, len(body), step):
        out += pamqp_frame.marshal(pamqp_body.ContentBody(body[start : start + step]), 1)
    return out


def ready_session() -> ConsumerSession:
    session = ConsumerSession(
        ConnectionSettings(),
        ConfirmTracker(),
        MessageBuilder(),
        subscriptions=[Subscription("a"), Subscription("b", {"x-priority": 5})],
        prefetch=300,
    )
    session.state = State.OPENING_CHANNEL
    session.take_output()
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    return session


def test_ready_sets_prefetch_and_consumes_every_queue() -> None:
    session = ready_session()
    assert session.ready and session.generation == 1
    out = session.take_output()
    assert b"rabbitry.0" in out and b"rabbitry.1" in out and b"x-priority" in out


def test_deliveries_are_parsed_across_arbitrary_splits() -> None:
    session = ready_session()
    data = delivery(1, b"hello") + delivery(2, b"x" * 300, frame_max=128) + delivery(3, b"")
    data += pamqp_frame.marshal(commands.Basic.Ack(1, False), 1)
    for cut in range(0, len(data), 7):
        session.receive(data[cut : cut + 7])
    messages = session.inbox
    assert [m.tag for m in messages] == [1, 2, 3]
    assert [m.body for m in messages] == [b"hello", b"x" * 300, b""]
    first = messages[0]
    assert first.queue == "b" and first.exchange == "ex" and first.routing_key == "key"
    assert first.message_id == "m-1" and first.headers == {"n": 1}
    assert messages[1].redelivered and not first.redelivered
    assert first.generation == 1


def test_broker_cancel_and_consume_ok_are_tracked() -> None:
    session = ready_session()
    session.receive(pamqp_frame.marshal(commands.Basic.ConsumeOk("rabbitry.0"), 1))
    assert session.consuming == {0}
    session.receive(pamqp_frame.marshal(commands.Basic.Cancel("rabbitry.0"), 1))
    assert session.consuming == set() and session.cancelled_by_broker == ["a"]


def test_a_closed_channel_reopens_and_bumps_the_generation() -> None:
    session = ready_session()
    session.receive(
        pamqp_frame.marshal(commands.Channel.Close(406, "PRECONDITION_FAILED", 60, 40), 1)
    )
    session.receive(pamqp_frame.marshal(commands.Channel.OpenOk(), 1))
    session.receive(pamqp_frame.marshal(commands.Confirm.SelectOk(), 1))
    assert session.ready and session.generation == 2


SPEC = """
version: 1
vhosts:
  - name: shop
    queues:
      - name: work
        type: quorum
        retry: {attempts: 3, backoff: [1s, 5s]}
      - name: ordered
        arguments: {x-single-active-consumer: true}
      - name: plain
"""


def test_app_binds_handlers_to_spec_queues(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    app = App(path)

    @app.handler("work", timeout=2.5, idempotent=True)
    async def work(message: object) -> None: ...

    @app.handler("ordered")
    def ordered(message: object) -> None: ...

    app.add("plain", lambda m: None)
    route = app.routes["work"]
    assert route.is_async and route.timeout == 2.5 and route.idempotent
    assert route.retry is not None and route.retry.parking_queue == "work.parking"
    assert route.retry.tier_queues == {1000: "work.retry.1s", 5000: "work.retry.5s"}
    assert app.routes["ordered"].ordered and not app.routes["ordered"].is_async
    assert app.routes["plain"].retry is None
    with pytest.raises(AppError, match="already has a handler"):
        app.add("plain", lambda m: None)
    with pytest.raises(AppError, match="not declared"):
        app.add("nope", lambda m: None)


def test_workers_go_to_the_spec_vhost_when_the_url_names_none(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    app = App(path)
    assert app.vhost is not None
    expected = f"amqp://u:p@h:5672/{app.vhost.name}"
    assert url_for_app("amqp://u:p@h:5672", app) == expected
    assert url_for_app("amqp://u:p@h:5672/", app) == expected
    assert url_for_app(expected, app) == expected


def test_a_worker_url_naming_another_vhost_than_the_spec_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    app = App(path)
    assert app.vhost is not None
    with pytest.raises(BrokerError) as caught:
        url_for_app("amqp://u:secret@h:5672/%2F", app)
    message = str(caught.value)
    assert "names vhost '/'" in message and repr(app.vhost.name) in message
    assert "secret" not in message and "u:***@h" in message


def test_a_broker_shutting_down_ends_a_connection_that_was_ready() -> None:
    from rabbitry.amqp.session import ConnectionRefused

    session = ready_session()
    close = commands.Connection.Close(320, "CONNECTION_FORCED - shutdown", 0, 0)
    with pytest.raises(ConnectionRefused):
        session.receive(pamqp_frame.marshal(close, 0))
    assert not session.ready and session.was_ready  # a loss to count, not a failed connect


def test_every_url_of_a_clusters_list_goes_to_the_spec_vhost(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    app = App(path)
    assert app.vhost is not None
    name = app.vhost.name
    assert url_for_app("amqp://u:p@a/,amqp://u:p@b:5673", app) == (
        f"amqp://u:p@a/{name},amqp://u:p@b:5673/{name}"
    )
