"""rabbitry: declarative RabbitMQ delays, retries and topology from one YAML spec.

The names users need are here, loaded on first use so that ``import rabbitry`` (and the CLI's
start-up) costs only what is used::

    import rabbitry

    spec = rabbitry.load_spec("shop.yaml")
    print(rabbitry.plan(spec).summary())
    rabbitry.apply(spec)

    with rabbitry.Publisher.from_spec(spec) as pub:
        pub.publish(b"{}", routing_key="orders.work")

    app = rabbitry.App(spec)
    rabbitry.Worker(app).run()

The full list, grouped, is in docs/api.md. Errors form one tree under ``RabbitryError``, every
class defined in ``rabbitry.errors`` and each ``rabbitry.<Name>`` (a class hangs from its first
base; ``(also a Name)`` names another)::

    RabbitryError
    +-- SpecError          the spec cannot be loaded (problems with file:line and spec path)
    |   +-- TargetError         a handler names a queue or group the vhost does not declare
    +-- AsyncApiError      the app's handlers consume something the spec does not declare
    +-- Refusal            a refusal as data: `diagnostics`, one `Diagnostic` each
    |   +-- PlanError           the plan needs a replace or prune the options do not allow
    +-- ApplyError         applying stopped half-way (`done` says what was changed)
    +-- LockHeld           another run holds the stack's lock past `lock_timeout`
    +-- BrokerError        the broker or its API could not be reached or refused a request
    |   +-- NoAnswer            a request got no answer in time; the broker may still be at work
    |   +-- TLSHandshakeError   a certificate failed to verify: retrying cannot help
    |   +-- CapabilityError     (also a Refusal) a plugin, feature flag or version is missing
    |   |   +-- TopologyMissing     a worker refused to start: what its handlers need is missing
    |   |       +-- TopologyLost    a running worker stopped: an object it needs went away
    |   +-- ObjectNotFound      the management API answered 404: what a request names is not there
    |   +-- AnswerTooLarge      a management API answer over `RABBITRY_MANAGEMENT_MAX_BYTES`
    |   +-- FrameError          bytes from the broker that are no AMQP frame: the client stops
    |   +-- ChannelRefused      the broker refused a method of the tools' channel (404 to a check)
    |   +-- ConnectionLost      (also a PublishError) no connection within give_up_after
    |   +-- LockLost            an apply run lost its stack's lock: it stopped before its next write
    |   +-- RecordUnreadable    a stack's ownership record on the broker cannot be read
    |   +-- StreamError         a stream cannot be read over AMQP
    |   |   +-- StreamNotFound      no queue of that name in the vhost
    |   |   +-- StreamUnreachable   no connection to the broker, or it was lost
    |   +-- StreamProtocolError bytes that are no stream-protocol frame or stored message
    |   +-- StreamRefused       the broker answered a stream-protocol request with an error code
    |   +-- StreamUnavailable   no stream protocol where it was looked for (plugin, port)
    |   +-- OtherBroker         the stream port answers for another cluster than the URL's
    |   +-- BrokerUnavailable   no test broker can be had here: broker tests are skipped
    |   +-- ContainerExited     a test broker's container stopped before it answered
    +-- PublishError       a message was not confirmed
    |   +-- Nacked              the broker refused the message (basic.nack)
    |   +-- Unroutable          a mandatory message reached no queue (basic.return)
    |   +-- ConfirmTimeout      no confirm in time: the message may or may not be stored
    |   +-- PublisherClosed     the publisher was closed before the message was confirmed
    |   +-- ChannelClosed       the broker closed the channel because of the message
    |   |   +-- ExchangeNotFound    the exchange does not exist (404)
    |   |   +-- AccessRefused       the user may not publish to the exchange (403)
    |   +-- RequestTimeout      no reply within the request's timeout
    |   +-- ReplyLost           the connection was lost while a request waited: no reply can come
    |   +-- DelayLayoutMismatch the broker's delay levels have another layout than the spec's
    |   +-- UnknownExchange     the exchange is not in the publisher's topology (before publishing)
    |   +-- NoRoute             by the topology the routing key reaches no queue (`check_route`)
    +-- DelayError         a delay the declared delay levels cannot represent
    +-- RetryConfigError   a retry policy that cannot work as declared
    +-- NonRetryable       raised by a handler: the worker parks the message at once
    |   +-- InvalidBody         the body does not validate into the handler's declared type
    |   +-- InvalidReply        a handler's return value its codec cannot send as a reply
    +-- AppError           a handler registration that cannot work (unknown queue, two handlers)
    +-- SignatureError     a handler whose parameters do not say what to pass (App raises AppError)
    +-- PeriodicError      a periodic job that cannot be registered (name, schedule or signature)
    +-- ScheduleError      a schedule that cannot be read (a duration or cron expression)
    +-- HandlerTimeout     a handler ran past its queue's time-to-run (retried like any failure)
    +-- DlqError           a parking-lot operation that cannot be carried out
    |   +-- NotAParkingLot      a replay or purge of a queue not known to be a parking lot
    +-- UnsafeFileError    a private file or directory of rabbitry's belongs to another user, or
    |                      others may write it
    +-- MissingExtra       a feature needs a package of an extra that is not installed (the
    |                      message names the pip line: `pip install 'rabbitry[metrics]'`, ...)
    +-- SparkSinkError     the Spark sink cannot start, or a partition was not stored
    |   +-- SinkOptionError     an option of the `rabbitmq` sink is unknown, malformed or clashes
    +-- SparkSourceError   the Spark source cannot start, or a read failed
    |   +-- SourceOptionError   an option of the `rabbitmq` source is unknown, malformed or clashes
    +-- NotModelled        the scripted broker (`rabbitry.testing`) was asked for what it lacks

Every error's ``diagnostics`` is a tuple of ``Diagnostic`` (severity, summary, detail, the
``Address`` of the object, the spec's ``SourceRange`` when known): one made of the message,
one per problem of a ``SpecError``, and for a ``Refusal`` (``PlanError``, ``CapabilityError``
and its subclasses) one per refusal.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from rabbitry import lazy
from rabbitry.diagnostics import Address, Diagnostic, SourceRange
from rabbitry.errors import (
    AccessRefused,
    AnswerTooLarge,
    AppError,
    ApplyError,
    AsyncApiError,
    BrokerError,
    BrokerUnavailable,
    CapabilityError,
    ChannelClosed,
    ChannelRefused,
    ConfirmTimeout,
    ConnectionLost,
    ContainerExited,
    DelayError,
    DelayLayoutMismatch,
    DlqError,
    ExchangeNotFound,
    FrameError,
    HandlerTimeout,
    InvalidBody,
    InvalidReply,
    LockHeld,
    LockLost,
    MissingExtra,
    Nacked,
    NoAnswer,
    NonRetryable,
    NoRoute,
    NotAParkingLot,
    NotModelled,
    ObjectNotFound,
    OtherBroker,
    PeriodicError,
    PlanError,
    PublisherClosed,
    PublishError,
    RabbitryError,
    RecordUnreadable,
    Refusal,
    ReplyLost,
    RequestTimeout,
    RetryConfigError,
    ScheduleError,
    SignatureError,
    SinkOptionError,
    SourceOptionError,
    SparkSinkError,
    SparkSourceError,
    SpecError,
    SpecProblem,
    StreamError,
    StreamNotFound,
    StreamProtocolError,
    StreamRefused,
    StreamUnavailable,
    StreamUnreachable,
    TargetError,
    TLSHandshakeError,
    TopologyLost,
    TopologyMissing,
    UnknownExchange,
    Unroutable,
    UnsafeFileError,
)

if TYPE_CHECKING:
    from rabbitry.amqp.codecs import Codec
    from rabbitry.amqp.confirms import Delivery
    from rabbitry.amqp.message import Message
    from rabbitry.amqp.settings import Backoff, ConnectionSettings, NodeOrder
    from rabbitry.consumer import (
        App,
        AsyncWorker,
        IncomingMessage,
        Middleware,
        Occurrence,
        Worker,
        cancel_job,
    )
    from rabbitry.provisioner.apply_options import ApplyResult
    from rabbitry.provisioner.plans import Plan
    from rabbitry.provisioner.reporter import Reporter
    from rabbitry.provisioner.stack import apply, plan, stacks
    from rabbitry.publisher import AsyncPublisher, Publisher
    from rabbitry.topology import Spec, Topology, check_spec, expand, load_spec, load_topology

_LAZY = {
    # spec and topology
    "Spec": "rabbitry.topology",
    "Topology": "rabbitry.topology",
    "load_spec": "rabbitry.topology",
    "load_topology": "rabbitry.topology",
    "check_spec": "rabbitry.topology",
    "expand": "rabbitry.topology",
    # provisioning
    "plan": "rabbitry.provisioner.stack",
    "apply": "rabbitry.provisioner.stack",
    "stacks": "rabbitry.provisioner.stack",
    "Plan": "rabbitry.provisioner.plans",
    "ApplyResult": "rabbitry.provisioner.apply_options",
    "Reporter": "rabbitry.provisioner.reporter",
    # publishing
    "Publisher": "rabbitry.publisher",
    "AsyncPublisher": "rabbitry.publisher",
    "Message": "rabbitry.amqp.message",
    "Delivery": "rabbitry.amqp.confirms",
    "Backoff": "rabbitry.amqp.settings",
    "ConnectionSettings": "rabbitry.amqp.settings",
    "NodeOrder": "rabbitry.amqp.settings",
    # workers
    "App": "rabbitry.consumer",
    "Worker": "rabbitry.consumer",
    "AsyncWorker": "rabbitry.consumer",
    "IncomingMessage": "rabbitry.consumer",
    "Middleware": "rabbitry.consumer",
    "Occurrence": "rabbitry.consumer",
    "Codec": "rabbitry.amqp.codecs",
    "cancel_job": "rabbitry.consumer",
}

__all__ = [
    "AccessRefused",
    "Address",
    "AnswerTooLarge",
    "App",
    "AppError",
    "ApplyError",
    "ApplyResult",
    "AsyncApiError",
    "AsyncPublisher",
    "AsyncWorker",
    "Backoff",
    "BrokerError",
    "BrokerUnavailable",
    "CapabilityError",
    "ChannelClosed",
    "ChannelRefused",
    "Codec",
    "ConfirmTimeout",
    "ConnectionLost",
    "ConnectionSettings",
    "ContainerExited",
    "DelayError",
    "DelayLayoutMismatch",
    "Delivery",
    "Diagnostic",
    "DlqError",
    "ExchangeNotFound",
    "FrameError",
    "HandlerTimeout",
    "IncomingMessage",
    "InvalidBody",
    "InvalidReply",
    "LockHeld",
    "LockLost",
    "Message",
    "Middleware",
    "MissingExtra",
    "Nacked",
    "NoAnswer",
    "NoRoute",
    "NodeOrder",
    "NonRetryable",
    "NotAParkingLot",
    "NotModelled",
    "ObjectNotFound",
    "Occurrence",
    "OtherBroker",
    "PeriodicError",
    "Plan",
    "PlanError",
    "PublishError",
    "Publisher",
    "PublisherClosed",
    "RabbitryError",
    "RecordUnreadable",
    "Refusal",
    "ReplyLost",
    "Reporter",
    "RequestTimeout",
    "RetryConfigError",
    "ScheduleError",
    "SignatureError",
    "SinkOptionError",
    "SourceOptionError",
    "SourceRange",
    "SparkSinkError",
    "SparkSourceError",
    "Spec",
    "SpecError",
    "SpecProblem",
    "StreamError",
    "StreamNotFound",
    "StreamProtocolError",
    "StreamRefused",
    "StreamUnavailable",
    "StreamUnreachable",
    "TLSHandshakeError",
    "TargetError",
    "Topology",
    "TopologyLost",
    "TopologyMissing",
    "UnknownExchange",
    "Unroutable",
    "UnsafeFileError",
    "Worker",
    "__version__",
    "apply",
    "cancel_job",
    "check_spec",
    "expand",
    "load_spec",
    "load_topology",
    "plan",
    "stacks",
]


_lazy_getattr, __dir__ = lazy.names(__name__, _LAZY, __all__)


def _installed_version() -> str:
    """The version of the installed distribution ("0.0.0" from a checkout never installed).

    Read from its METADATA in the first ``sys.path`` entry that has one, as
    ``importlib.metadata`` would find it, without importing ``importlib.metadata``: that pulls
    in email, zipfile, csv and tempfile (about 4 MiB), and every worker asks for the version
    when it connects (the client properties)."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("rabbitry-") and name.endswith(".dist-info"):
                try:
                    with open(os.path.join(entry or ".", name, "METADATA"), encoding="utf-8") as f:
                        for line in f:
                            if line.startswith("Version:"):
                                return line.split(":", 1)[1].strip()
                            if not line.strip():
                                break
                except OSError:
                    continue
    return "0.0.0"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = _installed_version()
        globals()["__version__"] = value
        return value
    return _lazy_getattr(name)
