"""The pure parts of the reconcile loop: which changes a pass makes, and how long it waits."""

from __future__ import annotations

import pytest

from rabbitry.provisioner.applier import ApplyOptions
from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.planner import Action, plan
from rabbitry.provisioner.reconcile import PassReport, ReconcileMetrics, allowed, backoff_delay
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import Queue, QueueType, Topology, Vhost

V = "v"


def topology(*queues: Queue) -> Topology:
    return Topology(name="s", vhosts=(Vhost(name=V, queues=queues),))


OBSERVED = topology(Queue(name="typed"), Queue(name="gone"))
RECORD = OwnershipRecord("s", {k: digest(r) for k, r in OBSERVED.resources().items()})
DESIRED = topology(Queue(name="typed", type=QueueType.QUORUM), Queue(name="new"))
PLAN = plan(DESIRED, BrokerState(topology=OBSERVED, record=RECORD))


def test_a_pass_makes_creations_and_reports_a_replace_and_a_prune_it_may_not_make() -> None:
    cut, refused = allowed(PLAN, ApplyOptions())
    assert [(c.action, c.key[-1]) for c in cut.changes] == [(Action.CREATE, "new")]
    assert ("queue", V, "typed") in cut.excluded
    assert any("queue v/typed" in r and "--allow-replace" in r for r in refused)
    assert any("queue v/gone" in r and "--prune" in r for r in refused)


def test_with_the_flags_a_pass_makes_them_all() -> None:
    cut, refused = allowed(PLAN, ApplyOptions(allow_replace=True, prune=True, force=True))
    assert refused == []
    assert {c.key[-1] for c in cut.changes} == {"new", "typed", "gone"}


def test_the_wait_doubles_after_each_failed_pass_up_to_the_bound() -> None:
    waits = [backoff_delay(1.0, failures, 5.0) for failures in range(6)]
    assert waits == [1.0, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff_delay(10.0, 3, 5.0) == 10.0  # never shorter than the interval


def test_metrics_say_drift_by_kind_refusals_and_the_last_success() -> None:
    metrics = ReconcileMetrics()
    metrics.record(PassReport(True, 1000.0, 0.25, {"queue": 3}, ("created x",), ("no",)))
    metrics.record(PassReport(False, 1010.0, 0.5, error="down"))
    text = metrics.text().decode()
    assert 'rabbitry_reconcile_drift{kind="queue"} 3.0' in text
    assert "rabbitry_reconcile_refused_changes 1.0" in text
    assert "rabbitry_reconcile_last_success_timestamp_seconds 1000.0" in text
    assert 'rabbitry_reconcile_passes_total{outcome="failed"} 1.0' in text
    assert "rabbitry_reconcile_duration_seconds 0.5" in text


def test_an_interval_must_be_positive() -> None:
    from rabbitry.provisioner.reconcile import ReconcileOptions

    with pytest.raises(ValueError, match="positive"):
        ReconcileOptions(interval=0)
