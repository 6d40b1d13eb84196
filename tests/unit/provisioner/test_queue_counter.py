"""Exact queue counts over AMQP (``AmqpQueueCounter``) against the scripted broker: the counts
come from the broker the plan reads, and a connection that died while idle is opened again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rabbitry.errors import BrokerError
from rabbitry.management.endpoints import Endpoints, check_same_broker
from rabbitry.provisioner.queue_counter import AmqpQueueCounter
from rabbitry.testing import ScriptedBroker

OTHER_MANAGEMENT = "http://admin:s3cret@127.0.0.1:45672"


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with ScriptedBroker(server_properties={"cluster_name": "rabbit@second"}) as scripted:
        scripted.declare_queue("work")
        scripted.put("work", b"one")
        scripted.put("work", b"two")
        yield scripted


def counter_for(broker: ScriptedBroker, management_cluster: str | None) -> AmqpQueueCounter:
    endpoints = Endpoints(amqp_url=broker.url, management_url=OTHER_MANAGEMENT)
    return AmqpQueueCounter(endpoints, management_cluster=lambda: management_cluster)


def test_a_count_from_another_cluster_than_the_management_api_is_refused(
    broker: ScriptedBroker,
) -> None:
    with (
        counter_for(broker, "rabbit@first") as counter,
        pytest.raises(BrokerError, match="two brokers") as refused,
    ):
        counter("/", "work")
    message = str(refused.value)
    assert "rabbit@second" in message and "rabbit@first" in message
    assert "127.0.0.1:45672" in message and broker.host in message
    assert "s3cret" not in message
    assert "--management-url" in message


def test_a_count_from_the_cluster_the_management_api_names_goes_on(
    broker: ScriptedBroker,
) -> None:
    with counter_for(broker, "rabbit@second") as counter:
        assert counter("/", "work") == (2, 0)


def test_an_unknown_cluster_name_on_either_side_is_not_compared(broker: ScriptedBroker) -> None:
    with counter_for(broker, None) as counter:
        assert counter("/", "work") == (2, 0)
    endpoints = Endpoints(amqp_url=broker.url, management_url=OTHER_MANAGEMENT)
    check_same_broker(endpoints, None, "rabbit@first")
    check_same_broker(endpoints, "", "rabbit@first")


def test_a_connection_that_died_while_idle_is_opened_again_for_the_next_count(
    broker: ScriptedBroker,
) -> None:
    with counter_for(broker, "rabbit@second") as counter:
        assert counter("/", "work") == (2, 0)
        broker.close_connections()  # the kept connection dies between two counts
        broker.put("work", b"three")
        assert counter("/", "work") == (3, 0)
    assert broker.connections_opened == 2


def test_a_count_that_loses_its_fresh_connection_too_says_so(broker: ScriptedBroker) -> None:
    with counter_for(broker, "rabbit@second") as counter:
        assert counter("/", "work") == (2, 0)
        broker.close_connections()
        # the fresh connection's passive declare (after start-ok, tune-ok, open, channel.open)
        broker.drop_after(5)
        with pytest.raises(BrokerError, match="lost the AMQP connection counting //work twice"):
            counter("/", "work")
