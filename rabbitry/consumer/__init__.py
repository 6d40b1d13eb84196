"""Workers that consume with manual acks and walk the spec's retry ladder, and DLQ tools.

``App`` binds handlers to the queues of a spec; ``AsyncWorker`` (asyncio) and ``Worker``
(blocking) run them over one pure core: ``decision`` says what happens to each delivery
(ack, retry at a tier, park, reject, drop a duplicate or a cancelled job), ``engine`` turns
that into confirmed publishes and batched acks. ``dlq`` lists, shows, replays and purges
parking lots.
"""

from __future__ import annotations

from rabbitry.consumer.aio import AsyncWorker
from rabbitry.consumer.app import App, AppError, Route
from rabbitry.consumer.decision import (
    CANCEL_HEADER,
    Action,
    HandlerTimeout,
    Verdict,
    decide,
)
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics
from rabbitry.consumer.stores import (
    CancelStore,
    IdempotencyStore,
    MemoryCancelStore,
    MemoryIdempotencyStore,
)
from rabbitry.consumer.sync import Worker, cancel_job

__all__ = [
    "CANCEL_HEADER",
    "Action",
    "App",
    "AppError",
    "AsyncWorker",
    "CancelStore",
    "HandlerTimeout",
    "IdempotencyStore",
    "IncomingMessage",
    "MemoryCancelStore",
    "MemoryIdempotencyStore",
    "Route",
    "Verdict",
    "Worker",
    "WorkerMetrics",
    "cancel_job",
    "decide",
]
