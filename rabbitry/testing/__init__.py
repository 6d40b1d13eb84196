"""Real RabbitMQ brokers for tests: providers, container brokers and the pytest plugin.

The pytest plugin (``rabbitry.testing.plugin``) loads by itself once rabbitry is installed and
offers the fixtures ``rabbitmq_broker``, ``rabbitmq_vhost`` and ``rabbitmq_broker_factory``.
Outside pytest, ``provide_broker()`` and ``start_broker()`` give the same brokers.
"""

from __future__ import annotations

from rabbitry.testing.broker import Broker, BrokerUnavailable, broker_from_urls, wait_until_ready
from rabbitry.testing.containers import (
    BrokerContainer,
    BrokerOptions,
    broker_network,
    start_broker,
)
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

__all__ = [
    "LOCAL_TEST_IMAGE",
    "OFFICIAL_TEST_IMAGE",
    "Broker",
    "BrokerContainer",
    "BrokerOptions",
    "BrokerUnavailable",
    "ContainerEngine",
    "ProviderChoice",
    "ProviderKind",
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
