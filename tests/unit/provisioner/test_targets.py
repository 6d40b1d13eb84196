"""``--target``: a plan cut down to some objects and what they need, recording nothing of the
rest (no broker)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from rabbitry.errors import PlanError
from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.planner import managed_after, parse_target, plan, targeted
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import (
    Binding,
    Exchange,
    ExchangeType,
    Permission,
    Queue,
    Topology,
    User,
    Vhost,
)

V = "shop"
ORDERS = Exchange(name="orders", type=ExchangeType.TOPIC)
AUDIT = Exchange(name="audit", type=ExchangeType.FANOUT)
WORK = Queue(name="work")
LOG = Queue(name="log")
BIND = Binding(source="orders", destination="work", routing_key="order.*")
TAP = Binding(source="audit", destination="log")
APP = User(name="app", password=SecretStr("pw"))


def desired(*extra: object) -> Topology:
    vhost = Vhost(
        name=V,
        exchanges=(ORDERS, AUDIT),
        queues=(WORK, LOG),
        bindings=(BIND, TAP),
        permissions=(Permission(user="app"),),
    )
    return Topology(name="shop", vhosts=(vhost,), users=(APP,))


def titles(p: object) -> set[str]:
    return {c.title for c in p.changes}  # type: ignore[attr-defined]


EMPTY = BrokerState(topology=Topology(name="shop"), record=OwnershipRecord("shop"))


def test_a_target_brings_what_it_needs_and_nothing_else() -> None:
    full = plan(desired(), EMPTY)
    assert titles(targeted(full, ["queue/shop/work"])) == {"vhost shop", "queue shop/work"}
    assert titles(targeted(full, ["binding/shop/orders"])) == {
        "vhost shop",
        "exchange shop/orders",
        "queue shop/work",
        "binding shop/orders -> queue work [order.*]",
    }
    assert titles(targeted(full, ["permission/shop/app"])) == {
        "vhost shop",
        "user app",
        "permission shop/app",
    }
    assert titles(targeted(full, ["user/app", "queue/shop/log"])) == {
        "vhost shop",
        "user app",
        "queue shop/log",
    }
    assert "queue shop/log" not in titles(targeted(full, ["queue/shop/work"]))


def test_a_replaced_exchange_is_declared_again_with_its_bindings() -> None:
    observed = (
        desired()
        .vhosts[0]
        .model_copy(
            update={"exchanges": (Exchange(name="orders", type=ExchangeType.DIRECT), AUDIT)}
        )
    )
    state = BrokerState(
        topology=Topology(name="shop", vhosts=(observed,), users=(APP,)),
        record=OwnershipRecord("shop"),
    )
    cut = targeted(plan(desired(), state), ["exchange/shop/orders"])
    assert {c.title for c in cut.changes if c.kind == "binding"} == {
        "binding shop/orders -> queue work [order.*]"
    }


def test_what_a_target_leaves_out_is_not_recorded_as_applied() -> None:
    full = plan(desired(), EMPTY)
    cut = targeted(full, ["queue/shop/work"])
    assert ("queue", V, "work") in cut.desired_digests
    assert ("queue", V, "log") not in cut.desired_digests
    recorded = {("queue", V, "log"): "old-digest"}
    cut = targeted(
        plan(
            desired(),
            BrokerState(topology=Topology(name="shop"), record=OwnershipRecord("shop", recorded)),
        ),
        ["queue/shop/work"],
    )
    after = managed_after(cut, deleted=(), still_present=recorded)
    assert after[("queue", V, "log")] == "old-digest"
    assert after[("queue", V, "work")] == digest(WORK)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("queue/shop/wrok", "names nothing"),
        ("queues/shop/work", "is not KIND/VHOST/NAME"),
        ("queue", "is not KIND/VHOST/NAME"),
        ("queue//work", "is not KIND/VHOST/NAME"),
    ],
)
def test_a_target_that_names_nothing_is_an_error(text: str, error: str) -> None:
    with pytest.raises(PlanError, match=error):
        targeted(plan(desired(), EMPTY), [text])


def test_targets_read_like_the_plan_names_them() -> None:
    assert parse_target("user/app") == ("user", "", "app")
    assert parse_target("vhost/shop") == ("vhost", "shop")
    assert parse_target("queue/shop/a%2Fb") == ("queue", "shop", "a/b")
