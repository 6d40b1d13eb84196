"""Asking the broker whether the queues and exchanges a worker needs exist, without I/O.

``Probe`` speaks on a side channel of the worker's own connection (no second connection to
open at every start): a passive queue.declare or exchange.declare per need, all sent at once.
The broker answers them in order; one that does not exist closes the side channel (404), not
the connection, so the probe notes it as missing, opens the channel again and asks the rest. A
start whose topology is complete costs one round trip; each missing object adds one.

The session feeds it the frames of its channel (``receive``) and writes what it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pamqp import commands

from rabbitry.amqp import frames
from rabbitry.consumer.preflight import Need, Needed

__all__ = ["PROBE_CHANNEL", "Probe"]

PROBE_CHANNEL = 2
"""The side channel (the worker consumes and publishes on channel 1)."""


class Probe:
    """The answers of the broker to one worker's needs: ``missing`` once ``done``."""

    def __init__(self, needs: Sequence[Need]) -> None:
        self.asked = [need for need in needs if need.kind is not Needed.BROKER]
        """The needs the broker is asked about, in the order it answers them."""
        self.missing: list[Need] = [need for need in needs if need.kind is Needed.BROKER]
        """What the broker lacks: the steps' own findings, then what it did not find."""
        self.answered = 0
        self.done = not self.asked

    def start(self) -> bytes:
        """The frames that open the side channel and ask every question."""
        return b"" if self.done else self._ask()

    def _ask(self) -> bytes:
        out = bytearray(frames.method_frame(PROBE_CHANNEL, commands.Channel.Open()))
        for need in self.asked[self.answered :]:
            out += _passive_declare(need)
        return bytes(out)

    def receive(self, frame: Any) -> bytes:
        """One frame of the side channel; the frames to send in reply."""
        if self.done:
            return b""
        if isinstance(frame, commands.Queue.DeclareOk | commands.Exchange.DeclareOk):
            self.answered += 1
            return self._finish() if self.answered == len(self.asked) else b""
        if isinstance(frame, commands.Channel.Close):
            need = self.asked[self.answered]
            code = frame.reply_code or 0
            if code != 404:  # an exclusive queue of another connection, say: not ours either
                why = f"{need.why}; the broker answered {code} {frame.reply_text}"
                need = Need(need.kind, need.name, why, need.step)
            self.missing.append(need)
            self.answered += 1
            out = frames.method_frame(PROBE_CHANNEL, commands.Channel.CloseOk())
            if self.answered == len(self.asked):
                self.done = True
                return out
            return out + self._ask()
        return b""  # channel.open-ok

    def _finish(self) -> bytes:
        self.done = True
        return frames.method_frame(PROBE_CHANNEL, commands.Channel.Close(200, "checked", 0, 0))


def _passive_declare(need: Need) -> bytes:
    if need.kind is Needed.QUEUE:
        return frames.queue_declare_frame(PROBE_CHANNEL, need.name, passive=True)
    return frames.exchange_declare_frame(PROBE_CHANNEL, need.name, passive=True)
