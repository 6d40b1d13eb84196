"""Exact message counts over AMQP (passive declare), where management statistics lag.

The management API's counts are refreshed every few seconds, and quorum queues do not support
the broker's ``if-empty`` delete; before deleting or migrating a queue, and before a plan says how
many messages are at stake, rabbitry asks the queue itself.

The counts must come from the broker the plan is made against: at the first connection the
cluster the AMQP side names (``connection.start``) is compared with the one the management API
names (``/api/overview``), and two different clusters are refused (``check_same_broker``). A plan
that counts nothing opens no AMQP connection and so makes no such comparison; its endpoints are
then paired by host alone (``check_pairing``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from rabbitry.errors import BrokerError
from rabbitry.management.endpoints import Endpoints, check_same_broker

logger = logging.getLogger("rabbitry.queue_counter")

if TYPE_CHECKING:
    from rabbitry.amqp.channel import Channel


class AmqpQueueCounter(contextlib.AbstractContextManager["AmqpQueueCounter"]):
    """Callable ``(vhost, queue) -> (messages, consumers)``: one connection per vhost, opened at
    the first count and kept for the next ones until ``close`` (or the end of a ``with``).

    ``management_cluster`` gives the cluster name the management API answers for (by default
    read from ``/api/overview`` once, at the first connection; None when unknown)."""

    def __init__(
        self,
        endpoints: Endpoints,
        *,
        management_cluster: Callable[[], str | None] | None = None,
    ) -> None:
        self.endpoints = endpoints
        self._channels: dict[str, Channel] = {}
        self._management_cluster = management_cluster or self._overview_cluster
        self._same_broker_checked = False

    def _overview_cluster(self) -> str | None:
        try:
            with self.endpoints.management() as client:
                name = client.get("/overview").get("cluster_name")
        except BrokerError as exc:  # the plan's own reads report an unreachable API
            logger.debug("cluster name of the management API unknown: %s", exc)
            return None
        return str(name) if name else None

    def _check_same_broker(self, channel: Channel) -> None:
        if self._same_broker_checked:
            return
        amqp_cluster = channel.server_properties.get("cluster_name")
        if isinstance(amqp_cluster, bytes):
            amqp_cluster = amqp_cluster.decode("utf-8", "replace")
        if amqp_cluster:
            check_same_broker(self.endpoints, str(amqp_cluster), self._management_cluster())
        self._same_broker_checked = True

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    def _channel(self, vhost: str, queue: str) -> Channel:
        # the AMQP client loads at the first count: most plans count nothing
        from rabbitry.amqp.channel import Channel

        channel = self._channels.get(vhost)
        if channel is None or not channel.is_open:
            try:
                channel = Channel(self.endpoints.amqp_url_for(vhost))
            except BrokerError as exc:
                raise BrokerError(
                    f"cannot count the messages of {vhost}/{queue} over AMQP: {exc}"
                    " (or pass --force to go on without the count)"
                ) from None
            try:
                self._check_same_broker(channel)
            except BrokerError:
                channel.close()
                raise
            self._channels[vhost] = channel
        return channel

    def __call__(self, vhost: str, queue: str) -> tuple[int, int]:
        # a connection kept from an earlier count may have died while idle (a heartbeat missed,
        # a broker restart, a proxy's timeout): one fresh connection tries again before failing
        try:
            return self._count(vhost, queue)
        except _Lost as lost:
            logger.debug("AMQP connection lost counting %s/%s, opening a fresh one", vhost, queue)
            try:
                return self._count(vhost, queue)
            except _Lost as again:
                raise BrokerError(
                    f"lost the AMQP connection counting {vhost}/{queue} twice: {again.cause}"
                    f" (first: {lost.cause})"
                ) from None

    def _count(self, vhost: str, queue: str) -> tuple[int, int]:
        from rabbitry.errors import ChannelRefused

        channel = self._channel(vhost, queue)
        try:
            declared = channel.queue_declare(queue, passive=True)
            return int(declared.message_count or 0), int(declared.consumer_count or 0)
        except ChannelRefused as exc:
            # the broker closed the channel; it opens again on the same connection for the next
            if exc.reply_code == 404:
                return 0, 0
            raise BrokerError(f"cannot inspect {vhost}/{queue}: {exc.reply_text}") from None
        except BrokerError as exc:  # the connection broke, or the broker did not answer
            self._channels.pop(vhost, None)
            channel.close()
            raise _Lost(exc) from None


# Internal: caught in this module, which tries once more or raises a BrokerError.
class _Lost(Exception):
    """The connection of a count broke (``cause``): the caller may try once more."""

    def __init__(self, cause: BrokerError) -> None:
        super().__init__(str(cause))
        self.cause = cause
