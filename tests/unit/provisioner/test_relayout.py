"""Delay relayouts in the plan: found, counted, shown, and refused without the flag (no broker)."""

from __future__ import annotations

from rabbitry.provisioner.applier import ApplyOptions, refusals
from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.planfile import BrokerIdentity, SavedPlan
from rabbitry.provisioner.planner import Plan, plan, targeted
from rabbitry.provisioner.relayout import DelayRelayout
from rabbitry.provisioner.state import BrokerState, QueueStats
from rabbitry.topology import expand, load_spec_text
from rabbitry.topology.primitives import Exchange, Topology, Vhost

SPEC = """
version: 1
name: shop
vhosts:
  - name: shop
    queues: [{{name: work, type: quorum}}]
    delays:
      - name: later
        unit: 1s
        max: {max}
        lanes: {lanes}
        targets: [{{queue: work}}]
"""


def topology(max_delay: str = "30d", lanes: int = 1) -> Topology:
    text = SPEC.format(max=max_delay, lanes=lanes)
    return expand(load_spec_text(text, "spec.yaml", environ={}))


def applied(
    observed: Topology, counts: dict[str, int] | None = None, source: str = "amqp"
) -> BrokerState:
    """The broker after an apply of ``observed``, its level queues holding ``counts``."""
    record = OwnershipRecord("shop", {k: digest(r) for k, r in observed.resources().items()})
    stats = {
        ("queue", "shop", q.name): QueueStats((counts or {}).get(q.name, 0), 0, source=source)
        for q in observed.vhosts[0].queues
    }
    return BrokerState(topology=observed, record=record, queue_stats=stats)


def unmarked(t: Topology) -> Topology:
    """``t`` as an older rabbitry applied it: levels without a layout mark."""
    vhost = t.vhosts[0]
    kept = tuple(e for e in vhost.exchanges if ".layout." not in e.name)
    bound = tuple(b for b in vhost.bindings if ".layout." not in b.source)
    older = vhost.model_copy(update={"exchanges": kept, "bindings": bound})
    return t.model_copy(update={"vhosts": (older,)})


def test_the_levels_are_marked_with_their_layout() -> None:
    names = {e.name: e for e in topology().vhosts[0].exchanges}
    mark = names["later.layout.binary-1000ms-22"]
    assert str(mark.type) == "topic"  # delayed messages enter through it
    entries = [b for b in topology().vhosts[0].bindings if b.source == mark.name]
    assert len(entries) == 22 + 1  # one per level, and no delay straight to delivery
    assert "later.layout.binary-1000ms-23" in {e.name for e in topology("60d").vhosts[0].exchanges}


def test_a_longer_max_lays_the_levels_out_anew_and_counts_what_waits_in_them() -> None:
    p = plan(topology("60d"), applied(topology("30d"), {"later.03": 2, "later.10": 1}))
    [relayout] = p.relayouts
    assert relayout == DelayRelayout(
        vhost="shop",
        delay="later",
        layout="binary-1000ms-23",
        previous=("binary-1000ms-22",),
        held=(("later.03", 2), ("later.10", 1)),
        needs_prune=True,
    )
    assert relayout.messages == 3
    [warning] = [w for w in p.warnings if "laid out anew" in w]
    assert "(binary-1000ms-22 -> binary-1000ms-23) while 3 message(s) wait" in warning
    assert "later.03: 2, later.10: 1" in warning and "--allow-delay-relayout" in warning
    assert p.to_json()["delay_relayouts"][0]["messages"] == 3


def test_fewer_lanes_lay_the_levels_out_anew_and_count_what_waits_in_every_lane() -> None:
    p = plan(topology(lanes=1), applied(topology(lanes=3), {"later.03.2": 2, "later.10.0": 1}))
    [relayout] = p.relayouts
    assert (relayout.layout, relayout.previous) == (
        "binary-1000ms-22",
        ("binary-1000ms-22-3lanes",),
    )
    assert relayout.held == (("later.03.2", 2), ("later.10.0", 1))


def test_apply_refuses_a_relayout_while_messages_wait_unless_allowed() -> None:
    p = plan(topology("60d"), applied(topology("30d"), {"later.03": 2}))
    refused = refusals(p, ApplyOptions(prune=True))
    assert len(refused) == 1 and "2 message(s) wait" in refused[0]
    assert refusals(p, ApplyOptions(prune=True, allow_delay_relayout=True)) == []


