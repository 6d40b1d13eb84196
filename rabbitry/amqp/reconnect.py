"""The one rule for a connection that failed: wait and try again, or stop with a clear error.

Publishers and workers, blocking and asyncio, all connect through ``Reconnect``: each failure
goes to ``failed``, which either returns the pause before the next try or raises what retrying
cannot fix. Pure: the caller passes the time and does the waiting.

Stops at once:
- a certificate that does not verify, or a client certificate the broker refuses
  (``TLSHandshakeError``);
- a refused login or a vhost the user may not open (``BrokerError`` naming the user, the
  broker's reason and what to check);
- ``give_up_after`` seconds without a connection (``ConnectionLost``).
Anything else (refused, reset or timed-out sockets, a broker restarting) is retried after
``Backoff.delay(attempt)``.
"""

from __future__ import annotations

import logging

from rabbitry.amqp.errors import ConnectionLost
from rabbitry.amqp.session import ConnectionRefused
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError
from rabbitry.uri import mask_text

logger = logging.getLogger("rabbitry.amqp")

_REFUSAL_HINTS = {
    403: "check the user name and password (URL userinfo, percent-encoded)",
    530: "grant the user permissions on the vhost, or connect to a vhost it may use",
}


def refusal_error(settings: ConnectionSettings, refusal: ConnectionRefused) -> BrokerError:
    """The error for a connection the broker refused for good: who, where, why, what to do."""
    hint = _REFUSAL_HINTS.get(refusal.reply_code, "see the broker's log")
    return BrokerError(
        f"{settings.display} refused the connection of user {settings.username!r}:"
        f" {refusal}; {hint}"
    )


class Reconnect:
    """The attempts of one outage: from the first failure until a connection is ready again."""

    def __init__(self, settings: ConnectionSettings, now: float) -> None:
        self.settings = settings
        self.started = now
        self.attempt = 0

    def failed(self, exc: BaseException, now: float) -> float:
        """Seconds to wait before the next try; raises when trying again cannot help."""
        settings = self.settings
        if isinstance(exc, BrokerError):
            raise exc
        refusal = settings.tls_failure(exc)
        if refusal is not None:
            raise refusal from None
        if isinstance(exc, ConnectionRefused) and exc.permanent:
            raise refusal_error(settings, exc) from None
        elapsed = now - self.started
        give_up = settings.backoff.give_up_after
        reason = mask_text(str(exc)) or type(exc).__name__
        if give_up is not None and elapsed >= give_up:
            raise ConnectionLost(
                f"could not connect to {settings.display} for {elapsed:.0f} s: {reason}"
            ) from None
        pause = settings.backoff.delay(self.attempt)
        self.attempt += 1
        logger.warning(
            "connecting to %s failed (%s); retrying in %.1f s", settings.display, reason, pause
        )
        return pause
