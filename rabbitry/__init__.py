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

The full list, grouped, is in docs/api.md. Errors form one tree under ``RabbitryError``::

    RabbitryError
    +-- SpecError          the spec cannot be loaded (problems with file:line and spec path)
    +-- BrokerError        the broker or its API could not be reached or refused a request
    |   +-- CapabilityError     a plugin, feature flag or version the spec needs is missing
    |   |   +-- TopologyMissing  a worker refused to start: what its handlers need is missing
    |   +-- TLSHandshakeError   a certificate failed to verify: retrying cannot help
    |   +-- ConnectionLost      (also a PublishError) no connection within give_up_after
    |   +-- LockLost            an apply run lost its stack's lock: it stopped before its next write
    +-- LockHeld           another run holds the stack's lock past ``lock_timeout``
    +-- PlanError          the plan needs a replace or prune the options do not allow
    +-- ApplyError         applying stopped half-way (``done`` says what was changed)
    +-- PublishError       a message was not confirmed
    |   +-- Nacked, Unroutable, ConfirmTimeout, ChannelClosed (ExchangeNotFound,
    |       AccessRefused), PublisherClosed, DelayLayoutMismatch
    +-- NonRetryable       raised by a handler: the worker parks the message at once
    |   +-- InvalidBody         the body does not validate into the handler's declared type
    +-- MissingExtra       a feature needs a package of an extra not installed (names the pip line)
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from rabbitry import lazy
from rabbitry.errors import (
    ApplyError,
    BrokerError,
    CapabilityError,
    ConfirmTimeout,
    MissingExtra,
    Nacked,
    PlanError,
    PublishError,
    RabbitryError,
    SpecError,
    SpecProblem,
    TLSHandshakeError,
    Unroutable,
)

if TYPE_CHECKING:
    from rabbitry.amqp.codecs import Codec
    from rabbitry.amqp.confirms import Delivery
    from rabbitry.amqp.errors import (
        AccessRefused,
        ChannelClosed,
        ConnectionLost,
        ExchangeNotFound,
    )
    from rabbitry.amqp.message import Message
    from rabbitry.amqp.settings import Backoff, ConnectionSettings, NodeOrder
    from rabbitry.consumer import (
        App,
        AsyncWorker,
        IncomingMessage,
        InvalidBody,
        Middleware,
        NonRetryable,
        Occurrence,
        Worker,
        cancel_job,
    )
    from rabbitry.consumer.preflight import TopologyMissing
    from rabbitry.provisioner.applier import ApplyResult
    from rabbitry.provisioner.lock import LockHeld, LockLost
    from rabbitry.provisioner.planner import Plan
    from rabbitry.provisioner.stack import apply, plan, stacks
    from rabbitry.publisher import AsyncPublisher, Publisher, PublisherClosed
    from rabbitry.publisher.layout import DelayLayoutMismatch
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
    "Plan": "rabbitry.provisioner.planner",
    "ApplyResult": "rabbitry.provisioner.applier",
    # publishing
    "Publisher": "rabbitry.publisher",
    "AsyncPublisher": "rabbitry.publisher",
    "PublisherClosed": "rabbitry.publisher",
    "Message": "rabbitry.amqp.message",
    "Delivery": "rabbitry.amqp.confirms",
    "Backoff": "rabbitry.amqp.settings",
    "ConnectionSettings": "rabbitry.amqp.settings",
    "NodeOrder": "rabbitry.amqp.settings",
    "ConnectionLost": "rabbitry.amqp.errors",
    "ChannelClosed": "rabbitry.amqp.errors",
    "ExchangeNotFound": "rabbitry.amqp.errors",
    "AccessRefused": "rabbitry.amqp.errors",
    # workers
    "App": "rabbitry.consumer",
    "Worker": "rabbitry.consumer",
    "AsyncWorker": "rabbitry.consumer",
    "IncomingMessage": "rabbitry.consumer",
    "Middleware": "rabbitry.consumer",
    "NonRetryable": "rabbitry.consumer",
    "InvalidBody": "rabbitry.consumer",
    "Occurrence": "rabbitry.consumer",
    "Codec": "rabbitry.amqp.codecs",
    # apply runs
    "LockHeld": "rabbitry.provisioner.lock",
    "LockLost": "rabbitry.provisioner.lock",
    "TopologyMissing": "rabbitry.consumer.preflight",
    "DelayLayoutMismatch": "rabbitry.publisher.layout",
    "cancel_job": "rabbitry.consumer",
}

__all__ = [
    "AccessRefused",
    "App",
    "ApplyError",
    "ApplyResult",
    "AsyncPublisher",
    "AsyncWorker",
    "Backoff",
    "BrokerError",
    "CapabilityError",
    "ChannelClosed",
    "Codec",
    "ConfirmTimeout",
    "ConnectionLost",
    "ConnectionSettings",
    "DelayLayoutMismatch",
    "Delivery",
    "ExchangeNotFound",
    "IncomingMessage",
    "InvalidBody",
    "LockHeld",
    "LockLost",
    "Message",
    "Middleware",
    "MissingExtra",
    "Nacked",
    "NodeOrder",
    "NonRetryable",
    "Occurrence",
    "Plan",
    "PlanError",
    "PublishError",
    "Publisher",
    "PublisherClosed",
    "RabbitryError",
    "Spec",
    "SpecError",
    "SpecProblem",
    "TLSHandshakeError",
    "Topology",
    "TopologyMissing",
    "Unroutable",
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
