"""Handlers for examples/delays.yaml, bound to its queues; run them with

    rabbitry worker run examples/order_worker.py:app

`orders.work` charges a payment; while PAYMENTS=down (the default here) the payment service
fails, so each order walks the spec's retry ladder (1 s, then 5 s) into `orders.work.parking`.
An order body that is not an `Order` is parked at once, with the reason in its headers.
Replay the parked orders once it is up again:

    rabbitry dlq replay orders.work.parking --vhost delays --all
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from rabbitry.consumer import App, IncomingMessage
from rabbitry.topology import load_spec

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "delays.yaml")

app = App(load_spec(SPEC), cancellation=True)
started = time.monotonic()


def say(text: str) -> None:
    print(f"   {time.monotonic() - started:5.2f} s  {text}", flush=True)


class Order(BaseModel):
    """What `orders.work` carries (``{"order": 42}``)."""

    order: int


class PaymentUnavailable(RuntimeError):
    """The payment service did not answer (retryable)."""


@app.handler("orders.work", timeout=10, idempotent=True)
async def charge(order: Order, message: IncomingMessage) -> None:
    if os.environ.get("PAYMENTS", "down") != "up":
        say(f"order {order.order}: attempt {message.attempt} fails (payment service down)")
        raise PaymentUnavailable("payment service unavailable")
    say(f"order {order.order}: charged on attempt {message.attempt}")


@app.handler("reminders")
def remind(message: IncomingMessage) -> None:
    say(f"reminder arrived: {message.text()}")
