"""Workers that consume with manual acks and walk the spec's retry ladder, and DLQ tools.

``App`` binds handlers to the queues of a spec (a handler takes the ``IncomingMessage``, or a
typed body decoded by a ``Codec`` and validated: ``bodies``), with ``Middleware`` hooks around
them, and periodic jobs to the spec's periodic queue (``@app.periodic``: ``schedule`` says when,
``periodic`` how each occurrence schedules the next). ``AsyncWorker`` (asyncio) and ``Worker``
(blocking) run them over one pure core: ``decision`` says what happens to each delivery (ack,
retry at a tier, park, reject, drop a duplicate or a cancelled job), ``engine`` turns that into
confirmed publishes and batched acks. A handler's ``KillSwitch`` stops consuming its queue while
it keeps failing and resumes after a cool-down (``kill_switch``, ``switchboard``). ``dlq``
lists, shows, replays and purges parking lots.

The names are loaded on first use, so a process running the asyncio worker does not also load
the blocking one (and the reverse): each costs memory in every worker process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rabbitry import lazy

if TYPE_CHECKING:
    from rabbitry.amqp.codecs import JSON, Codec, JsonCodec
    from rabbitry.consumer.aio import AsyncWorker
    from rabbitry.consumer.app import App, Route
    from rabbitry.consumer.decision import CANCEL_HEADER, Action, Verdict, decide
    from rabbitry.consumer.kill_switch import KillSwitch, SwitchState
    from rabbitry.consumer.message import IncomingMessage
    from rabbitry.consumer.metrics import WorkerMetrics
    from rabbitry.consumer.middleware import Middleware
    from rabbitry.consumer.periodic import Occurrence, PeriodicJob
    from rabbitry.consumer.stores import (
        CancelStore,
        IdempotencyStore,
        MemoryCancelStore,
        MemoryIdempotencyStore,
    )
    from rabbitry.consumer.sync import Worker, cancel_job
    from rabbitry.errors import (
        AppError,
        HandlerTimeout,
        InvalidBody,
        InvalidReply,
        NonRetryable,
        TopologyLost,
        TopologyMissing,
    )
    from rabbitry.policies.retry import ImmediateRetry

__all__ = [
    "CANCEL_HEADER",
    "JSON",
    "Action",
    "App",
    "AppError",
    "AsyncWorker",
    "CancelStore",
    "Codec",
    "HandlerTimeout",
    "IdempotencyStore",
    "ImmediateRetry",
    "IncomingMessage",
    "InvalidBody",
    "InvalidReply",
    "JsonCodec",
    "KillSwitch",
    "MemoryCancelStore",
    "MemoryIdempotencyStore",
    "Middleware",
    "NonRetryable",
    "Occurrence",
    "PeriodicJob",
    "Route",
    "SwitchState",
    "TopologyLost",
    "TopologyMissing",
    "Verdict",
    "Worker",
    "WorkerMetrics",
    "cancel_job",
    "decide",
]

_LAZY = {
    "JSON": "rabbitry.amqp.codecs",
    "Codec": "rabbitry.amqp.codecs",
    "JsonCodec": "rabbitry.amqp.codecs",
    "AsyncWorker": "rabbitry.consumer.aio",
    "App": "rabbitry.consumer.app",
    "AppError": "rabbitry.errors",
    "Route": "rabbitry.consumer.app",
    "InvalidBody": "rabbitry.errors",
    "InvalidReply": "rabbitry.errors",
    "CANCEL_HEADER": "rabbitry.consumer.decision",
    "Action": "rabbitry.consumer.decision",
    "HandlerTimeout": "rabbitry.errors",
    "Verdict": "rabbitry.consumer.decision",
    "decide": "rabbitry.consumer.decision",
    "KillSwitch": "rabbitry.consumer.kill_switch",
    "SwitchState": "rabbitry.consumer.kill_switch",
    "IncomingMessage": "rabbitry.consumer.message",
    "WorkerMetrics": "rabbitry.consumer.metrics",
    "Middleware": "rabbitry.consumer.middleware",
    "Occurrence": "rabbitry.consumer.periodic",
    "PeriodicJob": "rabbitry.consumer.periodic",
    "TopologyLost": "rabbitry.errors",
    "TopologyMissing": "rabbitry.errors",
    "CancelStore": "rabbitry.consumer.stores",
    "IdempotencyStore": "rabbitry.consumer.stores",
    "MemoryCancelStore": "rabbitry.consumer.stores",
    "MemoryIdempotencyStore": "rabbitry.consumer.stores",
    "Worker": "rabbitry.consumer.sync",
    "cancel_job": "rabbitry.consumer.sync",
    "ImmediateRetry": "rabbitry.policies.retry",
    "NonRetryable": "rabbitry.errors",
}


__getattr__, __dir__ = lazy.names(__name__, _LAZY, __all__)
