"""Building messages: properties, message ids, timestamps, and their frames, once per message.

Every message gets a message id (the caller's, or a fresh 128-bit one: 80 random bits drawn once
per publisher plus a 48-bit sequence, which is unique like a uuid4 at a fraction of the cost) and
a timestamp, and is persistent unless asked otherwise. Frames for the constant parts (the
``basic.publish`` method, the properties before the message id) are cached per publisher.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from rabbitry.amqp import frames
from rabbitry.amqp.codecs import JSON, Codec, encode_model, is_model
from rabbitry.amqp.confirms import Delivery

if TYPE_CHECKING:
    from rabbitry.amqp.codecs import Model

CHANNEL = 1
DEFAULT_FRAME_MAX = 131072
_CACHE_LIMIT = 4096
K = TypeVar("K")
V = TypeVar("V")
_PrefixKey: TypeAlias = tuple[
    str | None, str | None, int, int | None, str | None, str | None, str | None
]
"""The properties before the message id, in wire order: content type, content encoding,
delivery mode, priority, correlation id, reply-to, expiration."""

Body: TypeAlias = "bytes | bytearray | memoryview | str | dict[str, Any] | list[Any] | Model"
"""What a publisher accepts: bytes as they are, text as UTF-8, dicts and lists as JSON (or by
the publisher's codec), and typed values (a pydantic model, a dataclass) by the codec."""


@dataclass(slots=True)
class Message:
    """One message for ``publish_many``/``send_many``; unset fields take the call's defaults."""

    body: Body
    routing_key: str | None = None
    exchange: str | None = None
    headers: Mapping[str, Any] | None = None
    message_id: str | None = None
    mandatory: bool | None = None
    delay: float | timedelta | None = None
    shard_key: str | None = None
    content_type: str | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | int | None = None
    priority: int | None = None
    persistent: bool | None = None
    message_type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def encode_body(
    body: Body, content_type: str | None, codec: Codec | None = None
) -> tuple[bytes, str | None]:
    """Bytes on the wire and the content type that describes them.

    Without a ``codec`` dicts and lists are JSON; a model always goes through a codec (JSON
    when none is given), and the codec's content type describes it unless one is given."""
    if isinstance(body, bytes):
        return body, content_type
    if isinstance(body, bytearray | memoryview):
        return bytes(body), content_type
    if isinstance(body, str):
        return body.encode("utf-8"), content_type or "text/plain; charset=utf-8"
    if isinstance(body, dict | list):
        if codec is not None:
            return codec.encode(body), content_type or codec.content_type
        data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return data, content_type or "application/json"
    if is_model(body):
        codec = codec or JSON
        return encode_model(body, codec), content_type or codec.content_type
    raise TypeError(
        "message body must be bytes, str, dict, list, a pydantic model or a dataclass,"
        f" not {type(body).__name__}"
    )


class MessageIds:
    """Fresh message ids: a random 80-bit prefix per instance, then a 48-bit counter."""

    __slots__ = ("_counter", "_prefix")

    def __init__(self) -> None:
        self._prefix = os.urandom(10).hex()
        self._counter = int.from_bytes(os.urandom(2), "big") << 24

    def next(self) -> str:
        self._counter += 1
        return f"{self._prefix}{self._counter & 0xFFFFFFFFFFFF:012x}"


@dataclass(kw_only=True, eq=False)
class MessageBuilder:
    """Turns publish arguments into a ``Delivery`` with its frames ready to write."""

    app_id: str | None = None
    content_type: str | None = None
    codec: Codec | None = None
    """How dicts, lists and models become bytes (None: JSON, as ``encode_body`` says)."""
    persistent: bool = True
    timestamps: bool = True
    frame_max: int = DEFAULT_FRAME_MAX
    ids: MessageIds = field(default_factory=MessageIds, init=False)
    _methods: dict[tuple[str, str, bool], bytes] = field(default_factory=dict, init=False)
    _prefixes: dict[_PrefixKey, tuple[int, bytes, bytes, bytes]] = field(
        default_factory=dict, init=False
    )
    """Per property set: flags, the bytes without headers, and the bytes before and after them."""
    _suffixes: dict[tuple[str | None, str | None], tuple[int, bytes]] = field(
        default_factory=dict, init=False
    )

    def build(
        self,
        body: Body,
        *,
        exchange: str,
        routing_key: str,
        mandatory: bool = False,
        headers: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        content_type: str | None = None,
        content_encoding: str | None = None,
        correlation_id: str | None = None,
        reply_to: str | None = None,
        expiration: str | int | None = None,
        priority: int | None = None,
        persistent: bool | None = None,
        message_type: str | None = None,
        user_id: str | None = None,
        timestamp: int | None = None,
        deadline: float | None = None,
    ) -> Delivery:
        data, ctype = encode_body(body, content_type or self.content_type, self.codec)
        mkey = (exchange, routing_key, mandatory)
        method = self._methods.get(mkey) or self._new_method(mkey)
        keep = self.persistent if persistent is None else persistent
        if expiration is not None and not isinstance(expiration, str):
            expiration = str(int(expiration))
        pkey = (
            ctype,
            content_encoding,
            2 if keep else 1,  # delivery mode: persistent or not
            priority,
            correlation_id,
            reply_to,
            expiration,
        )
        flags, prefix, before, after = self._prefixes.get(pkey) or self._new_prefix(pkey)
        if headers is not None:  # the one property that changes per message goes between
            flags |= frames.FLAG_HEADERS
            prefix = before + frames.headers_table(headers) + after
        skey = (message_type, user_id)
        sflags, suffix = self._suffixes.get(skey) or self._new_suffix(skey)
        if message_id is None:
            message_id = self.ids.next()
            mid = bytes((32,)) + message_id.encode("ascii")
        else:
            mid = frames.shortstr(message_id, "message id")
        if timestamp is None and self.timestamps:
            timestamp = int(time.time())
        encoded = method + frames.content_frames(
            CHANNEL, flags | sflags, prefix, mid, timestamp, suffix, data, self.frame_max
        )
        return Delivery(encoded, message_id, exchange, routing_key, mandatory, deadline)

    def _new_method(self, key: tuple[str, str, bool]) -> bytes:
        method = frames.publish_method_frame(CHANNEL, *key)
        _remember(self._methods, key, method)
        return method

    def _new_prefix(self, key: _PrefixKey) -> tuple[int, bytes, bytes, bytes]:
        ctype, content_encoding, delivery_mode, priority, correlation_id, reply_to, expiration = key
        flags, before, after = frames.properties_around_headers(
            content_type=ctype,
            content_encoding=content_encoding,
            delivery_mode=delivery_mode,
            priority=priority,
            correlation_id=correlation_id,
            reply_to=reply_to,
            expiration=expiration,
        )
        known = (flags, before + after, before, after)
        _remember(self._prefixes, key, known)
        return known

    def _new_suffix(self, key: tuple[str | None, str | None]) -> tuple[int, bytes]:
        message_type, user_id = key
        suffix = frames.properties_suffix(
            message_type=message_type, user_id=user_id, app_id=self.app_id
        )
        _remember(self._suffixes, key, suffix)
        return suffix


def _remember(cache: dict[K, V], key: K, value: V) -> None:
    """Keep ``value``; a cache that grew to the limit starts again (keys of unbounded variety,
    such as per-message routing keys, must not grow it without end)."""
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value
