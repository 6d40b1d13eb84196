"""A tiny in-process AMQP broker for publisher unit tests: handshake, confirms, returns."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from pamqp import body as pamqp_body
from pamqp import commands, frame, header


class FakeBroker:
    """Acks every message after ``ack_every`` publishes (multiple), records the peak in flight.

    ``decide(index, exchange, routing_key)`` may answer "nack" or "return" for a message.
    """

    def __init__(
        self, ack_every: int = 16, decide: Callable[[int, str, str], str] | None = None
    ) -> None:
        self.ack_every = ack_every
        self.decide = decide or (lambda i, e, k: "ack")
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.published = 0
        self.peak_unacked = 0
        self.in_flight: list[tuple[str, int]] = []
        """(exchange, unconfirmed messages counting it) of each publish, in order."""
        self.connections = 0
        self.drop_after: int | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"amqp://u:secret-pw@127.0.0.1:{self.port}/%2F"

    def close(self) -> None:
        self.server.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        buf = b""
        tag = 0
        acked = 0
        pending_publish: commands.Basic.Publish | None = None
        results: dict[int, str] = {}
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                if buf.startswith(b"AMQP"):
                    buf = buf[8:]
                    conn.sendall(
                        frame.marshal(
                            commands.Connection.Start(mechanisms="PLAIN", locales="en_US"), 0
                        )
                    )
                out = b""
                while True:
                    try:
                        used, channel, obj = frame.unmarshal(buf)
                    except Exception:
                        break
                    buf = buf[used:]
                    if isinstance(obj, commands.Connection.StartOk):
                        out += frame.marshal(commands.Connection.Tune(2047, 131072, 60), 0)
                    elif isinstance(obj, commands.Connection.Open):
                        out += frame.marshal(commands.Connection.OpenOk(), 0)
                    elif isinstance(obj, commands.Channel.Open):
                        out += frame.marshal(commands.Channel.OpenOk(), channel)
                    elif isinstance(obj, commands.Confirm.Select):
                        out += frame.marshal(commands.Confirm.SelectOk(), channel)
                    elif isinstance(obj, commands.Connection.Close):
                        conn.sendall(out + frame.marshal(commands.Connection.CloseOk(), 0))
                        return
                    elif isinstance(obj, commands.Basic.Publish):
                        pending_publish = obj
                    elif isinstance(obj, header.ContentHeader) and pending_publish is not None:
                        tag += 1
                        self.published += 1
                        if self.drop_after is not None and self.published >= self.drop_after:
                            self.drop_after = None
                            conn.close()
                            return
                        self.peak_unacked = max(self.peak_unacked, tag - acked)
                        self.in_flight.append((pending_publish.exchange, tag - acked))
                        verdict = self.decide(
                            self.published, pending_publish.exchange, pending_publish.routing_key
                        )
                        results[tag] = verdict
                        if verdict == "return":
                            out += frame.marshal(
                                commands.Basic.Return(
                                    312,
                                    "NO_ROUTE",
                                    pending_publish.exchange,
                                    pending_publish.routing_key,
                                ),
                                1,
                            )
                            out += frame.marshal(
                                header.ContentHeader(0, obj.body_size, obj.properties), 1
                            )
                        if tag - acked >= self.ack_every:
                            out += self._confirm(results, acked, tag)
                            acked = tag
                    elif isinstance(obj, pamqp_body.ContentBody) and (
                        obj.value and pending_publish is not None and results.get(tag) == "return"
                    ):
                        out += frame.marshal(obj, 1)
                if tag > acked and not buf:
                    out += self._confirm(results, acked, tag)
                    acked = tag
                if out:
                    conn.sendall(out)
        except OSError:
            return

    @staticmethod
    def _confirm(results: dict[int, str], acked: int, tag: int) -> bytes:
        out = b""
        if all(results.get(t) != "nack" for t in range(acked + 1, tag + 1)):
            return frame.marshal(commands.Basic.Ack(tag, multiple=True), 1)
        for t in range(acked + 1, tag + 1):
            cls = commands.Basic.Nack if results.get(t) == "nack" else commands.Basic.Ack
            out += frame.marshal(cls(t, multiple=False), 1)
        return out
