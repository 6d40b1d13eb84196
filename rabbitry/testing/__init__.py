"""Real RabbitMQ brokers for tests: providers, container brokers and the pytest plugin.

The pytest plugin (``rabbitry.testing.plugin``) loads by itself once rabbitry is installed and
offers the fixtures ``rabbitmq_broker``, ``rabbitmq_vhost`` and ``rabbitmq_broker_factory``.
Outside pytest, ``provide_broker()`` and ``start_broker()`` give the same brokers.

For handler tests without a broker, ``HandlerHarness`` (``rabbitry.testing.handlers``) runs an
``App``'s handlers in memory and reports what the worker would do with each message; it is
loaded on first use, so the plugin does not load the worker.

For client code without a broker, ``ScriptedBroker`` (``rabbitry.testing.scripted``) answers
rabbitry's publishers and workers in this process, frame by frame, with faults on demand; it is
loaded on first use too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rabbitry.errors import BrokerUnavailable, ContainerExited
from rabbitry.testing.broker import Broker, broker_from_urls, wait_until_ready
from rabbitry.testing.containers import BrokerContainer, BrokerOptions, broker_network, start_broker
from rabbitry.testing.engine import (
    LOCAL_TEST_IMAGE,
    OFFICIAL_TEST_IMAGE,
    ContainerEngine,
    find_engine,
)
from rabbitry.testing.providers import (
    ProviderChoice,
    ProviderKind,
    broker_from_env,
    choose_provider,
    provide_broker,
)
from rabbitry.testing.vhosts import TestVhost, create_test_vhost, delete_vhost, vhost_exists

if TYPE_CHECKING:
    from rabbitry.errors import NotModelled
    from rabbitry.testing.handlers import HandlerHarness, Outcome
    from rabbitry.testing.scripted import (
        FrameRecord,
        PublishAnswer,
        ScriptedBroker,
        ScriptedMessage,
        ScriptedQueue,
    )

_LAZY = {
    "HandlerHarness": "rabbitry.testing.handlers",
    "Outcome": "rabbitry.testing.handlers",
    "FrameRecord": "rabbitry.testing.scripted",
    "NotModelled": "rabbitry.errors",
    "PublishAnswer": "rabbitry.testing.scripted",
    "ScriptedBroker": "rabbitry.testing.scripted",
    "ScriptedMessage": "rabbitry.testing.scripted",
    "ScriptedQueue": "rabbitry.testing.scripted",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rabbitry.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "LOCAL_TEST_IMAGE",
    "OFFICIAL_TEST_IMAGE",
    "Broker",
    "BrokerContainer",
    "BrokerOptions",
    "BrokerUnavailable",
    "ContainerEngine",
    "ContainerExited",
    "FrameRecord",
    "HandlerHarness",
    "NotModelled",
    "Outcome",
    "ProviderChoice",
    "ProviderKind",
    "PublishAnswer",
    "ScriptedBroker",
    "ScriptedMessage",
    "ScriptedQueue",
    "TestVhost",
    "broker_from_env",
    "broker_from_urls",
    "broker_network",
    "choose_provider",
    "create_test_vhost",
    "delete_vhost",
    "find_engine",
    "provide_broker",
    "start_broker",
    "vhost_exists",
    "wait_until_ready",
]
