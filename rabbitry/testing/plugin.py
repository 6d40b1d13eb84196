"""pytest plugin (entry point ``pytest11``: ``rabbitry``): RabbitMQ brokers and vhosts as fixtures.

Fixtures:
    rabbitmq_broker          session: the tests' ``Broker`` (from RABBITMQ_URL or a container)
    rabbitmq_vhost           function: a fresh ``TestVhost`` on that broker, deleted afterwards
    rabbitmq_broker_factory  function: ``BrokerFactory`` that starts extra container brokers
    scripted_broker          function: an attached ``ScriptedBroker`` (no broker; no marker)

Tests using the first three get the ``broker`` marker, so ``pytest -m "not broker"`` runs the rest.
Under pytest-xdist every worker uses one container broker (``rabbitry.testing.shared``).
Disable the plugin with ``-p no:rabbitry``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from rabbitry.errors import BrokerError, BrokerUnavailable
from rabbitry.testing.broker import Broker
from rabbitry.testing.containers import BrokerContainer, broker_network, start_broker
from rabbitry.testing.providers import ProviderKind, choose_provider, provide_broker
from rabbitry.testing.shared import SharedBrokerPlace
from rabbitry.testing.vhosts import TestVhost, create_test_vhost, delete_vhost

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from rabbitry.testing.containers import BrokerOptions
    from rabbitry.testing.scripted import ScriptedBroker

BROKER_FIXTURES = frozenset({"rabbitmq_broker", "rabbitmq_vhost", "rabbitmq_broker_factory"})
MARKER = "broker: needs a real RabbitMQ broker (from RABBITMQ_URL or testcontainers)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_XdistController(), "rabbitry-xdist-controller")


class _XdistController:
    """The xdist controller's part: a meeting place for the workers' one container broker,
    made when the first worker starts, and the removal of that broker when the run ends."""

    def __init__(self) -> None:
        self._place: SharedBrokerPlace | None = None

    def pytest_configure_node(self, node: object) -> None:
        if self._place is None:
            self._place = SharedBrokerPlace.create()
        workerinput = getattr(node, "workerinput", None)
        if isinstance(workerinput, dict):
            workerinput.update(self._place.as_workerinput())

    def pytest_unconfigure(self) -> None:
        if self._place is not None:
            self._place.remove(os.environ)


def _shared_place(config: pytest.Config) -> SharedBrokerPlace | None:
    workerinput = getattr(config, "workerinput", None)
    if not isinstance(workerinput, dict):
        return None
    return SharedBrokerPlace.from_workerinput(workerinput)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.broker)


def pytest_report_header(config: pytest.Config) -> str:
    try:
        choice = choose_provider(os.environ)
    except BrokerError as exc:
        return f"rabbitry: {exc}"
    how = "forced by RABBITRY_TEST_BROKER" if choice.forced else "automatic"
    return f"rabbitry: test broker from {choice.kind.value} ({how})"


def _containers_forced() -> bool:
    try:
        choice = choose_provider(os.environ)
    except BrokerError:
        return False
    return choice.forced and choice.kind is ProviderKind.TESTCONTAINERS


@pytest.fixture(scope="session")
def rabbitmq_broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """The session's broker; tests are skipped (with what to do) when none can be had."""
    with contextlib.ExitStack() as stack:
        try:
            broker = stack.enter_context(provide_broker(shared=_shared_place(request.config)))
        except BrokerUnavailable as exc:
            pytest.skip(str(exc))
        except BrokerError as exc:
            # The message says it all; a traceback would repeat URLs, passwords included.
            pytest.fail(f"rabbitmq_broker: {exc}", pytrace=False)
        yield broker


@pytest.fixture
def rabbitmq_vhost(rabbitmq_broker: Broker) -> Iterator[TestVhost]:
    """A fresh vhost ``rabbitry-test-<8 hex>`` with full permissions; deleted after the test."""
    vhost = create_test_vhost(rabbitmq_broker)
    try:
        yield vhost
    finally:
        delete_vhost(rabbitmq_broker, vhost.name)


class BrokerFactory:
    """Starts extra container brokers (federation peers, cluster nodes) for one test.

    ``factory(**options)`` takes the options of ``start_broker``; ``factory.network()`` makes a
    network for brokers that must reach each other. Everything goes at teardown.
    """

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.brokers: list[BrokerContainer] = []

    def __call__(self, **options: Unpack[BrokerOptions]) -> BrokerContainer:
        try:
            handle = start_broker(**options)
        except BrokerUnavailable as exc:
            if _containers_forced():
                raise BrokerError(f"RABBITRY_TEST_BROKER=testcontainers, but {exc}") from exc
            pytest.skip(str(exc))
        self._stack.enter_context(handle)
        self.brokers.append(handle)
        return handle

    def network(self, name: str | None = None) -> str:
        """Create a container network (removed at teardown, after the brokers); its name."""
        try:
            return self._stack.enter_context(broker_network(name))
        except BrokerUnavailable as exc:
            if _containers_forced():
                raise BrokerError(f"RABBITRY_TEST_BROKER=testcontainers, but {exc}") from exc
            pytest.skip(str(exc))

    def close(self) -> None:
        self._stack.close()


@pytest.fixture
def rabbitmq_broker_factory() -> Iterator[BrokerFactory]:
    """Start extra brokers with ``rabbitmq_broker_factory(**start_broker_options)``."""
    with contextlib.closing(BrokerFactory()) as factory:
        yield factory


@pytest.fixture
def scripted_broker() -> Iterator[ScriptedBroker]:
    """An AMQP broker in this process for rabbitry's clients (``rabbitry.testing.scripted``):
    attached for the test, detached after it."""
    from rabbitry.testing.scripted import ScriptedBroker  # loads the AMQP layer: only when used

    with ScriptedBroker() as broker:
        yield broker
