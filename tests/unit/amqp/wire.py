"""Reading back what a session wrote, frame by frame, with pamqp (an independent parser)."""

from __future__ import annotations

from typing import Any

from pamqp import frame as pamqp_frame


def frames_in(data: bytes) -> list[Any]:
    """The pamqp frames of ``data``, a run of whole AMQP 0-9-1 frames, in order."""
    out = []
    while data:
        size = int.from_bytes(data[3:7], "big") + 8  # header, payload, frame end
        out.append(pamqp_frame.unmarshal(data[:size])[2])
        data = data[size:]
    return out
