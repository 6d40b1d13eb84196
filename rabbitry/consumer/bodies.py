"""Typed handlers: a handler that declares a body type gets the body decoded and validated.

``def charge(order: Order)`` (a pydantic model, a dataclass, or any type pydantic validates,
such as ``list[Order]``), optionally with a second parameter annotated ``IncomingMessage``
for the headers and properties. The body is decoded by the route's codec (JSON unless the app
or the handler names another) and validated into the type before the handler runs. A body
that does not decode or validate raises ``InvalidBody``: a ``NonRetryable`` failure, so the
decision core parks the message at once with the validation error in its
``x-rabbitry-last-error`` header instead of retrying something no retry can mend.

The signature is read once, at registration; a handler whose parameters cannot be told apart
is refused then (``AppError``), not at the first message.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rabbitry.amqp.codecs import Codec, adapter, decode_model
from rabbitry.consumer.message import IncomingMessage
from rabbitry.errors import InvalidBody as InvalidBody
from rabbitry.errors import SignatureError as SignatureError

Handler = Callable[[IncomingMessage], Awaitable[Any] | Any]
"""Called with the message; what it returns is the reply when the message names a reply-to."""
_MAX_PROBLEMS = 10


@dataclass(frozen=True)
class HandlerShape:
    """What a handler takes: the body's type (None: only the message) and where each goes."""

    body_type: Any = None
    message_at: int | None = 0
    """Position of the ``IncomingMessage`` parameter (None: the handler does not take it)."""


def handler_shape(func: Callable[..., Any]) -> HandlerShape:
    """Read ``func``'s parameters: one or two, at most one body type and one message."""
    name = getattr(func, "__qualname__", repr(func))
    every = inspect.signature(func).parameters.values()
    params = [
        p
        for p in every
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if not params and any(p.kind is p.VAR_POSITIONAL for p in every):
        return HandlerShape()  # def handle(*args): the message, as before typed handlers
    if not 1 <= len(params) <= 2:
        raise SignatureError(
            f"handler {name} must take one or two parameters (the message, or a typed body"
            f" and optionally the message), it takes {len(params)}"
        )
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # a name only imported for type checking: read the text instead
        hints = {}
    body_type: Any = None
    message_at: int | None = None
    for index, param in enumerate(params):
        annotation = hints.get(param.name, param.annotation)
        if _is_message(annotation) or (len(params) == 1 and _unannotated(annotation)):
            if message_at is not None:
                raise SignatureError(f"handler {name} takes the message twice")
            message_at = index
        elif isinstance(annotation, str) or _unannotated(annotation):
            raise SignatureError(
                f"handler {name}: cannot tell what parameter {param.name!r} is"
                f" (annotation {annotation!r}); annotate it with the body's type (a pydantic"
                " model or a dataclass) or IncomingMessage, importable at run time"
            )
        elif body_type is not None:
            raise SignatureError(f"handler {name} declares two body types; declare one")
        else:
            body_type = annotation
    if body_type is not None:
        try:
            adapter(body_type)
        except Exception as exc:
            raise SignatureError(
                f"handler {name}: pydantic cannot validate {_type_name(body_type)} ({exc})"
            ) from None
    return HandlerShape(body_type, message_at)


def _is_message(annotation: Any) -> bool:
    if annotation is IncomingMessage:
        return True
    return isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "IncomingMessage"


def _unannotated(annotation: Any) -> bool:
    return annotation is inspect.Parameter.empty or annotation is Any or annotation is object


def _type_name(kind: Any) -> str:
    return getattr(kind, "__name__", None) or repr(kind)


def describe_invalid(error: Exception, limit: int = _MAX_PROBLEMS) -> str:
    """One line per problem (``field.path: what``) from pydantic's error, else the error."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return f"{type(error).__name__}: {error}"
    found = errors(include_url=False)
    parts = [
        f"{'.'.join(str(part) for part in item['loc']) or '(body)'}: {item['msg']}"
        for item in found[:limit]
    ]
    if len(found) > limit:
        parts.append(f"and {len(found) - limit} more")
    return "; ".join(parts)


def typed_handler(
    func: Callable[..., Any], shape: HandlerShape, queue: str, codec: Codec
) -> Handler:
    """``func`` as a handler of one ``IncomingMessage``: decode, validate, then call it."""
    kind = shape.body_type
    if kind is None:
        return func
    what = _type_name(kind)
    message_at = shape.message_at

    def arguments(message: IncomingMessage) -> tuple[Any, ...]:
        try:
            body = decode_model(message.body, kind, codec)
        except (ValueError, TypeError) as exc:
            raise InvalidBody(
                f"the body of message {message.message_id} on {queue} is not a valid {what}"
                f" ({codec.content_type}): {describe_invalid(exc)}"
            ) from None
        if message_at is None:
            return (body,)
        return (message, body) if message_at == 0 else (body, message)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def call_async(message: IncomingMessage) -> Any:
            return await func(*arguments(message))

        return call_async

    @functools.wraps(func)
    def call(message: IncomingMessage) -> Any:
        return func(*arguments(message))

    return call
