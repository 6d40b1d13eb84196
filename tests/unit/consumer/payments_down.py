"""The app of the kill-switch tests, without a broker and on one: payments behind a kill switch
whose dependency is down, emails that always succeed."""

from __future__ import annotations

from rabbitry.consumer import App, IncomingMessage, KillSwitch


def with_payments_down(app: App, switch: KillSwitch) -> App:
    """``app`` with a ``payments`` handler behind ``switch`` that always fails and an
    ``emails`` handler that always succeeds."""

    @app.handler("payments", kill_switch=switch)
    def pay(message: IncomingMessage) -> None:
        raise ConnectionError("payments API: connection refused")

    @app.handler("emails")
    def send(message: IncomingMessage) -> None:
        pass

    return app
