"""An export of every vhost lists them first and reads them one by one: a vhost deleted in
between is left out whole (never half of it) with a warning naming it, and the export exits 0.

The deletion is real, on the shared broker, at a chosen moment of the export: a hook on the
management client deletes the vhost just before one of its reads is sent (that read gets the
broker's real 404) or just after its last read answered (its objects were read whole, but it
is gone by the time they would be written)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml

from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.exporter import export_topology
from rabbitry.testing import Broker as RabbitBroker
from rabbitry.testing.vhosts import TestVhost, create_test_vhost, delete_vhost

from .conftest import Broker

pytestmark = pytest.mark.broker

MOMENTS = {
    # a listing of its objects is the vhost's first read: it answers 404
    "before its objects are read": lambda victim: ("before", f"/queues/{q(victim)}"),
    # its topic permissions are its last read: everything of it was read whole
    "after its last read": lambda victim: ("after", f"/vhosts/{q(victim)}/topic-permissions"),
}


@pytest.fixture
def victim(rabbitmq_broker: RabbitBroker, broker: Broker) -> Iterator[TestVhost]:
    """A second vhost of the test's own, with objects, that the export sees deleted."""
    vhost = create_test_vhost(rabbitmq_broker)
    v = q(vhost.name)
    broker.http.put(f"/exchanges/{v}/doomed.ex", json={"type": "topic"}).raise_for_status()
    broker.http.put(f"/queues/{v}/doomed.q", json={"durable": True}).raise_for_status()
    broker.http.post(
        f"/bindings/{v}/e/doomed.ex/q/doomed.q", json={"routing_key": "#"}
    ).raise_for_status()
    try:
        yield vhost
    finally:
        delete_vhost(vhost.broker, vhost.name)  # gone already: nothing to do


def deleting_at(
    monkeypatch: pytest.MonkeyPatch, broker: Broker, victim: str, moment: str
) -> list[str]:
    """Delete ``victim`` at ``moment`` of the next export; returns the reads of it that got a
    404 from the broker."""
    when, path = MOMENTS[moment](victim)
    original: Callable[..., httpx.Response] = ManagementClient.request
    done: list[bool] = []
    not_found: list[str] = []

    def request(self: ManagementClient, method: str, read: str, **options: Any) -> httpx.Response:
        if read == path and when == "before" and not done:
            broker.http.delete(f"/vhosts/{q(victim)}").raise_for_status()
            done.append(True)
        try:
            return original(self, method, read, **options)
        except Exception:
            if q(victim) in read:
                not_found.append(read)
            raise
        finally:
            if read == path and when == "after" and not done:
                broker.http.delete(f"/vhosts/{q(victim)}").raise_for_status()
                done.append(True)

    monkeypatch.setattr(ManagementClient, "request", request)
    return not_found


def seed(broker: Broker) -> None:
    v = q(broker.vhost)
    broker.http.put(f"/queues/{v}/kept.q", json={"durable": True}).raise_for_status()


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_the_library_leaves_a_vhost_deleted_while_it_is_read_out_whole(
    broker: Broker, victim: TestVhost, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    seed(broker)
    not_found = deleting_at(monkeypatch, broker, victim.name, moment)
    vanished: list[str] = []
    with ManagementClient(broker.management_url) as client:
        topology = export_topology(
            client, [broker.vhost, victim.name], name="both", vanished=vanished
        )
    assert vanished == [victim.name]
    assert [vhost.name for vhost in topology.vhosts] == [broker.vhost]
    assert [queue.name for queue in topology.vhosts[0].queues] == ["kept.q"]
    if moment == "before its objects are read":
        assert f"/queues/{q(victim.name)}" in not_found  # the broker's own 404
    with ManagementClient(broker.management_url) as client:
        assert not client.vhost_exists(victim.name)


def test_an_export_of_named_vhosts_still_fails_on_a_vhost_deleted_under_it(
    broker: Broker, victim: TestVhost, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleting_at(monkeypatch, broker, victim.name, "before its objects are read")
    result = broker.run("export", "--vhost", broker.vhost, "--vhost", victim.name)
    assert result.exit_code == 1
    assert f"GET /api/queues/{q(victim.name)} failed with HTTP 404" in result.stderr


# Exports every vhost of the broker: other tests' vhosts come and go meanwhile, which is what
# this shows to be harmless; it runs alone all the same (a whole broker's export is slow).
@pytest.mark.broker_wide
@pytest.mark.parametrize("moment", list(MOMENTS))
def test_export_all_vhosts_skips_a_vhost_deleted_while_it_runs_and_exits_0(
    broker: Broker, victim: TestVhost, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    seed(broker)
    deleting_at(monkeypatch, broker, victim.name, moment)
    spec = broker.tmp / "every.yaml"
    result = broker.run("export", "--all-vhosts", "-o", str(spec))
    assert result.exit_code == 0, result.output
    warning = (
        f"warning: vhost {victim.name!r} was deleted while the export ran: it is left out of"
        " the spec"
    )
    assert warning in result.stderr
    document = yaml.safe_load(spec.read_text())
    names = {vhost["name"] for vhost in document["vhosts"]}
    assert broker.vhost in names and victim.name not in names
    assert "doomed" not in spec.read_text()
