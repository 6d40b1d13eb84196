"""Each refusal of a plan is a Diagnostic addressed to the object it is about, and the
PlanError that carries them reads as it always did (no broker)."""

from __future__ import annotations

import pytest

from rabbitry import Address, CapabilityError, Diagnostic, PlanError, Refusal
from rabbitry.provisioner.apply_options import ApplyOptions
from rabbitry.provisioner.broker_exchanges import missing_exchanges
from rabbitry.provisioner.capabilities import BrokerCapabilities, CapabilityReport, requirements
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.plans import Action, Change, Plan
from rabbitry.provisioner.reconcile import PassReport, allowed
from rabbitry.provisioner.refusals import refusals, refuse
from rabbitry.provisioner.relayout import DelayRelayout
from rabbitry.provisioner.shovel_access import unreachable_shovels
from rabbitry.topology.primitives import Binding, Parameter, Queue, Topology, Vhost

QUEUE = ("queue", "v", "q")
EXCHANGE = ("exchange", "v", "e")
ALLOWED = ApplyOptions(prune=True, allow_replace=True)


def plan_of(*changes: Change, relayouts: tuple[DelayRelayout, ...] = ()) -> Plan:
    return Plan(stack="s", changes=changes, record=OwnershipRecord("s"), relayouts=relayouts)


OPS = ("user", "", "ops")
# summary -> (the refused change, the options, the user connected as); each is addressed to
# the change's object
CASES = {
    "protected (protect: true)": (Change(Action.DELETE, QUEUE, protected=True), ALLOWED, None),
    "owned by another stack": (Change(Action.UPDATE, EXCHANGE, owners=("billing",)), ALLOWED),
    "a replace not allowed": (Change(Action.REPLACE, QUEUE), ApplyOptions()),
    "a migration would cancel consumers": (Change(Action.REPLACE, QUEUE, consumers=2), ALLOWED),
    "a prune of a queue that holds messages": (Change(Action.DELETE, QUEUE, messages=3), ALLOWED),
    "messages not counted": (Change(Action.DELETE, QUEUE, count_note="AMQP refused"), ALLOWED),
    "the apply would lock out the user it is connected as": (
        Change(Action.DELETE, OPS),
        ALLOWED,
        "ops",
    ),
}
ADDRESSES = {
    QUEUE: Address("queue", "v", "q"),
    EXCHANGE: Address("exchange", "v", "e"),
    OPS: Address("user", None, "ops"),
}


@pytest.mark.parametrize("summary", list(CASES))
def test_each_refusal_is_a_diagnostic_addressed_to_its_object(summary: str) -> None:
    change, options, *connected = CASES[summary]
    (refused,) = refusals(plan_of(change), options, *connected)
    assert isinstance(refused, Diagnostic)
    assert (refused.severity, refused.summary) == ("error", summary)
    assert refused.address == ADDRESSES[change.key]
    assert str(refused) == refused.detail and refused.detail


def test_a_relayout_is_addressed_to_its_delay_once_per_reason() -> None:
    relayout = DelayRelayout(
        vhost="v",
        delay="later",
        layout="binary-1000ms-3",
        previous=("binary-1000ms-2",),
        held=(("later.01", 2),),
        needs_prune=True,
    )
    found = refusals(plan_of(relayouts=(relayout,)), ApplyOptions())
    assert [d.summary for d in found] == [
        "a delay relayout without --prune",
        "a delay relayout while messages may wait",
    ]
    assert {d.address for d in found} == {Address("delay", "v", "later")}


def test_a_shovel_and_a_missing_broker_exchange_are_addressed() -> None:
    shovel = Change(
        Action.CREATE,
        ("parameter", "a", "shovel", "sh"),
        desired=Parameter(component="shovel", name="sh", value={"dest-uri": "amqp:///b"}),
    )
    (unreachable,) = unreachable_shovels(plan_of(shovel), "ops", ["a"])
    assert unreachable.address == Address("parameter", "a", "shovel/sh")
    binding = Change(
        Action.CREATE,
        ("binding", "v", "amq.rabbitmq.log", "queue", "q", "", "{}"),
        desired=Binding(source="amq.rabbitmq.log", destination="q"),
    )
    (lacking,) = missing_exchanges(plan_of(binding), lambda _vhost, _name: False)
    assert lacking.address == Address("exchange", "v", "amq.rabbitmq.log")


def test_the_plan_error_carries_them_and_reads_as_before() -> None:
    changes = [CASES[c][0] for c in ("protected (protect: true)", "owned by another stack")]
    the_plan = plan_of(*changes)
    with pytest.raises(PlanError) as raised:
        refuse(the_plan, ALLOWED)
    diagnostics = raised.value.diagnostics
    assert isinstance(diagnostics, tuple) and len(diagnostics) == 2
    assert str(raised.value) == "nothing was applied:\n  " + "\n  ".join(
        str(d) for d in refusals(the_plan, ALLOWED)
    )
    assert isinstance(raised.value, Refusal)


def test_an_error_raised_with_a_message_alone_has_one_diagnostic_of_it() -> None:
    error = CapabilityError("the broker lacks rabbitmq_shovel")
    assert error.diagnostics == (Diagnostic(summary="the broker lacks rabbitmq_shovel"),)
    assert Address.of_key(("binding", "v", "x", "queue", "q", "rk", "{}")) == Address(
        "binding", "v", "x -> queue q [rk]"
    )


def test_a_version_refusal_is_addressed_to_the_queue_it_refuses() -> None:
    queue = Queue(name="lazy", arguments={"x-queue-version": 1})
    needs = requirements(Topology(name="s", vhosts=(Vhost(name="v", queues=(queue,)),)))
    report = CapabilityReport(BrokerCapabilities(version=(4, 3, 0)), needs, ["no plugin x"])
    (refused,) = report.diagnosed(lambda _key: True)
    assert refused.address == Address("queue", "v", "lazy")
    assert [str(refused)] == report.refusals(lambda _key: True)
    (lacking,) = report.lacking()
    assert str(lacking) == "no plugin x" and lacking.address is None


def test_a_reconcile_pass_reports_what_it_did_not_make_as_diagnostics() -> None:
    changes = (Change(Action.REPLACE, QUEUE), Change(Action.DELETE, ("queue", "v", "gone")))
    _, not_made = allowed(plan_of(*changes), ApplyOptions())
    assert [(d.summary, d.address) for d in not_made] == [
        ("a replace not allowed", Address("queue", "v", "q")),
        ("a deletion without --prune", Address("queue", "v", "gone")),
    ]
    shown = PassReport(True, 0.0, 0.0, refused=tuple(not_made)).to_json()
    assert shown["refused"] == [str(d) for d in not_made]
    assert [d["address"]["name"] for d in shown["diagnostics"]] == ["q", "gone"]
