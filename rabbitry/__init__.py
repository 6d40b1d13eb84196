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
    |   +-- TLSHandshakeError   a certificate failed to verify: retrying cannot help
    |   +-- ConnectionLost      (also a PublishError) no connection within give_up_after
    +-- PlanError          the plan needs a replace or prune the options do not allow
    +-- ApplyError         applying stopped half-way (``done`` says what was changed)
    +-- PublishError       a message was not confirmed
    |   +-- Nacked, Unroutable, ConfirmTimeout, ChannelClosed (ExchangeNotFound,
    |       AccessRefused), PublisherClosed
    +-- NonRetryable       raised by a handler: the worker parks the message at once
        +-- InvalidBody         the body does not validate into the handler's declared type
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from rabbitry import lazy
from rabbitry.errors import (
    ApplyError,
    BrokerError,
    CapabilityError,
    ConfirmTimeout,
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
    from rabbitry.provisioner.applier import ApplyResult
    from rabbitry.provisioner.planner import Plan
    from rabbitry.provisioner.stack import apply, plan, stacks
    from rabbitry.publisher import AsyncPublisher, Publisher, PublisherClosed
    from rabbitry.topology import Spec, Topology, check_spec, expand, load_spec, load_topology

try:
    __version__ = version("rabbitry")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0.0.0"

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
    "Delivery",
    "ExchangeNotFound",
    "IncomingMessage",
    "InvalidBody",
    "Message",
    "Middleware",
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


__getattr__, __dir__ = lazy.names(__name__, _LAZY, __all__)
