"""Exact counts come from the broker a plan reads: an AMQP URL reaching a broker of another
cluster than the management API's (two brokers on one host, told apart by port only) is refused
at the first count, named both ways. The second broker is the scripted AMQP broker; the
management side is the real one (its ``/api/overview`` cluster name)."""

from __future__ import annotations

import pytest

from rabbitry.errors import BrokerError
from rabbitry.management.endpoints import Endpoints
from rabbitry.provisioner.queue_counter import AmqpQueueCounter
from rabbitry.testing import ScriptedBroker
from tests.integration.conftest import Broker

pytestmark = pytest.mark.broker


def test_counts_from_another_cluster_than_the_management_api_are_refused(broker: Broker) -> None:
    with ScriptedBroker(server_properties={"cluster_name": "rabbit@other-broker"}) as other:
        other.declare_queue("jobs")
        endpoints = Endpoints(amqp_url=other.url, management_url=broker.management_url)
        with AmqpQueueCounter(endpoints) as counter, pytest.raises(BrokerError) as refused:
            counter(broker.vhost, "jobs")
    assert "rabbit@other-broker" in str(refused.value)
    assert "two brokers" in str(refused.value)
