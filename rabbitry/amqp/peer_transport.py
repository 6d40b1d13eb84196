"""The asyncio side of ``inprocess``: a ``Transport`` whose ``write`` goes to a ``Peer`` and whose
answers reach the protocol through the event loop, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from rabbitry.amqp.inprocess import Peer

__all__ = ["open_peer_transport"]


class _PeerTransport(asyncio.Transport):
    """An asyncio transport over a ``Peer``: the peer's answers go through ``call_soon``, so a
    protocol never receives bytes inside its own ``write``."""

    def __init__(self, peer: Peer, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._closing = False
        self._link = peer.open(self._received, self._lost)

    def _received(self, data: bytes) -> None:
        self._loop.call_soon_threadsafe(self._deliver, data)

    def _deliver(self, data: bytes) -> None:
        if not self._closing:
            self._protocol.data_received(data)

    def _lost(self) -> None:
        self._loop.call_soon_threadsafe(self._finish, ConnectionResetError("the peer closed"))

    def _finish(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._protocol.connection_lost(exc)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._link.write(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._link.close()
            self._loop.call_soon(self._finish, None)

    def abort(self) -> None:
        self.close()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass  # everything written reaches the peer at once

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def open_peer_transport(peer: Peer, protocol: asyncio.Protocol) -> asyncio.Transport:
    """Connect ``protocol`` to ``peer`` (``connection_made`` is called before this returns)."""
    transport = _PeerTransport(peer, protocol)
    protocol.connection_made(transport)
    return transport
