"""The asyncio transport: one ``asyncio.Protocol`` that moves bytes between a socket and an owner.

The owner (``AsyncPublisher``, ``AsyncWorker``) keeps its session and decides what bytes mean;
``Wire`` only forwards events, so both shells share the same transport code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from rabbitry.amqp.connector import RETRIED, Outage
from rabbitry.amqp.inprocess import peer_for
from rabbitry.amqp.peer_transport import open_peer_transport
from rabbitry.amqp.reconnect import refusal_error
from rabbitry.amqp.session import ConnectionRefused, Session
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError, FrameError

T = TypeVar("T")


class WireOwner(Protocol):
    def wire_made(self, wire: Wire) -> None: ...
    def wire_data(self, wire: Wire, data: bytes) -> None: ...
    def wire_lost(self, wire: Wire, exc: Exception | None) -> None: ...
    def wire_writable(self, wire: Wire, writable: bool) -> None: ...
    def wire_refused(self, wire: Wire, error: BrokerError) -> None: ...


class Wire(asyncio.Protocol):
    """One connection's transport, reporting to its owner."""

    def __init__(self, owner: WireOwner, *, write_buffer_high: int | None = None) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.write_buffer_high = write_buffer_high

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.write_buffer_high is not None:
            transport.set_write_buffer_limits(high=self.write_buffer_high)
        self.owner.wire_made(self)

    def data_received(self, data: bytes) -> None:
        self.owner.wire_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.wire_lost(self, exc)

    def pause_writing(self) -> None:
        self.owner.wire_writable(self, False)

    def resume_writing(self) -> None:
        self.owner.wire_writable(self, True)

    def feed(self, session: Session, data: bytes) -> bool:
        """Pass ``data`` to ``session``; False when the broker refused or closed the connection
        (the goodbye is written and the transport closed; a refusal retrying cannot help goes
        to the owner's ``wire_refused``)."""
        try:
            session.receive(data, time.monotonic())
            return True
        except FrameError as exc:
            # nothing after a broken frame can be read: the connection is over (in the
            # handshake the owner's try fails with it, and the reconnect rule decides)
            self.owner.wire_lost(self, FrameError.at(str(session.settings.addresses[0]), exc))
            self.abort()
            return False
        except ConnectionRefused as exc:
            if exc.permanent:
                self.owner.wire_refused(self, refusal_error(session.settings, exc))
            if self.transport is not None:
                if session.out:
                    self.transport.write(session.take_output())
                self.transport.close()
            return False

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def open_wire(settings: ConnectionSettings, attach: Callable[[], Wire]) -> None:
    """Open the TCP (and TLS) connection; ``attach`` runs before the broker's first bytes."""
    s = settings
    peer = peer_for(s.host)
    if peer is not None:  # a peer in this process (a scripted broker): no socket
        open_peer_transport(peer, attach())
        return
    await asyncio.get_running_loop().create_connection(
        attach,
        s.host,
        s.port,
        ssl=s.tls,
        # asyncio reads None as "the host" and "" as "no name" (server_name_indication=disable)
        server_hostname=None if s.tls is None else s.tls_server_name or "",
    )


async def connect_async(
    outage: Outage, attempt: Callable[[ConnectionSettings], Awaitable[T]]
) -> T | None:
    """``rabbitry.amqp.connector.connect`` for asyncio: the same tries, the pauses awaited (a
    cancelled wait gives the outage up)."""
    with outage.ending():
        while outage.going:
            try:
                connection = await attempt(outage.target)
            except RETRIED as exc:
                await asyncio.sleep(outage.failed(exc, time.monotonic()))
                continue
            return outage.connected(connection)
    return None
