"""A delivered message as handlers see it; properties are decoded only when asked for.

The worker's connection hands over the raw property bytes of each content header; most
handlers read the body and perhaps one header, so decoding every property table up front
would be wasted work on the hot path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rabbitry.amqp.properties import PROPERTY_BITS, decode_properties
from rabbitry.policies.retry import failed_attempts

_HEADERS = PROPERTY_BITS["headers"]
_MESSAGE_ID = PROPERTY_BITS["message_id"]
_REPLY_TO = PROPERTY_BITS["reply_to"]

__all__ = ["IncomingMessage", "decode_properties"]  # decode_properties: imported from here too


@dataclass(slots=True, eq=False, repr=False)
class IncomingMessage:
    """One delivery: ``body``, ``headers``, ``message_id`` and the other properties,
    ``routing_key``, ``exchange``, ``redelivered``, the ``queue`` it came from, and
    ``attempt`` (1 for a first delivery, n after n - 1 failures)."""

    tag: int
    consumer: int
    redelivered: bool
    exchange: str
    routing_key: str
    _flags: int
    _raw: bytes
    body: bytes
    queue: str = ""
    _props: dict[str, Any] | None = None
    generation: int = 0
    span: Any = None
    """The delivery's CONSUMER span while tracing is on (``rabbitry.amqp.tracing``)."""

    @property
    def properties(self) -> dict[str, Any]:
        props = self._props
        if props is None:
            props = self._props = decode_properties(self._flags, self._raw) if self._flags else {}
        return props

    @property
    def headers(self) -> dict[str, Any]:
        value = self.properties.get("headers")
        return value if isinstance(value, dict) else {}

    @property
    def message_id(self) -> str | None:
        return self._text("message_id", _MESSAGE_ID)

    @property
    def content_type(self) -> str | None:
        return self._text("content_type")

    @property
    def correlation_id(self) -> str | None:
        return self._text("correlation_id")

    @property
    def reply_to(self) -> str | None:
        """Where the sender waits for a reply: the worker sends the handler's return value
        there (``Publisher.request`` names its direct reply-to)."""
        return self._text("reply_to", _REPLY_TO)

    def _text(self, name: str, flag: int = 0) -> str | None:
        """The string property ``name``, None when absent; with its ``flag`` bit, an absent one
        is known without decoding the properties."""
        if flag and not self._flags & flag:
            return None
        value = self.properties.get(name)
        return value if isinstance(value, str) else None

    @property
    def timestamp(self) -> int | None:
        value = self.properties.get("timestamp")
        return value if isinstance(value, int) else None

    @property
    def attempt(self) -> int:
        """This delivery's attempt number: 1 + the failures recorded in its headers."""
        if not self._flags & _HEADERS:
            return 1
        return 1 + failed_attempts(self.headers)

    @classmethod
    def build(
        cls,
        body: bytes,
        *,
        queue: str,
        consumer: int = 0,
        tag: int = 1,
        routing_key: str | None = None,
        exchange: str = "",
        redelivered: bool = False,
        **properties: Any,
    ) -> IncomingMessage:
        """A delivery made in memory (tests, ``rabbitry.testing.handlers``): ``properties``
        by their AMQP names (``headers``, ``message_id``, ``content_type``, ``type``, ...)."""
        known = PROPERTY_BITS
        unknown = sorted(set(properties) - set(known))
        if unknown:
            raise TypeError(f"unknown message properties {unknown}; known: {sorted(known)}")
        props = {name: value for name, value in properties.items() if value is not None}
        flags = 0
        for name in props:
            flags |= known[name]
        return cls(
            tag=tag,
            consumer=consumer,
            redelivered=redelivered,
            exchange=exchange,
            routing_key=queue if routing_key is None else routing_key,
            _flags=flags,
            _raw=b"",
            body=body,
            queue=queue,
            _props=props,
        )

    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<IncomingMessage {self.queue} tag={self.tag} id={self.message_id}>"
