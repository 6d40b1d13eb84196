"""The one rule for a connection that failed: wait and try again, or stop with a clear error.

Publishers and workers, blocking and asyncio, all connect through ``Reconnect``: each failure
goes to ``failed``, which either returns the pause before the next try or raises what retrying
cannot fix. Pure: the caller passes the time and does the waiting.

Stops at once:
- a certificate that does not verify, or a client certificate the broker refuses
  (``TLSHandshakeError``);
- a refused login or a vhost the user may not open (``BrokerError`` naming the user, the
  broker's reason and what to check);
- ``give_up_after`` seconds without a connection (``ConnectionLost``);
- bytes that are no AMQP frame in answer to the handshake (``FrameError``, a ``BrokerError``):
  another server on the port answers the same way again. With several nodes the others are
  tried first; the same node's garbage a second time in one outage ends it.
Anything else (refused, reset or timed-out sockets, a broker restarting) is retried.

With several nodes (a cluster's URLs), ``NodeWalk`` says which node a try goes to: a failed try
moves on to the next node at once, and only when every node failed in a row does the back-off
pause (``Backoff.delay(round)``). After a lost connection the walk starts at the node after the
lost one: the node that just went away is tried last. With one node this is the plain rule:
``Backoff.delay(attempt)`` after each failure.

A client that asks once (``amqp.channel.Channel``, the tools' channel, and the stream reader)
gives ``rounds=1``: every node is tried once, and when the last one fails too the rule raises
``ConnectionLost`` instead of pausing: a tool reports a broker it cannot reach rather than
waiting through a back-off.
"""

from __future__ import annotations

import logging
import random

from rabbitry.amqp.session import ConnectionRefused
from rabbitry.amqp.settings import ConnectionSettings, NodeOrder
from rabbitry.errors import BrokerError, ConnectionLost, FrameError
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


class NodeWalk:
    """The order in which one client tries its nodes, for as long as it lives.

    Shuffled once (``NodeOrder.SHUFFLE``, the default) or as given (``IN_ORDER``); ``current``
    is the node the next try goes to, ``advance`` moves on (wrapping around). The only
    randomness is the shuffle, and its source can be passed in."""

    def __init__(self, settings: ConnectionSettings, rng: random.Random | None = None) -> None:
        nodes = list(settings.addresses)
        if settings.node_order is NodeOrder.SHUFFLE and len(nodes) > 1:
            (rng or random.Random()).shuffle(nodes)
        self.settings = settings
        self.order = tuple(nodes)
        self.position = 0

    def __len__(self) -> int:
        return len(self.order)

    @property
    def current(self) -> ConnectionSettings:
        """The settings of a connection to the node the next try goes to."""
        return self.settings.at(self.order[self.position])

    def advance(self) -> ConnectionSettings:
        """Move on to the next node; its settings."""
        self.position = (self.position + 1) % len(self.order)
        return self.current


class Reconnect:
    """The attempts of one outage: from the first failure until a connection is ready again.

    ``target`` is where the next try connects. ``after_loss`` (a connection that was up went
    away) starts the walk at the node after the lost one."""

    def __init__(
        self,
        settings: ConnectionSettings,
        now: float,
        walk: NodeWalk | None = None,
        *,
        after_loss: bool = False,
        rounds: int | None = None,
    ) -> None:
        self.settings = settings
        self.rounds = rounds
        """Full rounds of failed tries over every node before giving up (None: until
        ``give_up_after``)."""
        self.walk = walk if walk is not None else NodeWalk(settings)
        self.after_loss = after_loss
        self.started = now
        self.attempt = 0
        """Back-off pauses taken: full rounds over the nodes that all failed."""
        self.failures = 0
        self._tried = 0  # nodes tried since the last pause
        self._garbled: set[str] = set()  # nodes that answered with bytes that are no AMQP frame
        if after_loss:
            self.walk.advance()

    @property
    def target(self) -> ConnectionSettings:
        """The settings of the next try's connection (its node's host and port)."""
        return self.walk.current

    def failed(self, exc: BaseException, now: float) -> float:
        """Seconds to wait before the next try; raises when trying again cannot help."""
        settings = self.walk.current
        self.failures += 1
        node = str(settings.addresses[0])
        if isinstance(exc, FrameError) and len(self.walk) > 1 and node not in self._garbled:
            self._garbled.add(node)  # another node may be sound: try it; this one again ends it
        elif isinstance(exc, BrokerError):
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
                f"could not connect to {self.settings.display} for {elapsed:.0f} s: {reason}"
            ) from None
        following = self.walk.advance()
        self._tried += 1
        if self._tried < len(self.walk):
            logger.warning(
                "connecting to %s failed (%s); trying %s",
                settings.display,
                reason,
                following.display,
            )
            return 0.0
        self._tried = 0
        if self.rounds is not None and self.attempt + 1 >= self.rounds:
            raise ConnectionLost(
                f"could not connect to {self.settings.display}, every node tried: {reason}"
            ) from None
        pause = settings.backoff.delay(self.attempt)
        self.attempt += 1
        if len(self.walk) > 1:
            logger.warning(
                "connecting to %s failed (%s), as did every node; trying %s in %.1f s",
                settings.display,
                reason,
                following.display,
                pause,
            )
        else:
            logger.warning(
                "connecting to %s failed (%s); retrying in %.1f s", settings.display, reason, pause
            )
        return pause
