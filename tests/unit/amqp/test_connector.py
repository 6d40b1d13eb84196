"""``Outage`` and the blocking driver ``connect``: the tries of one outage and the client's hooks
(no broker; the attempts are functions that fail or return as the test says)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from rabbitry.amqp.aio import connect_async
from rabbitry.amqp.connector import Outage, connect
from rabbitry.amqp.errors import ConnectionLost
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.settings import Backoff, ConnectionSettings
from rabbitry.errors import BrokerError

SETTINGS = ConnectionSettings.from_url(
    "amqp://app:s3cret@r1/shop,amqp://app:s3cret@r2/shop",
    node_order="in-order",
    backoff=Backoff(initial=0.001, maximum=0.001, jitter=0, give_up_after=None),
)


def attempts(*outcomes: BaseException | str) -> Callable[[ConnectionSettings], str]:
    """An attempt that raises or returns each outcome in turn, recording the node it was given."""
    left = list(outcomes)
    tried: list[str] = []

    def attempt(target: ConnectionSettings) -> str:
        tried.append(target.host)
        outcome = left.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    attempt.tried = tried  # type: ignore[attr-defined]
    return attempt


class Hooks:
    def __init__(self) -> None:
        self.events: list[str] = []

    def outage(self, *, after_loss: bool, stopping: Callable[[], bool] | None = None) -> Outage:
        return Outage(
            Reconnect(SETTINGS, 0.0, after_loss=after_loss),
            tidy=lambda exc: self.events.append(f"tidy {exc}"),
            restored=lambda: self.events.append("restored"),
            gave_up=lambda exc: self.events.append(f"gave up {type(exc).__name__}"),
            stopping=stopping,
        )


def test_the_first_try_after_a_loss_goes_to_the_next_node_and_restores() -> None:
    hooks = Hooks()
    attempt = attempts("connection")
    assert connect(hooks.outage(after_loss=True), attempt) == "connection"
    assert attempt.tried == ["r2"]  # type: ignore[attr-defined]
    assert hooks.events == ["restored"]


def test_a_failed_try_is_tidied_and_the_next_node_tried(caplog: pytest.LogCaptureFixture) -> None:
    hooks = Hooks()
    attempt = attempts(ConnectionRefusedError("refused"), "connection")
    with caplog.at_level(logging.INFO, logger="rabbitry.amqp"):
        assert connect(hooks.outage(after_loss=False), attempt) == "connection"
    assert attempt.tried == ["r1", "r2"]  # type: ignore[attr-defined]
    assert hooks.events == ["tidy refused", "restored"]
    assert "connected to amqp://app@r2:5672/shop" in caplog.text


def test_a_first_connection_at_the_first_try_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rabbitry.amqp"):
        connect(Hooks().outage(after_loss=False), attempts("connection"))
    assert "connected to" not in caplog.text


def test_what_the_rule_finds_final_ends_the_outage_through_gave_up_once() -> None:
    hooks = Hooks()
    refused = BrokerError("refused the login")
    with pytest.raises(BrokerError, match="refused the login"):
        connect(hooks.outage(after_loss=False), attempts(refused))
    assert hooks.events == ["tidy refused the login", "gave up BrokerError"]


def test_a_tidy_that_raises_makes_the_failure_final() -> None:
    def final(exc: BaseException) -> None:
        raise ConnectionLost("the client knows better")

    gave_up: list[BaseException] = []
    outage = Outage(Reconnect(SETTINGS, 0.0), tidy=final, gave_up=gave_up.append)
    with pytest.raises(ConnectionLost):
        connect(outage, attempts(OSError("reset")))
    assert [type(e) for e in gave_up] == [ConnectionLost]


def test_a_client_that_closes_ends_the_outage_without_a_connection_or_gave_up() -> None:
    hooks = Hooks()
    assert connect(hooks.outage(after_loss=True, stopping=lambda: True), attempts()) is None
    assert hooks.events == []


def test_a_cancelled_wait_gives_the_asyncio_outage_up() -> None:
    hooks = Hooks()

    async def never(target: ConnectionSettings) -> str:
        await asyncio.Event().wait()
        return "never"

    async def main() -> None:
        task = asyncio.ensure_future(connect_async(hooks.outage(after_loss=True), never))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert hooks.events == ["gave up CancelledError"]
