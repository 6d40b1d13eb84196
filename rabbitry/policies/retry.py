"""Retry rules as data, shared by the topology expansion and the workers.

- ``Backoff``: the delay before retry n (fixed tiers, or exponential with a cap and jitter).
- ``RetryPolicy``: how many attempts in all, which failures retry (``retry_on``, an allow-list)
  and which never do (``never_retry``, a deny-list), both matched along the exception's cause
  chain, and the ``decide`` function that turns (attempts so far, failure) into retry-at-tier /
  park.
- ``ImmediateRetry``: calls of the handler in process, with a short pause, before a failure
  goes to the ladder (the ladder's attempts count deliveries, not these calls).
- Attempt facts travel in rabbitry's own headers (``x-rabbitry-*``). ``x-death`` is not a usable
  counter: RabbitMQ 3.13 stopped reading client-set ``x-death`` and 4.0 ignores it. When a message
  is republished for a retry, ``x-death`` and its companions are stripped, so the broker's
  dead-letter cycle detection never drops a retried message.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rabbitry.errors import NonRetryable as NonRetryable
from rabbitry.errors import RetryConfigError as RetryConfigError

ATTEMPT_HEADER = "x-rabbitry-attempt"
"""Failed attempts so far (1 after the first failure)."""
FIRST_FAILURE_HEADER = "x-rabbitry-first-failure-ms"
LAST_FAILURE_HEADER = "x-rabbitry-last-failure-ms"
LAST_ERROR_HEADER = "x-rabbitry-last-error"
QUEUE_HEADER = "x-rabbitry-queue"
"""The work queue the message failed in: where a replay sends it back."""
PARKED_REASON_HEADER = "x-rabbitry-parked-reason"
STACK_TRACE_HEADER = "x-rabbitry-stack-trace"
"""On a parked copy: the failure's stack trace, cut to fit the header frame."""
RABBITRY_HEADER_PREFIX = "x-rabbitry-"
BROKER_HEADERS = (
    "x-delivery-count",  # set by quorum queues on delivery; meaningless on a new publish
    "x-death",
    "x-first-death-exchange",
    "x-first-death-queue",
    "x-first-death-reason",
    "x-last-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
)
MAX_ERROR_TEXT = 1024
"""Error text kept in a header: stack traces can exceed frame_max and break the publish."""


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (1-based): ``tiers[n-1]`` (last tier repeats) or exponential."""

    tiers_ms: tuple[int, ...] = ()
    initial_ms: int = 1000
    multiplier: float = 2.0
    max_ms: int = 3_600_000
    jitter: float = 0.0
    """Fraction of the delay added or removed at random (0.1 = +-10%); needs delay levels."""

    def __post_init__(self) -> None:
        if any(t < 0 for t in self.tiers_ms):
            raise RetryConfigError("retry tiers must not be negative")
        if self.initial_ms <= 0 or self.multiplier < 1 or self.max_ms < self.initial_ms:
            raise RetryConfigError(
                "exponential back-off needs initial > 0, multiplier >= 1 and max >= initial"
            )
        if not 0 <= self.jitter < 1:
            raise RetryConfigError(f"jitter is a fraction between 0 and 1, got {self.jitter}")

    def base_delay_ms(self, retry: int) -> int:
        """The delay before retry ``retry`` (1-based), without jitter."""
        if retry < 1:
            raise ValueError("retries count from 1")
        if self.tiers_ms:
            return self.tiers_ms[min(retry, len(self.tiers_ms)) - 1]
        delay = self.initial_ms * self.multiplier ** (retry - 1)
        return int(min(delay, self.max_ms))

    def delay_ms(self, retry: int, rng: random.Random | None = None) -> int:
        base = self.base_delay_ms(retry)
        if not self.jitter:
            return base
        spread = base * self.jitter
        return max(0, round(base + (rng or random).uniform(-spread, spread)))

    def schedule_ms(self, retries: int) -> list[int]:
        """Base delays of retries 1..retries."""
        return [self.base_delay_ms(n) for n in range(1, retries + 1)]

    def longest_ms(self, retries: int) -> int:
        """The longest delay ``delay_ms`` can give retries 1..retries, jitter included."""
        base = max(self.schedule_ms(retries), default=0)
        return math.ceil(base * (1 + self.jitter))


class Outcome(enum.StrEnum):
    """What happens to a failed message."""

    RETRY = "retry"
    PARK = "park"


@dataclass(frozen=True)
class Decision:
    """The verdict for one failure: retry ``retry`` after ``delay_ms``, or park with a reason."""

    outcome: Outcome
    attempt: int
    """Failed attempts including this one."""
    retry: int = 0
    delay_ms: int = 0
    reason: str = ""


@dataclass(frozen=True)
class ImmediateRetry:
    """Calls of the handler in process for one delivery, the first included, ``pause_ms``
    apart, before a retryable failure goes to the ladder. They do not count toward the
    ladder's ``attempts``, which count deliveries: a message of ``attempts: 3`` with
    ``immediate: {attempts: 2}`` is handled up to 6 times."""

    attempts: int = 3
    pause_ms: int = 50

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise RetryConfigError(
                f"immediate retry attempts must be at least 1, got {self.attempts}"
            )
        if self.pause_ms < 0:
            raise RetryConfigError(
                f"immediate retry pause must not be negative, got {self.pause_ms}"
            )


def cause_chain(error: BaseException) -> list[BaseException]:
    """``error``, then what caused it, as a traceback shows them: ``__cause__`` (``raise ...
    from``), else ``__context__`` (raised while handling it) unless ``from None`` hid it."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:
            current = None
        else:
            current = current.__context__
    return chain