def test_apply_refuses_a_relayout_without_prune_even_with_empty_levels() -> None:
    p = plan(topology("60d"), applied(topology("30d")))
    [relayout] = p.relayouts
    assert relayout.messages == 0 and not relayout.at_stake
    assert "its level queues are empty (counted exactly)" in relayout.describe()
    [refused] = refusals(p, ApplyOptions(allow_delay_relayout=True))
    assert "apply with --prune" in refused
    assert refusals(p, ApplyOptions(prune=True)) == []


def test_counts_that_are_not_exact_are_refused_as_if_messages_waited() -> None:
    p = plan(topology("60d"), applied(topology("30d"), source="statistics"))
    [relayout] = p.relayouts
    assert relayout.at_stake and relayout.uncounted
    [refused] = refusals(p, ApplyOptions(prune=True))
    assert "could not be counted exactly" in refused


def test_the_same_layout_or_a_first_declaration_is_no_relayout() -> None:
    assert plan(topology("30d"), applied(topology("30d"), {"later.03": 2})).relayouts == ()
    # a longer max within the same levels keeps the routing keys
    assert plan(topology("31d"), applied(topology("30d"), {"later.03": 2})).relayouts == ()
    empty = BrokerState(topology=Topology(name="shop"), record=OwnershipRecord("shop", {}))
    assert plan(topology("60d"), empty).relayouts == ()


def test_levels_an_older_rabbitry_made_get_their_mark_without_a_relayout() -> None:
    p = plan(topology("30d"), applied(unmarked(topology("30d")), {"later.03": 2}))
    assert p.relayouts == ()
    mark = "later.layout.binary-1000ms-22"
    assert [c.key[:3] for c in p.changes] == [("exchange", "shop", mark)] + [
        ("binding", "shop", mark)
    ] * 23
    # unmarked levels laid out anew are a relayout from an unknown layout
    [relayout] = plan(
        topology("60d"), applied(unmarked(topology("30d")), {"later.03": 2})
    ).relayouts
    assert (
        relayout.previous == () and "(unmarked levels -> binary-1000ms-23)" in relayout.describe()
    )


def test_a_level_binding_put_back_after_a_hand_deletion_is_no_relayout() -> None:
    t = topology("30d")
    vhost = t.vhosts[0]
    kept = tuple(b for b in vhost.bindings if b.source != "later.03")
    assert len(kept) == len(vhost.bindings) - 2  # its queue's and its skip binding
    cut = vhost.model_copy(update={"bindings": kept})
    observed = t.model_copy(update={"vhosts": (cut,)})
    state = applied(observed, {"later.03": 2})
    record = OwnershipRecord("shop", {k: digest(r) for k, r in t.resources().items()})
    p = plan(t, BrokerState(topology=observed, record=record, queue_stats=state.queue_stats))
    assert [c.drift for c in p.changes] == [True, True] and p.relayouts == ()


def test_a_saved_plan_keeps_its_relayouts_and_its_refusal() -> None:
    p = plan(topology("60d"), applied(topology("30d"), {"later.03": 2}))
    saved = SavedPlan.of(
        p,
        BrokerIdentity("cluster-id", "rabbit@node", ("http://broker:15672",)),
        "http://broker:15672",
    )
    again = SavedPlan.from_json(saved.to_json(), "plan.json").plan
    assert isinstance(again, Plan) and again.relayouts == p.relayouts
    assert refusals(again, ApplyOptions(prune=True))


def test_other_vhosts_and_exchanges_that_only_look_like_marks_are_left_alone() -> None:
    other = Vhost(name="other", exchanges=(Exchange(name="later.layout.binary-1ms-1"),))
    desired = topology("60d").model_copy(update={"vhosts": (*topology("60d").vhosts, other)})
    observed = applied(topology("30d"), {"later.03": 2})
    [relayout] = plan(desired, observed).relayouts
    assert relayout.vhost == "shop"


def test_a_target_that_leaves_the_levels_alone_leaves_the_relayout_out() -> None:
    p = plan(topology("60d"), applied(topology("30d"), {"later.03": 2}))
    assert targeted(p, ["queue/shop/later.22"]).relayouts == p.relayouts  # the new level
    assert targeted(p, ["queue/shop/work"]).relayouts == ()
