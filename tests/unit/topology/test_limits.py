"""Vhost and user limits: spec keys as the broker names them, planned in place (no broker)."""

from __future__ import annotations

from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.planner import Action, plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology import expand
from rabbitry.topology.document import spec_document
from rabbitry.topology.primitives import Topology, User, Vhost

from .conftest import load, one_problem

SPEC = """
version: 1
name: shop
users:
  - name: app
    limits: {max-connections: 10, max-channels: 50}
vhosts:
  - name: shop
    limits: {max-queues: 200}
"""


def test_limits_expand_by_the_brokers_names_and_export_back() -> None:
    topology = expand(load(SPEC))
    assert topology.vhosts[0].limits == {"max-queues": 200}
    assert topology.users[0].limits == {"max-connections": 10, "max-channels": 50}
    document = spec_document(topology)
    assert document["vhosts"][0]["limits"] == {"max-queues": 200}
    assert document["users"][0]["limits"] == {"max-connections": 10, "max-channels": 50}


def test_a_limit_is_a_number_from_minus_one_by_its_brokers_name() -> None:
    bad = one_problem(SPEC.replace("max-queues: 200", "max-queues: -2"))
    assert bad.path == "vhosts[0].limits.max-queues" and bad.line == 9
    unknown = one_problem(SPEC.replace("max-queues: 200", "max_queues: 200"))
    assert "max_queues" in unknown.message and "max-queues" in unknown.message


def test_limits_change_in_place_and_objects_without_keep_their_recorded_digest() -> None:
    desired = expand(load(SPEC))
    observed = Topology(name="shop", vhosts=(Vhost(name="shop"),), users=(User(name="app"),))
    owned = {k: digest(r) for k, r in observed.resources().items()}
    changes = {
        c.key: c
        for c in plan(desired, BrokerState(observed, OwnershipRecord("shop", owned))).changes
    }
    vhost = changes[("vhost", "shop")]
    assert vhost.action is Action.UPDATE
    assert vhost.reasons == ("limits.max-queues: (unset) -> 200",)
    assert changes[("user", "", "app")].action is Action.UPDATE
    # settings of objects without limits are as before limits existed: no drift on upgrade
    assert Vhost(name="shop").settings() == {"description": "", "tags": []}
    assert User(name="app").settings() == {"tags": []}
