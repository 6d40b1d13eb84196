"""Every exception a user of rabbitry can catch, in one tree under ``RabbitryError``.

Catch ``RabbitryError`` to catch them all, or a branch (``BrokerError``, ``PublishError``,
``SpecError``, ...) or one class by its name: each is ``rabbitry.<Name>``, and drawn with the
others in the package docstring and docs/api.md (``tests/unit/test_error_tree.py`` checks all
three agree with the classes below, and that no other module defines an error a user sees).
The classes are grouped by the area that raises them, each with a docstring that says when it
is raised and what to do. A module may still import its errors under their old names (the
publisher's from ``rabbitry.publisher.errors``, ...); they are these classes.

The tree is one module on purpose: read top to bottom, it is the whole list (a new error goes
here, in its area's group). It stays at the bottom of the layers (it imports ``diagnostics``
only), so an error that carries a richer layer's data (``TopologyMissing``'s needs) takes it
as plain data, its type named for type checkers only; the module that raises it builds the
message (``consumer.preflight``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rabbitry.diagnostics import Diagnostic, Severity, SourceRange

if TYPE_CHECKING:
    from rabbitry.consumer.preflight import Need


# -- the root, and what any part of rabbitry may raise --------------------------------------------


class RabbitryError(Exception):
    """Base of every error rabbitry raises on purpose: catch it to catch them all."""

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """The error as data (what ``--json`` prints as its ``diagnostics``): one made of the
        message here; a ``Refusal`` holds one per refusal, a ``SpecError`` one per problem."""
        return (Diagnostic(summary=str(self)),)


class MissingExtra(RabbitryError):
    """A feature needs a package of one of rabbitry's extras that is not installed: install the
    extra the message names (``pip install 'rabbitry[metrics]'``, ...)."""

    def __init__(self, feature: str, package: str, extra: str) -> None:
        super().__init__(
            f"{feature} needs {package}, which comes with rabbitry's {extra} extra:"
            f" pip install 'rabbitry[{extra}]'"
        )
        self.package = package
        self.extra = extra


class UnsafeFileError(RabbitryError):
    """A file or directory rabbitry keeps private (the worker's spec cache) belongs to another
    user or others may write it (or it is a symbolic link): rabbitry does not use it. Remove it,
    or make it the running user's, mode 0700 (a directory) or 0600 (a file)."""


class Refusal(RabbitryError):
    """What refusing errors share (``PlanError``, ``CapabilityError``): ``diagnostics``, one per
    refusal (a tuple of ``Diagnostic``); one made of the message when the raiser gave none.
    Read them instead of splitting the message."""

    def __init__(self, message: str, diagnostics: Iterable[Diagnostic] = ()) -> None:
        super().__init__(message)
        self._diagnostics = tuple(diagnostics) or (Diagnostic(summary=message),)

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return self._diagnostics


# -- the spec --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec: where (file:line:column, spec path) and what to do."""

    message: str
    path: str = ""
    file: str | None = None
    line: int | None = None
    column: int | None = None
    severity: str = "error"

    def location(self) -> str:
        parts = []
        if self.file is not None:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            parts.append(where)
        if self.path:
            parts.append(self.path)
        return ": ".join(parts)

    def __str__(self) -> str:
        location = self.location()
        return f"{location}: {self.message}" if location else self.message

    def source(self) -> SourceRange:
        """Its place in the spec."""
        return SourceRange(self.file, self.line, self.column, self.path)

    def diagnostic(self) -> Diagnostic:
        """This problem as a ``Diagnostic``, its place in the spec as the source range."""
        severity: Severity = "warning" if self.severity == "warning" else "error"
        return Diagnostic(summary=self.message, severity=severity, source=self.source())


class SpecError(RabbitryError):
    """The spec cannot be loaded: bad template, YAML, shape or meaning. ``problems`` lists every
    one found (``SpecProblem``: file:line, spec path, what to do); fix them and load it again."""

    def __init__(self, problems: list[SpecProblem] | SpecProblem | str) -> None:
        if isinstance(problems, str):
            problems = [SpecProblem(problems)]
        elif isinstance(problems, SpecProblem):
            problems = [problems]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    @property
    def diagnostics(self) -> tuple[Diagnostic, ...]:
        return tuple(problem.diagnostic() for problem in self.problems)


class TargetError(SpecError):
    """A handler names a queue or a group that the vhost does not declare (when an ``App``
    binds its handlers to the spec): declare it in the spec or name one that is there."""


class AsyncApiError(RabbitryError):
    """The app's handlers consume something the spec does not declare (``rabbitry asyncapi``
    with an app): declare it in the spec or fix the handler's queue."""


# -- the broker, its connection and its management API ---------------------------------------------


class BrokerError(RabbitryError):
    """The broker (or its management API) could not be reached or refused a request: the
    message names the node and the answer; check the URL, the credentials and the broker."""


class NoAnswer(BrokerError):
    """A management API request got no answer in time; the broker may still be working on it:
    look at the broker (``rabbitry plan`` shows what is there) before trying again."""


class TLSHandshakeError(BrokerError):
    """The TLS handshake failed on a certificate (the broker's or ours): retrying cannot help;
    fix the CA, the certificate or the host name the message names."""


class CapabilityError(Refusal, BrokerError):
    """The broker lacks a plugin, feature flag or version the spec needs (``plan``, ``apply``,
    a worker's start): enable or upgrade what ``diagnostics`` name, or change the spec."""


class ObjectNotFound(BrokerError):
    """The management API answered 404: what the request names is not on the broker (or no
    longer: a vhost deleted while it is read). Create it (``rabbitry apply``) or name another."""


class AnswerTooLarge(BrokerError):
    """A management API answer is larger than rabbitry reads: raise
    ``RABBITRY_MANAGEMENT_MAX_BYTES`` if the broker really holds that much."""


class FrameError(BrokerError):
    """Bytes from the broker that are no valid AMQP 0-9-1 frame: a broker bug, a man in the
    middle, or another server on the port. The connection cannot continue and is closed; the
    message names the node (host:port) and what was wrong: check that it is a RabbitMQ AMQP
    port."""

    @classmethod
    def at(cls, node: str, exc: BaseException) -> FrameError:
        """``exc`` (what the frame reader found wrong) said of the node that sent it."""
        return cls(
            f"{node} sent bytes that are no AMQP 0-9-1 frame ({exc}); the connection is closed:"
            f" is {node} a RabbitMQ AMQP port?"
        )


class ChannelRefused(BrokerError):
    """The broker refused a method of the tools' channel (a passive declare of something
    missing: 404) and closed the channel; ``reply_code`` and ``reply_text`` are its answer
    (raised by ``dlq``, exact queue counts and the Spark checks: create what it names)."""

    def __init__(self, reply_code: int, reply_text: str) -> None:
        self.reply_code = reply_code
        self.reply_text = reply_text
        super().__init__(f"{reply_code} {reply_text}")


# -- planning and applying -------------------------------------------------------------------------


class PlanError(Refusal):
    """The plan cannot be applied as asked (a replace or prune the options do not allow, a
    protected object, another stack's): ``diagnostics`` name each; pass the option they name or
    change the spec. Nothing was changed."""


class ApplyError(RabbitryError):
    """Applying stopped half-way; ``done`` says what was changed before the failure. Fix the
    cause the message names and apply again: the plan starts from what is there."""

    def __init__(self, message: str, done: list[str] | None = None) -> None:
        self.done = done or []
        super().__init__(message)


class LockHeld(RabbitryError):
    """Another run holds the stack's lock (and kept it past ``lock_timeout``): wait for it, or
    pass a longer ``lock_timeout``. Nothing was changed."""


class LockLost(BrokerError):
    """This run no longer holds the stack's lock it applies under: it stops before its next
    write. Plan again: another run may have changed the broker."""


class RecordUnreadable(BrokerError):
    """A stack's ownership record on the broker cannot be read (another tool's, hand-edited, or
    past a bound); ``stack`` names it. Repair or delete that global parameter."""

    def __init__(self, stack: str, message: str) -> None:
        self.stack = stack
        super().__init__(message)


# -- publishing ------------------------------------------------------------------------------------


class PublishError(RabbitryError):
    """A message was not confirmed by the broker: catch it around publishing to catch every
    failure; the subclass says why and whether the message may still be stored."""


class Nacked(PublishError):
    """The broker refused the message (basic.nack): a queue's limit, or the broker's own
    trouble; the message was not stored. Publish it again later or elsewhere."""


class Unroutable(PublishError):
    """A mandatory message reached no queue (basic.return): bind a queue for its routing key
    (``rabbitry apply``) or fix the key."""


class ConfirmTimeout(PublishError):
    """No confirm arrived in time; the message may or may not have been stored: publish it
    again only if a duplicate is harmless (an ``idempotent=True`` handler skips a message id
    it handled before)."""


class ChannelClosed(PublishError):
    """The broker closed the channel because of this message (``reply_code`` says why)."""

    def __init__(self, message: str, reply_code: int = 0) -> None:
        self.reply_code = reply_code
        super().__init__(message)


class ExchangeNotFound(ChannelClosed):
    """The message was published to an exchange that does not exist (404 NOT_FOUND): create it
    (``rabbitry apply``) or name another."""


class AccessRefused(ChannelClosed):
    """The user may not publish to this exchange (403 ACCESS_REFUSED): grant it write
    permission on the vhost."""


class ConnectionLost(PublishError, BrokerError):
    """The connection broke and did not come back within ``give_up_after``; a message in flight
    may or may not be stored. A worker that gives up raises it too. Check the broker, then
    publish again (``deliveries`` says which of a ``publish_many`` were stored)."""

    deliveries: list[Any]
    """For ``publish_many``: every message sent so far, each with its outcome."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.deliveries = []


class PublisherClosed(PublishError):
    """The publisher was closed before the message was confirmed: it may or may not be stored;
    publish on a publisher that is open."""


class RequestTimeout(PublishError):
    """No reply came within the request's timeout; the request may still be handled later,
    and its reply is then dropped. Give it a longer timeout or check the worker."""


class ReplyLost(PublishError):
    """The connection was lost while a request waited: its reply can no longer arrive (the
    request was stored and may be handled). Ask again if that is harmless."""


class UnknownExchange(PublishError):
    """The exchange is not declared in the publisher's topology (caught before publishing):
    declare it in the spec or name one that is."""


class NoRoute(PublishError):
    """By the topology, the routing key reaches no queue (asked for with ``check_route``):
    bind a queue for it in the spec or fix the key."""


class DelayLayoutMismatch(PublishError):
    """The broker's delay levels are not laid out as the spec says: a delay would strand
    (raised before a delay's first message, and by a worker at start). Run ``rabbitry apply``."""


# -- delays and retries ----------------------------------------------------------------------------


class DelayError(RabbitryError):
    """A delay that the declared delay levels cannot represent (negative, past ``max``), or
    levels that cannot be laid out: change the delay or the spec's delay levels."""


class RetryConfigError(RabbitryError):
    """A retry policy that cannot work as declared: fix the ``retry`` the message names."""


class NonRetryable(RabbitryError):
    """A failure no retry can mend (a body that does not validate, say): the message is parked
    at once, whatever the queue's retry policy says. Raise it, or a subclass, from a handler."""


# -- workers ---------------------------------------------------------------------------------------


class AppError(RabbitryError):
    """A handler registration that cannot work (unknown queue, two handlers for one queue),
    raised as the handler is registered: fix the decorator's arguments."""


class SignatureError(RabbitryError):
    """A handler whose parameters do not say what to pass (raised as ``AppError`` by ``App``):
    annotate the body parameter, or take an ``IncomingMessage``."""


class PeriodicError(RabbitryError):
    """A periodic job that cannot be registered (bad name, schedule or signature): fix the
    ``periodic`` decorator's arguments."""


class ScheduleError(RabbitryError):
    """A schedule that cannot be read (a bad duration or cron expression): the message names
    the field and the values it takes."""


class HandlerTimeout(RabbitryError):
    """The handler ran longer than its queue's time-to-run (a retryable failure: the message
    is retried like any other); raise the time-to-run or make the handler faster."""


class InvalidBody(NonRetryable):
    """A body that does not decode or validate into the handler's declared type: the message
    is parked at once (the parking lot's copy says why)."""


class InvalidReply(NonRetryable):
    """A handler returned a value its codec cannot encode as a reply (parked: another attempt
    would return the same): return what the codec sends."""


class TopologyMissing(CapabilityError):
    """A worker refused to start: the broker lacks what its handlers need (``missing``); nothing
    was consumed. Run ``rabbitry apply`` on the spec (the message names the command)."""

    def __init__(
        self, message: str, *, missing: Sequence[Need], where: str, spec: str | None
    ) -> None:
        super().__init__(message)
        self.missing = list(missing)
        self.where = where
        self.spec = spec


class TopologyLost(TopologyMissing):
    """A running worker stopped: an object its handlers need went away from the broker (a
    ``TopologyMissing``: the restarted worker refuses to start until ``rabbitry apply``)."""

    def __init__(
        self, message: str, *, missing: Sequence[Need], where: str, spec: str | None, queue: str
    ) -> None:
        super().__init__(message, missing=missing, where=where, spec=spec)
        self.queue = queue
        """The queue whose message found the object gone (it is back in that queue)."""


class DlqError(RabbitryError):
    """A parking-lot operation that cannot be carried out (missing queue, no destination): the
    message says what is missing."""


class NotAParkingLot(DlqError):
    """A replay or purge of a queue that is not known to be a parking lot, without leave: name
    a parking lot, or pass the option that allows any queue."""


# -- streams ---------------------------------------------------------------------------------------


class StreamError(BrokerError):
    """A stream cannot be read over AMQP: it does not exist, is not a stream, or the broker
    refused."""


class StreamNotFound(StreamError):
    """No queue of that name in the vhost (404 NOT_FOUND): declare the stream
    (``rabbitry apply``) or name another."""


class StreamUnreachable(StreamError):
    """No connection to the broker, or it was lost: trying again later may succeed."""


class StreamProtocolError(BrokerError):
    """Bytes from the broker that are no valid stream-protocol frame or stored message: is the
    port the stream plugin's?"""


class StreamRefused(BrokerError):
    """The broker answered a stream-protocol request with an error ``code``: the message names
    the request and the code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class StreamUnavailable(BrokerError):
    """No stream protocol where it was looked for (no plugin, port closed, handshake failed):
    enable ``rabbitmq_stream`` or name its port."""


class OtherBroker(BrokerError):
    """The stream port answers for another cluster than the AMQP URL reaches: another broker
    on that host, where the same credentials would read or write the wrong streams. Name the
    stream port of the URL's cluster."""

    def __init__(self, message: str, *, amqp_cluster: str, stream_cluster: str) -> None:
        super().__init__(message)
        self.amqp_cluster = amqp_cluster
        self.stream_cluster = stream_cluster


# -- the Spark data source (also rabbitry.spark.<Name>) --------------------------------------------


class SparkSinkError(RabbitryError):
    """The Spark sink cannot start (bad option, schema or broker) or a partition was not stored:
    the message says which; a failed partition is retried by Spark."""


class SinkOptionError(SparkSinkError):
    """An option of the ``rabbitmq`` data source is unknown, malformed or contradicts another:
    the message names it and what it takes."""


class SparkSourceError(RabbitryError):
    """The Spark source cannot start (bad option, missing stream, broker) or a read failed."""


class SourceOptionError(SparkSourceError):
    """An option of the ``rabbitmq`` source is unknown, malformed or contradicts another: the
    message names it and what it takes."""


# -- test brokers (also rabbitry.testing.<Name>) ---------------------------------------------------


class BrokerUnavailable(BrokerError):
    """No broker can be provided here and none was asked for: broker tests are skipped. Set
    ``RABBITMQ_URL`` or make Docker (or Podman's socket) available."""


class ContainerExited(BrokerError):
    """A broker's container stopped while rabbitry waited for it to answer: its log (in the
    message) says why."""


class NotModelled(RabbitryError):
    """The scripted broker was asked for something it does not model: test it on a broker."""
