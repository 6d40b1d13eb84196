"""``rabbitry reconcile`` on a real broker: drift made by hand is repaired within two passes,
what the flags do not allow is reported and not made, a broker that went away is waited for,
and the health and metrics endpoints answer while the loop runs."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from rabbitry.provisioner.reconcile import PassReport, ReconcileOptions, Reconciler
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

INTERVAL = 1.0
SPEC = one_vhost_spec("""
        queues:
          - {name: work}
        policies:
          - name: limits
            pattern: "^work$"
            apply_to: queues
            definition: {max-length: 100}
""")


def wait_for(what: str, condition: Callable[[], bool], within: float) -> float:
    """Seconds until ``condition`` holds, failing after ``within``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > within:
            pytest.fail(f"not within {within} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


@contextmanager
def reconciling(
    spec: Path, stack: str, vhost: str, management_url: str, amqp_url: str, **options: Any
) -> Iterator[tuple[Reconciler, list[PassReport]]]:
    reports: list[PassReport] = []
    reconciler = Reconciler(
        spec,
        ReconcileOptions(interval=INTERVAL, **options),
        url=amqp_url,
        management_url=management_url,
        variables={"vhost": vhost, "stack": stack},
        on_pass=reports.append,
    )
    loop = threading.Thread(target=reconciler.run, daemon=True)
    loop.start()
    try:
        yield reconciler, reports
    finally:
        reconciler.stop()
        loop.join(timeout=30)
        assert not loop.is_alive()


def run_against(broker: Broker, spec: Path, **options: Any) -> Any:
    return reconciling(
        spec, broker.stack, broker.vhost, broker.management_url, broker.amqp_url, **options
    )


def test_a_queue_deleted_by_hand_is_back_within_two_intervals(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    with run_against(broker, spec) as (_, reports):
        # the first pass ended (its report is in), not only made the queue: a delete while
        # that pass still checks what it made fails the pass, which is not what this tests
        wait_for("the first pass ends", lambda: bool(reports), 30)
        assert "work" in broker.queue_names()
        before = len(reports)  # passes started (and ended) before the delete
        broker.http.delete(f"/queues/{quote(broker.vhost, safe='')}/work").raise_for_status()
        assert "work" not in broker.queue_names()
        wait_for("the queue is back", lambda: "work" in broker.queue_names(), 30)
        wait_for("the repairing pass reports", lambda: repairs(reports[before:]), 30)
    # "Within two intervals" counted in the loop's own passes, not in wall-clock seconds (which
    # a loaded machine stretches): the pass in flight during the delete may have read the
    # queue list before it, so the one after it repairs; none later.
    first = repairs(reports[before:])[0]
    assert first <= 1, [r.to_json() for r in reports[before:]]
    assert all(r.ok for r in reports), [r.error for r in reports]
    # and the loop waits an interval between passes (it neither spins nor stalls; the upper
    # bound leaves room for a loaded machine)
    gaps = [b.started - (a.started + a.seconds) for a, b in pairwise(reports)]
    assert all(INTERVAL * 0.9 <= gap < INTERVAL * 10 for gap in gaps), gaps


def repairs(reports: list[PassReport]) -> list[int]:
    """Indexes of the passes that found the queue missing and made it."""
    return [i for i, r in enumerate(reports) if r.drift.get("queue") and r.applied]


def test_a_changed_policy_is_restored(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    path = f"/policies/{quote(broker.vhost, safe='')}/limits"

    def max_length() -> Any:
        found = broker.get(path)
        return found and found["definition"].get("max-length")

    with run_against(broker, spec):
        wait_for("the policy is made", lambda: max_length() == 100, 30)
        changed = {"pattern": "^work$", "apply-to": "queues", "definition": {"max-length": 5}}
        broker.http.put(path, json=changed).raise_for_status()
        assert max_length() == 5
        wait_for("the policy is restored", lambda: max_length() == 100, 10)


def test_a_change_that_needs_allow_replace_is_reported_not_made(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    with run_against(broker, spec) as (_, reports):
        wait_for("the queue is made", lambda: "work" in broker.queue_names(), 30)
        # the spec changes on disk: picked up by the next pass, no restart
        changed = SPEC.replace(
            "{name: work}", "{name: work, type: quorum}\n          - {name: later}"
        )
        broker.spec(changed, "next.yaml").replace(spec)  # atomic, as a ConfigMap update is
        wait_for("the new queue is made", lambda: "later" in broker.queue_names(), 10)
        wait_for("a pass reports the replace", lambda: any(r.refused for r in reports), 10)
    refused = next(r for r in reports if r.refused).refused
    assert any(
        f"queue {broker.vhost}/work" in line and "--allow-replace" in line for line in refused
    )
    kind = broker.get(f"/queues/{quote(broker.vhost, safe='')}/work")["type"]
    assert kind == "classic"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_broker_stopped_and_started_again_is_waited_for_and_reconciled(
    rabbitmq_broker_factory: Any, tmp_path: Path
) -> None:
    node = rabbitmq_broker_factory(amqp_port=free_port(), management_port=free_port())
    b = node.broker
    management_url, amqp_url = b.management_url_with_credentials, b.amqp_url()
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "version: 1\nname: down\nvhosts:\n  - name: v\n    queues:\n      - {name: work}\n"
    )
    http = httpx.Client(base_url=b.management_url + "/api", auth=b.auth)

    def has_queue() -> bool:
        try:
            return http.get("/queues/v/work").status_code == 200
        except httpx.HTTPError:
            return False

    with reconciling(spec, "down", "v", management_url, amqp_url, max_backoff=2.0) as (
        reconciler,
        reports,
    ):
        wait_for("the first pass makes the queue", has_queue, 60)
        node.stop()
        wait_for("a pass fails while the broker is down", lambda: not reports[-1].ok, 30)
        again = node.start()
        assert (again.amqp_port, again.management_port) == (b.amqp_port, b.management_port)
        # the queue is durable: delete it once the broker is back, and the loop repairs it
        wait_for("the broker answers", lambda: has_queue(), 60)
        http.delete("/queues/v/work").raise_for_status()
        wait_for("the queue is back", has_queue, 30)
        wait_for("a good pass", lambda: reconciler.last is not None and reconciler.last.ok, 30)
    assert any(not r.ok for r in reports)


def test_the_health_endpoint_answers_while_the_loop_runs(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    env = {**os.environ, "RABBITRY_URL": "", "RABBITRY_MANAGEMENT_URL": ""}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from rabbitry.cli import main; main()",
            "reconcile",
            str(spec),
            "--var",
            f"vhost={broker.vhost}",
            "--var",
            f"stack={broker.stack}",
            "--management-url",
            broker.management_url,
            "--url",
            broker.amqp_url,
            "--interval",
            str(INTERVAL),
            "--listen",
            "127.0.0.1:0",
        ],
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stderr is not None
        seen = []
        served = None
        while served is None and len(seen) < 20:  # warnings of the spec may come first
            seen.append(process.stderr.readline())
            served = re.search(r"serving (http://\S+?)/ ", seen[-1])
        assert served, seen
        base = served.group(1)

        def ready() -> bool:
            return httpx.get(f"{base}/readyz").status_code == 200

        wait_for("readiness", ready, 30)
        assert httpx.get(f"{base}/healthz").json() == {"running": True}
        metrics = httpx.get(f"{base}/metrics").text
        assert "rabbitry_reconcile_last_success_timestamp_seconds" in metrics
        assert 'rabbitry_reconcile_passes_total{outcome="ok"}' in metrics
        assert httpx.post(f"{base}/reconcile").status_code == 202
        assert "work" in broker.queue_names()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        logs = process.stderr.read()
        assert '"logger": "rabbitry.reconcile"' in logs
        password = broker.management_url.split("@")[0].rsplit(":", 1)[-1]
        assert f":{password}@" not in logs  # URLs in the logs are masked
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_lock_is_taken_only_to_apply_and_a_leftover_of_the_loop_s_own_at_once(
    broker: Broker,
) -> None:
    from rabbitry.management.client import ManagementClient
    from rabbitry.provisioner.lock import StackLock

    spec = broker.spec(SPEC)
    reconciler = Reconciler(
        spec,
        ReconcileOptions(interval=INTERVAL),
        url=broker.amqp_url,
        management_url=broker.management_url,
        variables={"vhost": broker.vhost, "stack": broker.stack},
    )
    with ManagementClient(broker.management_url) as client:
        other = StackLock(client, broker.stack, settle=0.05)
        with other.held():  # another apply of the stack runs: the pass reports it, changes nothing
            report = reconciler.run_once()
        assert not report.ok and "is being applied by" in report.error, report
        assert "work" not in broker.queue_names()
        assert reconciler.run_once().ok  # the lock is free between passes
        assert "work" in broker.queue_names()

        # a pass that lost the broker mid-apply could not let go of its lock: the next pass
        # takes it again at once (its own token), not after the lock's ttl
        leftover = StackLock(client, broker.stack, settle=0.05)
        leftover.token = reconciler._lock_token
        leftover.acquire()
        broker.http.delete(f"/queues/{quote(broker.vhost, safe='')}/work").raise_for_status()
        started = time.monotonic()
        report = reconciler.run_once()
        assert report.ok, report
        assert time.monotonic() - started < 10
        assert "work" in broker.queue_names()
        assert client.global_parameter(f"rabbitry.lock.{broker.stack}") is None


def test_a_protected_queue_is_not_replaced_even_with_allow_replace(broker: Broker) -> None:
    guarded = SPEC.replace("{name: work}", "{name: work, protect: true}")
    spec = broker.spec(guarded)
    reconciler = Reconciler(
        spec,
        ReconcileOptions(interval=INTERVAL, allow_replace=True, prune=True, force=True),
        url=broker.amqp_url,
        management_url=broker.management_url,
        variables={"vhost": broker.vhost, "stack": broker.stack},
    )
    assert reconciler.run_once().ok
    broker.publish("work", 2)
    broker.spec(guarded.replace("protect: true", "protect: true, type: quorum"))
    report = reconciler.run_once()
    assert report.ok, report
    assert any(f"queue {broker.vhost}/work is protected" in line for line in report.refused)
    assert broker.get(f"/queues/{quote(broker.vhost, safe='')}/work")["type"] == "classic"
    assert broker.count("work") == 2
