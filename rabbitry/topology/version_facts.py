"""The table of what each RabbitMQ version does with a queue argument, a policy key, an exchange
or queue type, or a feature: ``FACTS``, one ``Fact`` a row, each with its source and what to do.

Data only: ``rabbitry.topology.versions`` reads it (which facts a use meets, what a version
does with it). Each fact says from which version the broker has a thing (``added``), accepts
it without effect (``ignored``), refuses it (``removed``) or changes its default
(``changed``). Facts that could not be confirmed from RabbitMQ's release notes or source are
left out rather than guessed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rabbitry.topology.queue_types import QueueType

__all__ = [
    "ABSENT",
    "ANY",
    "FACTS",
    "RETRY_VIA_BROKER",
    "SERVER_NAMED_BINDING",
    "VHOST_DELETION_PROTECTION",
    "Fact",
    "Kind",
    "Use",
    "Version",
]

Version = tuple[int, ...]
"""A RabbitMQ version as numbers: (4, 0, 5)."""


class Kind(enum.StrEnum):
    """What a fact is about."""

    QUEUE_ARGUMENT = "queue argument"
    POLICY_KEY = "policy key"
    OPERATOR_POLICY_KEY = "operator policy key"
    APPLY_TO = "policy apply-to"
    EXCHANGE_TYPE = "exchange type"
    QUEUE_TYPE = "queue type"
    FEATURE = "feature"


ANY = object()
"""A fact about a key whatever its value."""
ABSENT = object()
"""A fact about a key left out (the broker's default applies)."""


@dataclass(frozen=True)
class Use:
    """One thing an object uses: a key (with its value) of some kind, on some queue type."""

    kind: Kind
    key: str
    value: object = ANY
    queue_type: QueueType | None = None


@dataclass(frozen=True)
class Fact:
    """What RabbitMQ versions do with one key (or one value of it)."""

    kind: Kind
    key: str
    source: str
    """Where the fact comes from: release notes version or a file of rabbitmq-server."""
    advice: str
    """What to do about it, said to the user."""
    value: object = ANY
    queue_types: frozenset[QueueType] | None = None
    """The queue types the fact is about (None: any object)."""
    added: Version | None = None
    """First version that has it; older brokers refuse it or lack it."""
    unchecked_before: bool = False
    """Older brokers than ``added`` accept it without effect rather than refuse it (a queue
    argument they do not know and do not check): a warning there, not a refusal."""
    ignored: Version | None = None
    """First version that accepts it without effect."""
    removed: Version | None = None
    """First version that refuses it."""
    changed: Version | None = None
    """Version whose behaviour differs from the one before (a new default)."""
    deprecated_feature: str | None = None
    """The broker's deprecated feature behind a ``removed`` that is only a default (from
    ``removed`` on, denied unless rabbitmq.conf permits it): a broker that reports the feature
    permitted accepts the use, one that reports it denied refuses it, whatever its version."""

    @property
    def label(self) -> str:
        if self.value is ABSENT:
            return f"the default of {self.kind} {self.key}"
        if self.value is ANY:
            return f"{self.kind} {self.key}"
        return f"{self.kind} {self.key}: {self.value}"

    def matches(self, use: Use) -> bool:
        if use.kind is not self.kind or use.key != self.key:
            return False
        if self.value is not ANY and use.value != self.value and use.value is not self.value:
            return False
        return self.queue_types is None or use.queue_type in self.queue_types


RETRY_VIA_BROKER = "quorum queue delayed retry (retry: {via: broker})"
"""The feature a queue that retries through the broker relies on (not a key of its own)."""

SERVER_NAMED_BINDING = "import of a binding to a server-named (amq.gen-*) queue"
"""What the broker's definitions import does with such a binding: it skips the queue (its
client's, gone with it), and from 4.0 refuses the binding to it rather than skip it too."""

VHOST_DELETION_PROTECTION = "vhost deletion protection (protected_from_deletion)"
"""A vhost the broker refuses to delete (its metadata's ``protected_from_deletion``)."""

CLASSIC = frozenset({QueueType.CLASSIC})
QUORUM = frozenset({QueueType.QUORUM})
STREAM = frozenset({QueueType.STREAM})
NOTES = "https://github.com/rabbitmq/rabbitmq-server/blob/main/release-notes/"
SRC = "rabbitmq-server "

_HA_KEYS = (
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
)
_HA_SOURCE = (
    f"{NOTES}4.0.1.md (classic queue mirroring removed); {SRC}v4.0.0 rabbit_policy.erl refuses"
    " policy keys no validator claims, and none claims ha-*"
)
_HA_ADVICE = (
    "classic queue mirroring is gone: remove the ha-* keys and use quorum queues (or streams)"
    " for replicated data, https://www.rabbitmq.com/docs/migrate-mcq-to-qq"
)

FACTS: tuple[Fact, ...] = (
    # --- queue types and queue-level features
    Fact(
        Kind.QUEUE_TYPE,
        "quorum",
        # quorum queues are the 3.8 headline feature
        source=f"{NOTES}3.8.0.md",
        advice="use a classic queue, or upgrade the broker",
        added=(3, 8),
    ),
    Fact(
        Kind.QUEUE_TYPE,
        "stream",
        source=f"{NOTES}3.9.0.md (Streams)",
        advice="use a quorum queue, or upgrade the broker",
        added=(3, 9),
    ),
    # No row for super streams: what a super stream is made of (a direct exchange, stream
    # queues, bindings with arguments) every broker with streams makes; 3.11 added the stream
    # protocol's lookup of its partitions (3.11.0 release notes), which AMQP 0-9-1 publishing by
    # routing key and rabbitry's Spark source do not need.
    Fact(
        Kind.FEATURE,
        "non-durable non-exclusive queues",
        # deprecated feature transient_nonexcl_queues moved to denied_by_default upstream; Debian
        # patches it back to permitted_by_default (rabbitmq-server 4.3.0-3 on), so the version
        # alone does not decide: a live broker's deprecated-feature state does
        source=f"{NOTES}4.3.0.md (Deprecated Features are Now Disabled by Default);"
        f" {SRC}rabbit_amqqueue.erl: transient_nonexcl_queues is permitted_by_default up to"
        " v4.2.0, denied_by_default from v4.3.0 to v4.3.5; Debian's rabbitmq-server 4.3.0-3 on"
        " (do-not-deprecate-transient_nonexcl_queues.patch) permits it: its 4.3.6 declares and"
        " imports such queues (tests/integration/test_broker_versions.py)",
        advice="make the queue durable (add x-expires to delete it when unused), or permit it on"
        " every node: deprecated_features.permit.transient_nonexcl_queues = true",
        removed=(4, 3),
        deprecated_feature="transient_nonexcl_queues",
    ),
    Fact(
        Kind.FEATURE,
        RETRY_VIA_BROKER,
        queue_types=QUORUM,
        # older brokers declare the x-delayed-retry-* arguments and ignore them: a message the
        # worker returns as failed would come back at once, again and again, until the limit
        source=f"{NOTES}4.3.0.md (quorum queue delayed retry); delays measured on RabbitMQ"
        " 4.3.6 (tests/integration/test_retry_via_broker.py)",
        advice="retry `via: queues` (TTL tier queues work on any version), or upgrade the broker"
        " to 4.3",
        added=(4, 3),
    ),
    # --- queue arguments
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-dead-letter-strategy",
        value="at-least-once",
        queue_types=QUORUM,
        source=f"{NOTES}3.10.0.md (at-least-once dead lettering for quorum queues)",
        advice="use at-most-once dead-lettering, or upgrade the broker",
        added=(3, 10),
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-queue-mode",
        queue_types=CLASSIC,
        # The 4.3.0 notes say declaring with x-queue-mode fails, but RabbitMQ 4.3.6 declares
        # such a queue (tests/integration/test_broker_versions.py on the 4.3 image): the key is
        # still listed by the classic queue type, so it is accepted and ignored
        source=f"{NOTES}3.12.0.md (lazy and non-lazy modes no longer apply); declared by"
        " RabbitMQ 4.3.6 (tested)",
        advice="remove x-queue-mode: classic queues keep messages on disk since 3.12",
        ignored=(3, 12),
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-queue-version",
        value=1,
        queue_types=CLASSIC,
        source=f"{NOTES}4.0.1.md (CQv1 storage removed, queues run on CQv2); {NOTES}4.3.0.md"
        f" and {SRC}v4.3.0 rabbit_amqqueue.erl check_queue_version (only 2 is accepted)",
        advice="remove x-queue-version (2 is the only storage version left) or set it to 2",
        ignored=(4, 0),
        removed=(4, 3),
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-queue-master-locator",
        queue_types=CLASSIC,
        source=f"{NOTES}4.0.1.md (deprecated for queue_leader_locator); {NOTES}4.3.0.md"
        f" (queue_master_locator denied by default) and {SRC}v4.3.0 rabbit_classic_queue.erl"
        " validate_arguments (rabbit_queue_location.erl: permitted_by_default up to v4.2.0)",
        advice="use x-queue-leader-locator (client-local or balanced) instead, or permit it on"
        " every node: deprecated_features.permit.queue_master_locator = true",
        removed=(4, 3),
        deprecated_feature="queue_master_locator",
    ),
    *(
        Fact(
            kind,
            "queue-master-locator",
            source=f"{NOTES}4.3.0.md (queue_master_locator denied by default); {SRC}v4.3.0"
            " rabbit_classic_queue.erl validate_policy refuses the key unless the deprecated"
            " feature is permitted",
            advice="use queue-leader-locator (client-local or balanced) instead, or permit it on"
            " every node: deprecated_features.permit.queue_master_locator = true",
            removed=(4, 3),
            deprecated_feature="queue_master_locator",
        )
        for kind in (Kind.POLICY_KEY, Kind.OPERATOR_POLICY_KEY)
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-queue-leader-locator",
        queue_types=CLASSIC,
        source=f"{SRC}v4.0.0 rabbit_classic_queue.erl capabilities (classic queues accept it"
        " once feature flag rabbitmq_4.0.0 is enabled); older classic queues refuse it",
        advice="use x-queue-master-locator on this broker, or upgrade it",
        added=(4, 0),
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-stream-filter-size-bytes",
        queue_types=STREAM,
        source=f"{NOTES}3.13.0.md (stream filtering); {SRC}v3.13.0 rabbit_amqqueue.erl"
        " declare_args",
        advice="remove x-stream-filter-size-bytes (stream filtering needs 3.13), or upgrade",
        added=(3, 13),
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-delivery-limit",
        value=-1,
        queue_types=QUORUM,
        source=f"{NOTES}4.0.1.md (a delivery limit of -1 disables the default limit)",
        advice="leave x-delivery-limit out: before 4.0 quorum queues have no limit by default",
        added=(4, 0),
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-delivery-limit",
        value=ABSENT,
        queue_types=QUORUM,
        source=f"{NOTES}4.0.1.md (Quorum Queues Now Have a Default Redelivery Limit)",
        advice="quorum queues dead-letter (or drop) a message after 20 deliveries from 4.0; set"
        " delivery_limit (or x-delivery-limit) on the queue to choose",
        changed=(4, 0),
    ),
    *(
        Fact(
            Kind.QUEUE_ARGUMENT,
            key,
            queue_types=QUORUM,
            source=f"{NOTES}4.3.0.md (quorum queue delayed retry); {SRC}v4.3.0"
            " rabbit_quorum_queue.erl capabilities",
            advice=f"remove {key}: quorum queue delayed retry needs RabbitMQ 4.3 (a retry"
            " ladder of TTL queues works on any version)",
            added=(4, 3),
            unchecked_before=True,  # 3.10 and 4.0.5 declare it (tested)
        )
        for key in ("x-delayed-retry-type", "x-delayed-retry-min", "x-delayed-retry-max")
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-consumer-disconnected-timeout",
        queue_types=QUORUM,
        source=f"{NOTES}4.3.0.md; {SRC}v4.3.0 rabbit_quorum_queue.erl capabilities",
        advice="remove x-consumer-disconnected-timeout, or upgrade the broker to 4.3",
        added=(4, 3),
        unchecked_before=True,  # 3.10 and 4.0.5 declare it (tested)
    ),
    Fact(
        Kind.QUEUE_ARGUMENT,
        "x-consumer-timeout",
        queue_types=CLASSIC,
        source=f"{NOTES}4.3.0.md (Consumer Timeouts are No Longer Evaluated for Classic Queues"
        " and Streams)",
        advice="remove x-consumer-timeout from classic queues; use a quorum queue if"
        " unacknowledged deliveries must time out",
        ignored=(4, 3),
    ),
    # --- exchange types
    Fact(
        Kind.EXCHANGE_TYPE,
        "x-local-random",
        source=f"{NOTES}4.0.1.md (new exchange type: Local Random Exchange)",
        advice="use another exchange type, or upgrade the broker to 4.0",
        added=(4, 0),
    ),
    # --- policy keys
    Fact(
        Kind.APPLY_TO,
        "classic_queues",
        source=f"{SRC}v3.12.0 rabbit_policy.erl (apply-to per queue type); 3.10 and 3.11 know"
        " only all, queues and exchanges",
        advice="use apply-to queues (with a pattern that matches only those queues)",
        added=(3, 12),
    ),
    Fact(
        Kind.APPLY_TO,
        "quorum_queues",
        source=f"{SRC}v3.12.0 rabbit_policy.erl; {NOTES}3.12.0.md uses --apply-to quorum_queues",
        advice="use apply-to queues (with a pattern that matches only those queues)",
        added=(3, 12),
    ),
    Fact(
        Kind.APPLY_TO,
        "streams",
        source=f"{SRC}v3.12.0 rabbit_policy.erl (apply-to per queue type)",
        advice="use apply-to queues (with a pattern that matches only those queues)",
        added=(3, 12),
    ),
    *(
        Fact(kind, key, source=_HA_SOURCE, advice=_HA_ADVICE, removed=(4, 0))
        for kind in (Kind.POLICY_KEY, Kind.OPERATOR_POLICY_KEY)
        for key in _HA_KEYS
    ),
    Fact(
        Kind.POLICY_KEY,
        "queue-mode",
        source=f"{NOTES}3.12.0.md (lazy and non-lazy modes no longer apply)",
        advice="remove queue-mode: classic queues keep messages on disk since 3.12",
        ignored=(3, 12),
    ),
    Fact(
        Kind.POLICY_KEY,
        "queue-version",
        value=1,
        source=f"{NOTES}4.0.1.md (CQv1 storage removed)",
        advice="remove queue-version (2 is the only storage version left)",
        ignored=(4, 0),
    ),
    Fact(
        Kind.POLICY_KEY,
        "consumer-timeout",
        source=f"{SRC}v3.12.0 rabbit_policies.erl (consumer-timeout policy validator)",
        advice="remove consumer-timeout (set consumer_timeout in rabbitmq.conf), or upgrade",
        added=(3, 12),
    ),
    *(
        Fact(
            kind,
            "target-group-size",
            source=f"{SRC}v3.13.0 rabbit_quorum_queue.erl (target-group-size validator)",
            advice="remove target-group-size (grow quorum queues with rabbitmq-queues grow)",
            added=(3, 13),
        )
        for kind in (Kind.POLICY_KEY, Kind.OPERATOR_POLICY_KEY)
    ),
    *(
        Fact(
            kind,
            key,
            # 4.3.0 reads the keys but registers no validator, so it refuses the policy
            source=f"{NOTES}4.3.1.md (delayed retry policy keys are now accepted); {SRC}v4.3.0"
            " rabbit_quorum_queue.erl registers no validator for them",
            advice=f"set x-{key} on the quorum queue instead (4.3.0), or upgrade to 4.3.1",
            added=(4, 3, 1),
        )
        for kind in (Kind.POLICY_KEY, Kind.OPERATOR_POLICY_KEY)
        for key in ("delayed-retry-type", "delayed-retry-min", "delayed-retry-max")
    ),
    Fact(
        Kind.FEATURE,
        SERVER_NAMED_BINDING,
        # checked by importing one file on both: 3.11 to 3.13 not checked, so the first version
        # that refuses may be older than 4.0
        source="RabbitMQ 4.0.5 refuses the import (resources_missing), 3.10.8 takes it without"
        " the binding (checked)",
        advice="remove the binding (and its amq.gen-* queue) from the file: the queue was a"
        " client's, and the client declares and binds it again when it connects",
        removed=(4, 0),
    ),
    Fact(
        Kind.FEATURE,
        VHOST_DELETION_PROTECTION,
        source=f"{NOTES}4.0.6.md (protecting a virtual host from deletion using metadata);"
        f" {SRC}v4.0.6 rabbit_mgmt_dispatcher.erl /vhosts/:vhost/deletion/protection; RabbitMQ"
        " 4.0.5 and 3.10.8 import the key and keep nothing (tested)",
        advice="upgrade the broker to 4.0.6 for the vhost to be protected, or leave"
        " protected_from_deletion out: this broker can delete the vhost",
        added=(4, 0, 6),
        unchecked_before=True,
    ),
    Fact(
        Kind.POLICY_KEY,
        "consumer-disconnected-timeout",
        source=f"{NOTES}4.3.0.md; {SRC}v4.3.0 rabbit_policies.erl",
        advice="remove consumer-disconnected-timeout, or upgrade the broker to 4.3",
        added=(4, 3),
    ),
)
"""Every fact the checks know, each with its source."""
