"""Connections to a peer in this process instead of a socket: where a scripted broker plugs in.

A test registers a ``Peer`` under a host name (``attach``); from then on every connection the
transports open to that host goes to the peer, bytes in and bytes out, with no socket, no
thread and no clock of its own (as httpcore's mock network stream). The clients above the
transports (``Publisher``, ``Worker`` and their asyncio twins) are the same code as against a
broker: only the last hop changes. ``rabbitry.testing.ScriptedBroker`` is the peer rabbitry
ships; any object with ``open`` will do.

Host names under ``.invalid`` never resolve (RFC 6761), so a URL meant for a peer that is not
attached fails to connect instead of reaching a real host.

``PeerSocket`` is what the blocking transport gets instead of a socket: ``send`` hands bytes to
the peer, ``recv`` returns what the peer answered. A pipe carries only wake-ups, so that
``select()`` in ``SocketWire`` works unchanged. ``peer_transport`` does the same for asyncio
(apart, so that a blocking client does not load asyncio).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["Link", "Peer", "PeerSocket", "attach", "detach", "peer_for"]


class Link(Protocol):
    """One connection to a peer, as the client side holds it."""

    def write(self, data: bytes) -> None:
        """Bytes from the client; the peer may answer at once (through ``received``)."""

    def close(self) -> None:
        """The client closed the connection."""


class Peer(Protocol):
    """Something that answers AMQP connections in this process."""

    def open(self, received: Callable[[bytes], None], lost: Callable[[], None]) -> Link:
        """A new connection: the peer calls ``received`` with its bytes (from any thread)
        and ``lost`` when it drops the connection."""


_peers: dict[str, Peer] = {}
_lock = threading.Lock()


def attach(host: str, peer: Peer) -> None:
    """Connections to ``host`` go to ``peer`` from now on (until ``detach``)."""
    with _lock:
        _peers[host.lower()] = peer


def detach(host: str) -> None:
    with _lock:
        _peers.pop(host.lower(), None)


def peer_for(host: str) -> Peer | None:
    """The peer attached to ``host``, if any (None: open a socket)."""
    if not _peers:  # the usual case, without the lock
        return None
    with _lock:
        return _peers.get(host.lower())


class PeerSocket:
    """The part of a non-blocking socket that ``SocketWire`` uses, over a ``Peer``."""

    def __init__(self, peer: Peer) -> None:
        self._inbox = bytearray()
        self._gone = False
        self._guard = threading.Lock()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._signalled = False
        self._link = peer.open(self._received, self._lost)

    def _received(self, data: bytes) -> None:
        with self._guard:
            self._inbox += data
            self._signal()

    def _lost(self) -> None:
        with self._guard:
            self._gone = True
            self._signal()

    def _signal(self) -> None:
        if not self._signalled and self._wake_write >= 0:
            self._signalled = True
            os.write(self._wake_write, b"\0")

    def fileno(self) -> int:
        return self._wake_read

    def send(self, data: bytes | bytearray | memoryview) -> int:
        if self._gone:
            raise ConnectionResetError("the peer closed the connection")
        self._link.write(bytes(data))
        return len(data)

    def recv(self, size: int) -> bytes:
        with self._guard:
            if self._signalled:
                self._signalled = False
                while True:
                    try:
                        if not os.read(self._wake_read, 4096):
                            break
                    except BlockingIOError:
                        break
            if self._inbox:
                data = bytes(self._inbox[:size])
                del self._inbox[:size]
                if self._inbox or self._gone:
                    self._signal()
                return data
            if self._gone:
                return b""
        raise BlockingIOError("nothing from the peer yet")

    def pending(self) -> int:
        return 0

    def close(self) -> None:
        with self._guard:
            if self._wake_write < 0:
                return
            gone, self._gone = self._gone, True
            os.close(self._wake_read)
            os.close(self._wake_write)
            self._wake_read = self._wake_write = -1
        if not gone:
            self._link.close()
