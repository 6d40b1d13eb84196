"""The one connection manager: how every client connects, reconnects, picks up again and gives up.

``Publisher``, ``AsyncPublisher``, ``Worker`` and ``AsyncWorker`` open each connection here, as
do the tools' ``Channel`` and the ``StreamReader`` (with rules that try once), so they cannot
drift apart (they did: the blocking worker paused before its first try after a lost
connection, where the others tried at once). httpcore's shape: ``Outage`` is the decision core
(no I/O, no clock: the driver passes the time); ``connect`` here and ``rabbitry.amqp.aio``'s
``connect_async`` are the blocking and asyncio drivers, a few lines each: try, and after a
failure sleep what the core says (the asyncio one lives with its transport, so that a blocking
client never loads asyncio).

The rule:
- An outage runs from the moment a connection is needed (the first, or one after a loss) until
  one is ready. Its first try goes out at once: after a loss, to the next node (the lost one is
  tried last; with one node, that node again). The back-off pauses only after a failed try.
- A failed try first goes to the client's ``tidy`` (close the socket, forget the channel; it may
  raise what only the client knows is final, such as a worker's failed start-up check), then to
  ``Reconnect.failed`` (``rabbitry.amqp.reconnect``): the next node at once, a back-off pause
  after a full round of nodes, or the error that retrying cannot fix.
- A try that connects ends the outage: the client's ``restored`` hook runs (a publisher
  announces what it republishes, a worker consumes again), and ``connected to ...`` is logged
  when the connection follows a loss or a failed try.
- An outage that ends in an error hands it to the client's ``gave_up`` (a publisher fails the
  messages it held to send again) and then raises it: ``ConnectionLost`` after the back-off's
  ``give_up_after``, a ``BrokerError`` for a refused login, a ``TLSHandshakeError``, a
  ``FrameError`` for a handshake answered with bytes that are no AMQP frame (with several
  nodes, once the same node answered so twice; the others are tried). A broken frame on a
  connection that was up is a loss like any other: the walk goes on to the next node.
- ``stopping`` (the client closes) ends the outage without a connection: the drivers return None.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from rabbitry.amqp.blocking import Disconnected
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError

__all__ = ["RETRIED", "Outage", "connect"]

logger = logging.getLogger("rabbitry.amqp")

T = TypeVar("T")

RETRIED: tuple[type[BaseException], ...] = (OSError, Disconnected, BrokerError)
"""What a try may raise and still reach the rule (which raises the final ones again)."""


def _nothing(_: object = None) -> None:
    return None


@dataclass(eq=False)
class Outage:
    """The tries of one outage (``rule``) and the client's hooks around them; no I/O, no clock."""

    rule: Reconnect
    """Where the next try goes and how long to wait after a failed one."""
    tidy: Callable[[BaseException], None] = _nothing
    restored: Callable[[], None] = _nothing
    gave_up: Callable[[BaseException], None] = _nothing
    stopping: Callable[[], bool] | None = None
    _over: bool = field(default=False, init=False)

    @property
    def going(self) -> bool:
        """Whether to try (again): the client has not begun to close."""
        return self.stopping is None or not self.stopping()

    @property
    def target(self) -> ConnectionSettings:
        """The settings of the next try's connection (its node)."""
        return self.rule.target

    def failed(self, exc: BaseException, now: float) -> float:
        """Seconds to wait before the next try; raises when the outage ends in an error."""
        self.tidy(exc)
        return self.rule.failed(exc, now)

    def connected(self, connection: T) -> T:
        """End the outage with ``connection``: say so where it was in doubt, run ``restored``."""
        self._over = True
        if self.rule.after_loss or self.rule.failures:
            logger.info("connected to %s", self.rule.target.display)
        self.restored()
        return connection

    def give_up(self, error: BaseException) -> None:
        """End the outage in ``error`` (the rule's, or the client cancelled the wait): the
        client's ``gave_up`` hook, once, unless a connection ended it first."""
        if not self._over:
            self._over = True
            self.gave_up(error)

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """Around the tries: an error that escapes them (the rule's, or a wait cancelled)
        ends the outage through ``give_up``."""
        try:
            yield
        except BaseException as exc:
            self.give_up(exc)
            raise


def connect(outage: Outage, attempt: Callable[[ConnectionSettings], T]) -> T | None:
    """Try ``attempt`` (one connection to the node it is given) until it connects, blocking
    through the pauses; None when the client began to close first."""
    with outage.ending():
        while outage.going:
            try:
                connection = attempt(outage.target)
            except RETRIED as exc:
                time.sleep(outage.failed(exc, time.monotonic()))
                continue
            return outage.connected(connection)
    return None
