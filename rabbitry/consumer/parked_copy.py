"""What the parked copy of a message carries besides rabbitry's retry headers: the failure's
stack trace and the headers of the handler's own ``parked_headers`` hook.

AMQP sends all of a message's properties, headers included, in one content header frame, which
must fit the connection's negotiated ``frame_max``: a header that does not fit fails the
publish and closes the connection (Spring AMQP #2375). So the trace is cut to the room the frame
has left once everything else is in it, measured on the copy as it is built (``room``), never
guessed. What is kept is what a reader needs first: the exception line (itself cut when it is
huge) and the innermost frames, where it was raised; outer frames go first.

``with_extras`` is the one entry: the copy's headers in, the headers to publish out. Only the
hook runs user code; an error in it, or headers of its that do not fit, are logged and left out:
the message is parked all the same.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from rabbitry.consumer.message import IncomingMessage
from rabbitry.policies.retry import (
    BROKER_HEADERS,
    RABBITRY_HEADER_PREFIX,
    STACK_TRACE_HEADER,
    cause_chain,
)
from rabbitry.uri import mask_text

__all__ = ["TRACE_HEADER", "ParkedHeaders", "stack_trace", "with_extras"]

TRACE_HEADER = STACK_TRACE_HEADER
"""The failure's stack trace on a parked copy, cut to fit the header frame."""
ParkedHeaders: TypeAlias = Callable[[IncomingMessage, BaseException], Mapping[str, Any] | None]
"""A handler's hook: headers of its own for the copy parked after ``error``."""
MIN_TRACE_BYTES = 64
"""Below this a trace says nothing useful: the header is left out."""
_LINE_SHARE = 2
"""The exception line takes at most 1/_LINE_SHARE of the room, so frames are left room too."""
_FRAMES_HEAD = "Traceback (most recent call last):\n"
logger = logging.getLogger("rabbitry.worker")


def entry_size(name: str, text: str) -> int:
    """Bytes a long-string header entry adds to an AMQP field table."""
    return 1 + len(name.encode("utf-8")) + 1 + 4 + len(text.encode("utf-8"))


def _cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` UTF-8 bytes, marked when cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = f" ... [{len(data)} bytes, cut]"
    keep = max(0, limit - len(marker.encode("utf-8")))
    return data[:keep].decode("utf-8", "ignore") + marker


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def stack_trace(error: BaseException, limit: int) -> str:
    """``error``'s trace as Python prints it, in at most ``limit`` UTF-8 bytes (secrets in URLs
    masked). When it does not fit: the innermost frames that fit beside the exception line (cut
    when it would take more than half the room), then one line per cause while room is left."""
    full = mask_text("".join(traceback.format_exception(error)))
    if _size(full) <= limit:
        return full
    whole_line = mask_text("".join(traceback.format_exception_only(error))).rstrip("\n")
    stack = traceback.extract_tb(error.__traceback__)
    frames = [mask_text(frame) for frame in traceback.format_list(stack)]
    widest = f"  [{len(frames)} outer frames left out]\n"
    fixed = _size(_FRAMES_HEAD) + _size(widest) + 1  # the line's own newline
    line_room = min(_size(whole_line), (limit - fixed) // _LINE_SHARE)
    room = limit - fixed - line_room
    kept: list[str] = []
    for frame in reversed(frames):  # innermost first
        if _size(frame) > room:
            break
        kept.append(frame)
        room -= _size(frame)
    left_out = len(frames) - len(kept)
    marker = f"  [{left_out} outer frames left out]\n" if left_out else ""
    room += _size(widest) - _size(marker)
    grown = min(_size(whole_line), line_room + room)  # what frames left goes to the line
    room -= grown - line_room
    line = _cut(whole_line, grown) + "\n"
    tail: list[str] = []
    for cause in cause_chain(error)[1:]:
        text = mask_text(traceback.format_exception_only(cause)[-1].strip())
        entry = _cut(f"caused by {text}", min(room - 1, 200)) + "\n"
        if room < 16 or _size(entry) > room:
            break
        tail.append(entry)
        room -= _size(entry)
    return _FRAMES_HEAD + marker + "".join(reversed(kept)) + line + "".join(tail)


def own_headers(
    hook: ParkedHeaders, message: IncomingMessage, error: BaseException
) -> dict[str, Any]:
    """The hook's headers, without names that are rabbitry's or the broker's; {} when it fails."""
    try:
        given = hook(message, error) or {}
        headers = dict(given)
    except Exception as exc:  # the hook's error must not stop the parking
        logger.error(
            "parked_headers of %s failed on message %s: %s: %s; parked without its headers",
            message.queue,
            message.message_id,
            type(exc).__name__,
            mask_text(str(exc)),
        )
        return {}
    reserved = [
        str(k) for k in headers if str(k).startswith(RABBITRY_HEADER_PREFIX) or k in BROKER_HEADERS
    ]
    if reserved:
        logger.warning(
            "parked_headers of %s gave %s: those names are rabbitry's or the broker's; left out",
            message.queue,
            ", ".join(reserved),
        )
    return {str(k): v for k, v in headers.items() if str(k) not in reserved}


def with_extras(
    headers: Mapping[str, Any],
    message: IncomingMessage,
    error: BaseException,
    hook: ParkedHeaders | None,
    room: Callable[[Mapping[str, Any]], int],
) -> dict[str, Any]:
    """The parked copy's headers: ``headers``, the hook's own, then the trace in what is left of
    the header frame. ``room(h)`` is the bytes the header frame would have left with ``h``
    (negative: it does not fit; it raises on a header value AMQP cannot carry)."""
    out = dict(headers)
    if hook is not None:
        extra = own_headers(hook, message, error)
        if extra:
            candidate = {**out, **extra}
            try:
                fits = room(candidate) >= 0
            except (TypeError, ValueError, OverflowError) as exc:
                fits, why = False, f"a value AMQP cannot carry ({exc})"
            else:
                why = "they do not fit the frame size"
            if fits:
                out = candidate
            else:
                logger.error(
                    "parked_headers of %s for message %s left out: %s",
                    message.queue,
                    message.message_id,
                    why,
                )
    left = room(out) - entry_size(TRACE_HEADER, "")
    if left >= MIN_TRACE_BYTES:
        out[TRACE_HEADER] = stack_trace(error, left)
    return out
