"""The app of the kill switch tests, on a broker and without one: a payments handler behind a
switch whose dependency is down, and an emails handler beside it that always succeeds."""

from __future__ import annotations

from rabbitry.consumer import App, IncomingMessage, KillSwitch


def with_payments_down(app: App, switch: KillSwitch, error: str) -> App:
    """``app`` with its handlers: ``payments`` behind ``switch``, every call failing with a
    ConnectionError saying ``error``, and ``emails``, which always succeeds."""

    @app.handler("payments", kill_switch=switch)
    def pay(message: IncomingMessage) -> None:
        raise ConnectionError(error)

    with_emails(app)
    return app


def with_emails(app: App) -> App:
    """``app`` with an ``emails`` handler that always succeeds: the queue that keeps flowing."""

    @app.handler("emails")
    def send(message: IncomingMessage) -> None:
        pass

    return app
