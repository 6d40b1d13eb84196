"""A queue's retry ladder as the spec writes it: attempts, back-off, which failures retry.

What these values become (tier queues, a parking lot, the headers attempts are counted in) is
``topology.patterns.retries``; the rule a worker follows is ``policies.retry``.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from rabbitry.topology.spec.base import Name, SpecModel
from rabbitry.topology.spec.quantities import Milliseconds


class ExponentialBackoffSpec(SpecModel):
    """Exponential back-off: initial * multiplier^(n-1), capped at max, +- jitter."""

    initial: Milliseconds = 1000
    """Delay before the first retry (e.g. 1s)."""
    multiplier: float = Field(2.0, ge=1)
    """Growth per retry."""
    max: Milliseconds = 3_600_000
    """Longest delay (e.g. 10m)."""
    jitter: float = Field(0.0, ge=0, lt=1)
    """Random spread as a fraction (0.1 = +-10%); needs `via: <delay name>` (exact per message)."""


def _exception_name(value: str) -> str:
    if not _EXCEPTION_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an exception class name: give a class name (ValueError) or its"
            " dotted path (myapp.errors.Invalid)"
        )
    return value


_EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
ExceptionName = Annotated[str, Field(max_length=255), AfterValidator(_exception_name)]


class ImmediateRetrySpec(SpecModel):
    """Calls of the handler in process before a failure goes to the retry ladder."""

    attempts: int = Field(3, ge=1, le=100)
    """Calls of the handler for one delivery, the first included (3: two more after a failure)."""
    pause: Milliseconds = Field(50, le=60_000)
    """Pause between two calls (e.g. 50ms); the worker's handler slot stays taken meanwhile."""


class FaultsSpec(SpecModel):
    """Where a worker announces the messages it parks."""

    exchange: Name
    """Topic exchange the fault events go to, with the work queue's name as routing key;
    declared by rabbitry unless the spec declares it (then any type but headers works)."""


class RetrySpec(SpecModel):
    """Retry failed messages with back-off, then park them. Attempts are counted in
    rabbitry's own headers (x-rabbitry-attempt), never in x-death."""

    attempts: int = Field(5, ge=1, le=1000)
    """Deliveries to the handler in all, the first included; then the message is parked."""
    backoff: list[Milliseconds] | ExponentialBackoffSpec = Field(
        default_factory=ExponentialBackoffSpec
    )
    """Fixed tiers ([1s, 10s, 1m]; the last repeats) or exponential ({initial, multiplier, ...})."""
    via: str = "queues"
    """`queues`: one TTL queue per distinct tier for this queue (no jitter); the name of a
    binary `delays` entry of this vhost: exact delays, jitter allowed; or `broker`: the quorum
    queue's own delayed retry (RabbitMQ 4.3+), no tier queues: the delay before retry n is
    x-delayed-retry-min x n, up to x-delayed-retry-max, so back-off tiers must be such a
    ramp ([1s, 2s, 3s]), an exponential back-off grows linearly, and jitter is refused."""
    never_retry: list[ExceptionName] = Field(default_factory=list)
    """Exception class names that park at once (ValueError, myapp.errors.Invalid), matched on
    the failure and along its cause chain (`raise ... from`, or raised while handling); it wins
    over `retry_on`."""
    retry_on: list[ExceptionName] = Field(default_factory=list)
    """When given, only failures that are, or were caused by, one of these exception classes
    retry; any other parks at once (an allow-list: ConnectionError, myapp.errors.Transient)."""
    immediate: ImmediateRetrySpec | None = None
    """Calls of the handler in process, a short pause apart, before a retryable failure goes
    to the ladder: `{attempts: 3, pause: 50ms}`. They do not count toward `attempts`, which
    counts deliveries."""
    faults: FaultsSpec | None = None
    """Publish a fault event for every message parked: `{exchange: orders.faults}`."""

    @model_validator(mode="after")
    def _one_list_per_name(self) -> RetrySpec:
        both = sorted(set(self.retry_on) & set(self.never_retry))
        if both:
            raise ValueError(
                f"{', '.join(both)} is in both `retry_on` and `never_retry`: keep it in one"
                " (never_retry wins, so in retry_on it would never retry)"
            )
        return self


__all__ = [
    "ExceptionName",
    "ExponentialBackoffSpec",
    "FaultsSpec",
    "ImmediateRetrySpec",
    "RetrySpec",
]
