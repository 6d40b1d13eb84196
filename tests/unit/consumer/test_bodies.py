"""Typed handlers: which parameter gets the body, which the message, and what is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from rabbitry.consumer import App, AppError, IncomingMessage, InvalidBody, NonRetryable
from rabbitry.consumer.bodies import HandlerShape, handler_shape


class Order(BaseModel):
    id: int


@dataclass
class Mail:
    to: str


def test_a_handler_of_the_message_is_left_as_it_is() -> None:
    def plain(message: IncomingMessage) -> None: ...

    def bare(message):  # type: ignore[no-untyped-def]
        ...

    # as written when IncomingMessage is imported only for type checking: known by its name
    def hidden(message: rabbitry.consumer.IncomingMessage) -> None:  # type: ignore[name-defined]  # noqa: F821
        ...

    def star(*args: object) -> None: ...

    for func in (plain, bare, hidden, star, lambda m: None):
        assert handler_shape(func) == HandlerShape(None, 0)
    app = App()
    app.add("q", plain)
    assert app.routes["q"].handler is plain, "no wrapper on the hot path"


def test_a_model_a_dataclass_or_a_generic_type_is_the_body() -> None:
    def order(order: Order) -> None: ...

    def mail_then_message(mail: Mail, message: IncomingMessage) -> None: ...

    def message_then_list(message: IncomingMessage, orders: list[Order]) -> None: ...

    assert handler_shape(order) == HandlerShape(Order, None)
    assert handler_shape(mail_then_message) == HandlerShape(Mail, 1)
    assert handler_shape(message_then_list) == HandlerShape(list[Order], 0)


def test_handlers_that_do_not_say_what_they_take_are_refused_at_registration() -> None:
    app = App()

    def two_bodies(a: Order, b: Mail) -> None: ...

    def two_messages(a: IncomingMessage, b: IncomingMessage) -> None: ...

    def unknown(a: IncomingMessage, b: Any) -> None: ...

    def none() -> None: ...

    def three(a: Order, b: IncomingMessage, c: int) -> None: ...

    cases = {
        two_bodies: "two body types",
        two_messages: "message twice",
        unknown: "cannot tell what parameter 'b' is",
        none: "one or two parameters",
        three: "it takes 3",
    }
    for func, problem in cases.items():
        with pytest.raises(AppError, match=problem) as caught:
            app.add("q", func)
        assert "'q'" in str(caught.value), "the error names the queue"


class Opaque:
    """A plain class: pydantic has no schema for it."""


def test_a_type_pydantic_cannot_validate_is_refused_at_registration() -> None:
    def handle(body: Opaque) -> None: ...

    with pytest.raises(AppError, match="pydantic cannot validate Opaque"):
        App().add("q", handle)


def test_an_invalid_body_is_never_retried_by_any_policy() -> None:
    from rabbitry.policies.retry import RetryPolicy

    assert issubclass(InvalidBody, NonRetryable)
    policy = RetryPolicy(attempts=5)
    decision = policy.decide(0, InvalidBody("id: field required"))
    assert decision.outcome.value == "park" and decision.reason == "InvalidBody is never retried"
    assert policy.decide(0, RuntimeError("x")).outcome.value == "retry"


def test_a_typed_handler_keeps_its_name_in_errors_and_logs() -> None:
    app = App()

    def charge(order: Order) -> None: ...

    app.add("q", charge)
    assert app.routes["q"].handler.__qualname__ == charge.__qualname__
    with pytest.raises(AppError, match=r"already has a handler.*charge"):
        app.add("q", charge)