def class_names(error: BaseException) -> set[str]:
    """The names a rule may give ``error`` by: each class of its MRO, bare and dotted."""
    names: set[str] = set()
    for cls in type(error).__mro__:
        names.add(cls.__name__)
        names.add(f"{cls.__module__}.{cls.__qualname__}")
    return names


def first_match(error: BaseException | str, rules: Sequence[str]) -> str | None:
    """The name (``Type``, or ``Type (cause of Outer)``) of the first exception in ``error``'s
    cause chain that one of ``rules`` names; None when none does. A string error (a failure
    told by name) matches a rule of that name."""
    if not rules:
        return None
    wanted = set(rules)
    if isinstance(error, str):
        return error if error in wanted else None
    for depth, exc in enumerate(cause_chain(error)):
        if class_names(exc) & wanted:
            name = type(exc).__name__
            return name if depth == 0 else f"{name} (cause of {type(error).__name__})"
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` deliveries to the handler in all; then the message is parked."""

    attempts: int = 5
    backoff: Backoff = field(default_factory=Backoff)
    never_retry: tuple[str, ...] = ()
    """Exception class names (``ValueError`` or ``pkg.mod.Error``) that park at once, matched
    on the failure and along its cause chain; it wins over ``retry_on``."""
    retry_on: tuple[str, ...] = ()
    """When given, only failures that are (or were caused by) one of these classes retry;
    any other parks at once. Empty: every failure retries but ``never_retry``."""
    immediate: ImmediateRetry | None = None
    """Calls in process before a retryable failure goes to the ladder (None: one call)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise RetryConfigError(f"attempts must be at least 1, got {self.attempts}")
        both = sorted(set(self.never_retry) & set(self.retry_on))
        if both:
            raise RetryConfigError(
                f"{', '.join(both)} is in both retry_on and never_retry: keep it in one"
            )

    @property
    def retries(self) -> int:
        return self.attempts - 1

    def is_retryable(self, error: BaseException | str) -> bool:
        return self.refusal(error) is None

    def refusal(self, error: BaseException | str) -> str | None:
        """Why ``error`` is not retried (None: it is): ``NonRetryable`` or a ``never_retry``
        class in its cause chain, or none of ``retry_on`` in it."""
        if not isinstance(error, str) and any(
            isinstance(exc, NonRetryable) for exc in cause_chain(error)
        ):
            return f"{type(error).__name__} is never retried"
        denied = first_match(error, self.never_retry)
        if denied is not None:
            return f"{denied} is never retried"
        if self.retry_on and first_match(error, self.retry_on) is None:
            name = error if isinstance(error, str) else type(error).__name__
            return f"{name} is not in retry_on ({', '.join(self.retry_on)})"
        return None

    def decide(
        self, failed_before: int, error: BaseException | str, rng: random.Random | None = None
    ) -> Decision:
        """The verdict after a failure, given how many attempts had failed before this one."""
        attempt = failed_before + 1
        refusal = self.refusal(error)
        if refusal is not None:
            return Decision(Outcome.PARK, attempt, reason=refusal)
        if attempt >= self.attempts:
            return Decision(Outcome.PARK, attempt, reason=f"gave up after {attempt} attempts")
        return Decision(
            Outcome.RETRY, attempt, retry=attempt, delay_ms=self.backoff.delay_ms(attempt, rng)
        )


def failed_attempts(headers: Mapping[str, Any] | None, header: str = ATTEMPT_HEADER) -> int:
    """Failed attempts recorded on a message (0 for a fresh one; bad values count as 0):
    rabbitry's own count, or the one in ``header`` (the broker's ``x-delivery-count``)."""
    value = (headers or {}).get(header, 0)
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def error_text(error: BaseException | str, limit: int = MAX_ERROR_TEXT) -> str:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure_headers(
    headers: Mapping[str, Any] | None,
    decision: Decision,
    error: BaseException | str,
    queue: str,
    now_ms: int,
) -> dict[str, Any]:
    """Headers for the republished message: the old ones, rabbitry's updated, broker's stripped."""
    out = {k: v for k, v in (headers or {}).items() if k not in BROKER_HEADERS}
    out[ATTEMPT_HEADER] = decision.attempt
    out.setdefault(FIRST_FAILURE_HEADER, now_ms)
    out[LAST_FAILURE_HEADER] = now_ms
    out[LAST_ERROR_HEADER] = error_text(error)
    out.setdefault(QUEUE_HEADER, queue)
    if decision.outcome is Outcome.PARK:
        out[PARKED_REASON_HEADER] = decision.reason
    return out


def distinct_tiers(delays_ms: Sequence[int]) -> list[int]:
    """The distinct delays of a schedule, in order: one TTL queue is declared per value."""
    seen: list[int] = []
    for delay in delays_ms:
        if delay not in seen:
            seen.append(delay)
    return seen
