"""Hand-made topologies and broker states the planner's and the plan file's tests share."""

from __future__ import annotations

from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import Binding, Exchange, ExchangeType, Queue, QueueType, Topology

V = "shop"
WORK = Queue(name="work", type=QueueType.QUORUM, arguments={"x-delivery-limit": 5})
ORDERS = Exchange(name="orders", type=ExchangeType.TOPIC)
BIND = Binding(source="orders", destination="work", routing_key="order.*")


def state(observed: Topology, managed: dict | None = None, **kw: object) -> BrokerState:
    """The broker as observed, with ``managed`` (key -> digest) as its ownership record."""
    record = OwnershipRecord("shop", managed or {})
    return BrokerState(topology=observed, record=record, **kw)  # type: ignore[arg-type]


def owned(t: Topology) -> dict:
    """An ownership record that owns every resource of ``t`` as it is."""
    return {k: digest(r) for k, r in t.resources().items()}
