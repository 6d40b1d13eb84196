"""Immediate retries: a failed handler called again in process, a short pause apart, before the
failure goes to the retry ladder (``retry.immediate`` in the spec, ``immediate=`` on a handler).

``next_pause`` is the rule (pure, no clock): after a failed call, whether another call is due
and after how long. The shells keep the loop around it: ``Worker`` pauses in its thread
(``call_again``), ``AsyncWorker`` awaits in the handler's task. A transient error mended by a
second call costs no broker round trip and never reaches a retry tier queue.

What counts: ``ImmediateRetry.attempts`` is the calls of one delivery, the first included. They
do not count toward the ladder's ``attempts``, which count deliveries (``x-rabbitry-attempt``):
a message of ``attempts: 3`` with ``immediate: {attempts: 2}`` is handled up to 6 times. Only a
failure the queue's retry rules retry is called again (``never_retry``, ``retry_on``,
``NonRetryable``): one that parks at once parks after its first call. The middlewares' hooks run
once per delivery, around all of its calls, and the handler's time-to-run applies to each call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rabbitry.consumer.app import Route
from rabbitry.policies.retry import ImmediateRetry

__all__ = ["ImmediateRetry", "call_again", "next_pause"]


def next_pause(route: Route, error: BaseException, calls: int) -> float | None:
    """Seconds to pause before calling ``route``'s handler again after its ``calls``-th call
    failed with ``error``; None when the failure goes on to the verdict."""
    plan = route.immediate
    if plan is None or calls >= plan.attempts:
        return None
    if route.retry is not None and not route.retry.policy.is_retryable(error):
        return None
    return plan.pause_ms / 1000


def call_again(
    error: BaseException,
    started: float,
    call: Callable[[], BaseException | None],
    pause: Callable[[BaseException, int], float | None],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[BaseException | None, float]:
    """The blocking loop after a first call that started at ``started`` and failed with
    ``error``: call again while ``pause`` (the worker's ``next_pause``, which also logs) says
    so; how the last call ended and when it started (``perf_counter``), which the verdict and
    the time-to-run are judged on."""
    calls = 1
    failed: BaseException | None = error
    while failed is not None:
        wait = pause(failed, calls)
        if wait is None:
            break
        sleep(wait)
        calls += 1
        started = time.perf_counter()
        failed = call()
    return failed, started
