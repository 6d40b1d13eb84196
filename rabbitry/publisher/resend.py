"""A publisher's side of an outage, the same for ``Publisher`` and ``AsyncPublisher``: the line
that says the connection is lost, what it sends again on the next connection, and what becomes
of those messages when it gives up.

The connecting itself is ``rabbitry.amqp.connector``'s; this module is the publisher's hooks.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.connector import Outage
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.errors import BrokerError, ConnectionLost
from rabbitry.publisher.base import PublisherBase, logger
from rabbitry.uri import mask_text


def note_lost(publisher: PublisherBase, error: BaseException | str | None) -> None:
    """Say that the connection went away (``error``: why; None: the broker's heartbeats
    stopped); the next connect sends again what it held."""
    where = publisher.walk.current.display
    if error is None:
        logger.warning("no heartbeat from %s: reconnecting", where)
    else:
        logger.warning("connection to %s lost: %s", where, mask_text(str(error)))


def publisher_outage(
    publisher: PublisherBase,
    *,
    first: bool,
    tidy: Callable[[BaseException], None],
    gave_up: Callable[[BaseException], None],
    stopping: Callable[[], bool] | None = None,
) -> tuple[Outage, list[Delivery]]:
    """The outage of a (re)connect and the unconfirmed messages the new connection sends again.

    After a loss it counts a reconnect and tells waiting requests their replies are gone; once
    connected it announces the republish (the log line, the ``on_republish`` hook); when it gives
    up, each message it held fails with ``ConnectionLost`` (with the reason when it is the
    rule's), then ``gave_up`` runs."""
    resend = publisher.tracker.take_unsettled() if publisher.confirms else []
    if not first:
        publisher.reconnects += 1
        publisher.replies.channel_lost("the connection was lost")

    def fail_resend(error: BaseException) -> None:
        reason = str(error) if isinstance(error, BrokerError) else "not sent"
        for d in resend:
            publisher.tracker.fail_detached(d, ConnectionLost(f"message {d.message_id}: {reason}"))
        gave_up(error)

    outage = Outage(
        Reconnect(publisher.settings, time.monotonic(), publisher.walk, after_loss=not first),
        tidy=tidy,
        restored=lambda: publisher._announce_republish(resend),
        gave_up=fail_resend,
        stopping=stopping,
    )
    return outage, resend
