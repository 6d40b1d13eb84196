"""A handler's return value as the reply to a request: the message a worker sends back when
the delivery names a ``reply_to`` (direct reply-to, ``Publisher.request``, or a queue).

Pure: the reply's body and its delivery are built here, the worker core publishes it. The
body follows the publisher's rules (bytes as they are, text as UTF-8, dicts, lists and typed
values by the handler's codec); other values (numbers, booleans) go through the codec too,
and a handler that returns None replies with an empty body, so the requester is not left
waiting for a reply that never comes.
"""

from __future__ import annotations

from typing import Any

from rabbitry.amqp.codecs import Codec, is_model
from rabbitry.amqp.confirms import Delivery
from rabbitry.amqp.message import MessageBuilder, encode_body
from rabbitry.amqp.properties import PROPERTY_BITS
from rabbitry.consumer.message import IncomingMessage
from rabbitry.errors import InvalidReply as InvalidReply

REPLY_TO_FLAG = PROPERTY_BITS["reply_to"]
"""The ``reply-to`` bit of a content header's property flags: tested without decoding."""


def reply_body(result: Any, codec: Codec) -> tuple[bytes, str | None]:
    """The reply's bytes and content type for a handler's return value."""
    if result is None:
        return b"", None
    if isinstance(result, bytes | bytearray | memoryview | str | dict | list) or is_model(result):
        return encode_body(result, None, codec)
    try:
        return codec.encode(result), codec.content_type
    except (TypeError, ValueError) as exc:
        raise InvalidReply(
            f"the handler returned {type(result).__name__}, which cannot be sent as its reply"
            f" ({codec.content_type}): {exc}; return bytes, text, a dict, a list or a model"
        ) from None


def build_reply(
    builder: MessageBuilder, message: IncomingMessage, result: Any, codec: Codec
) -> tuple[Delivery, bytes, str | None]:
    """The reply to ``message`` (to its ``reply_to``, echoing its correlation id, else its
    message id), with its body and content type. Mandatory: a requester that is gone makes
    the broker return it, and the worker says so instead of logging a reply that reached no
    one. Transient: nothing stores a reply."""
    body, content_type = reply_body(result, codec)
    reply_to = message.reply_to
    assert reply_to is not None
    correlation_id = message.correlation_id or message.message_id
    delivery = builder.build(
        body,
        exchange="",
        routing_key=reply_to,
        mandatory=True,
        correlation_id=correlation_id,
        content_type=content_type,
        persistent=False,
    )
    return delivery, body, content_type
