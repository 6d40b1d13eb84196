"""Per-handler limits: at most N messages in flight, at most R started per second.

``Gate`` holds one handler's waiting deliveries and says which may start now and when to look
again; a token bucket (``TokenBucket``) paces the starts. Pure: the caller passes the time
(``time.monotonic()``) and runs what ``Gate`` returns. Each handler has its own gate, so a
throttled handler never holds back the others on the same worker; its waiting deliveries sit
in its own consumer's prefetch window (the worker's ``basic.qos`` is per consumer).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """What a handler may take at once (``concurrency``) and per second (``rate``, with bursts
    of up to ``burst`` back to back; 1 by default, so starts are spaced 1/rate apart)."""

    concurrency: int | None = None
    rate: float | None = None
    burst: int = 1

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number per second, got {self.rate}")
        if self.burst < 1:
            raise ValueError(f"burst must be at least 1, got {self.burst}")

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate is not None


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def wait(self, now: float) -> float:
        """Seconds until a token is there (0: one is there now); takes nothing."""
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1


class Gate(Generic[T]):
    """One handler's admission: ``add`` a delivery, call ``done`` when one ends, and
    ``release`` says which may start now, in arrival order. When the rate holds some back,
    ``wake_at`` says when to call ``release`` again."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self.running = 0
        self.waiting: deque[T] = deque()
        self.bucket = (
            TokenBucket(limits.rate, limits.burst, now) if limits.rate is not None else None
        )
        self.wake_at: float | None = None

    def add(self, item: T) -> None:
        self.waiting.append(item)

    def done(self) -> None:
        """A delivery released before has ended (its handler returned or raised)."""
        self.running = max(0, self.running - 1)

    def release(self, now: float) -> list[T]:
        """What may start now (counted as running); sets ``wake_at`` if the rate holds some."""
        started: list[T] = []
        self.wake_at = None
        cap = self.limits.concurrency
        bucket = self.bucket
        while self.waiting and (cap is None or self.running < cap):
            if bucket is not None:
                wait = bucket.wait(now)
                if wait > 0:
                    self.wake_at = now + wait
                    break
                bucket.take()
            started.append(self.waiting.popleft())
            self.running += 1
        return started

    def take_waiting(self) -> list[T]:
        """The deliveries not yet started, removed (shutdown returns them; a lost channel
        drops them, the broker requeued them). Running ones still count until ``done``."""
        left = list(self.waiting)
        self.waiting.clear()
        self.wake_at = None
        return left
