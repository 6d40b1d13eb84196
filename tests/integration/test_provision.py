"""plan / apply / prune / export against a real broker, through the CLI as users run it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pika
import pytest

from rabbitry.errors import ApplyError, BrokerError, NoAnswer, SpecError
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.applier import ApplyOptions, apply_plan
from rabbitry.provisioner.lock import StackLock, lock_name
from rabbitry.provisioner.planner import Action, Plan, plan
from rabbitry.provisioner.state import observed_vhost, read_state
from rabbitry.topology import load_topology
from rabbitry.topology.primitives import Topology
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker


SPEC = one_vhost_spec("""
        exchanges:
          - {name: orders, type: topic, alternate_exchange: unrouted}
          - {name: unrouted, type: fanout}
          - {name: by-header, type: headers}
          - {name: dead, type: fanout}
        queues:
          - name: work
            type: quorum
            arguments: {x-delivery-limit: 5, x-dead-letter-exchange: dead}
          - {name: unrouted}
          - {name: audit, arguments: {x-message-ttl: 60s}}
        bindings:
          - {source: orders, destination: work, routing_key: "order.*"}
          - {source: unrouted, destination: unrouted}
          - {source: by-header, destination: audit, arguments: {x-match: all, kind: audit}}
        policies:
          - {name: cap, pattern: "^audit$", apply_to: queues, definition: {max-length: 1000}}
""")


@pytest.mark.versions
def test_apply_from_empty_then_second_plan_is_empty(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    before = broker.run("plan", str(spec), "--detailed-exitcode")
    assert before.exit_code == 2, before.output
    assert "+ queue" in before.output and f"{broker.vhost}/work" in before.output

    applied = broker.run("apply", str(spec), "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert broker.queue_names() == {"work", "unrouted", "audit"}
    work = broker.get("/queues/{vhost}/work")
    assert work["type"] == "quorum" and work["arguments"]["x-delivery-limit"] == 5
    assert broker.get("/queues/{vhost}/audit")["arguments"]["x-message-ttl"] == 60000
    assert broker.get("/exchanges/{vhost}/orders")["arguments"] == {
        "alternate-exchange": "unrouted"
    }

    again = broker.run("plan", str(spec), "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    assert "No changes" in again.output
    as_json = json.loads(broker.run("plan", str(spec), "--json").output)
    assert as_json["format_version"] == 1 and as_json["changes"] == []


def test_plan_and_apply_from_python_do_what_the_commands_do(broker: Broker) -> None:
    import rabbitry

    spec = broker.spec(SPEC)
    where = {
        "url": broker.amqp_url,
        "management_url": broker.management_url,
        "variables": {"vhost": broker.vhost, "stack": broker.stack},
    }
    before = rabbitry.plan(spec, **where)
    assert before.has_changes and any(c.title.endswith("/work") for c in before.changes)
    assert broker.queue_names() == set()  # planning changed nothing

    result = rabbitry.apply(spec, **where)
    assert result.changed and broker.queue_names() == {"work", "unrouted", "audit"}
    assert not rabbitry.plan(spec, **where).has_changes
    assert not rabbitry.apply(spec, **where).changed


@pytest.mark.versions
def test_hand_made_drift_is_detected_and_repaired(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    assert broker.run("apply", str(spec), "--auto-approve").exit_code == 0
    broker.http.delete(f"/queues/{quote(broker.vhost, safe='')}/unrouted").raise_for_status()
    broker.http.put(
        f"/policies/{quote(broker.vhost, safe='')}/cap",
        json={"pattern": "^audit$", "apply-to": "queues", "definition": {"max-length": 5}},
    ).raise_for_status()

    drift = broker.run("plan", str(spec), "--detailed-exitcode")
    assert drift.exit_code == 2, drift.output
    assert "changed outside rabbitry" in drift.output
    assert "definition.max-length: 5 -> 1000" in drift.output
    assert f"+ queue {broker.vhost}/unrouted" in drift.output

    assert broker.run("apply", str(spec), "--auto-approve").exit_code == 0
    assert "unrouted" in broker.queue_names()
    assert broker.get("/policies/{vhost}/cap")["definition"] == {"max-length": 1000}
    assert broker.run("plan", str(spec), "--detailed-exitcode").exit_code == 0


@pytest.mark.versions
def test_argument_change_is_refused_without_the_flag_then_migrated(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    assert broker.run("apply", str(spec), "--auto-approve").exit_code == 0
    changed = broker.spec(SPEC.replace("x-delivery-limit: 5", "x-delivery-limit: 9"))

    shown = broker.run("plan", str(changed))
    assert "-/+ queue" in shown.output
    assert "arguments.x-delivery-limit: 5 -> 9" in shown.output

    refused = broker.run("apply", str(changed), "--auto-approve")
    assert refused.exit_code == 1
    assert "--allow-replace" in refused.output
    assert broker.get("/queues/{vhost}/work")["arguments"]["x-delivery-limit"] == 5

    broker.publish("work", 3)
    migrated = broker.run("apply", str(changed), "--auto-approve", "--allow-replace")
    assert migrated.exit_code == 0, migrated.output
    work = broker.get("/queues/{vhost}/work")
    assert work["arguments"]["x-delivery-limit"] == 9
    assert work["type"] == "quorum"
    # The messages were moved, not lost, and the bindings are there again.
    assert broker.count("work") == 3
    bindings = broker.get("/exchanges/{vhost}/orders/bindings/source")
    assert [(b["destination"], b["routing_key"]) for b in bindings] == [("work", "order.*")]
    assert "work.rabbitry-migration" not in broker.queue_names()
    assert broker.run("plan", str(changed), "--detailed-exitcode").exit_code == 0


def test_prune_deletes_only_what_the_stack_owns(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    assert broker.run("apply", str(spec), "--auto-approve").exit_code == 0
    broker.http.put(
        f"/queues/{quote(broker.vhost, safe='')}/hand-made", json={"durable": True}
    ).raise_for_status()
    smaller = broker.spec(
        SPEC.replace("          - {name: audit, arguments: {x-message-ttl: 60s}}\n", "").replace(
            "          - {source: by-header, destination: audit,"
            " arguments: {x-match: all, kind: audit}}\n",
            "",
        )
    )
    without_prune = broker.run("apply", str(smaller), "--auto-approve")
    assert without_prune.exit_code == 0, without_prune.output
    assert "audit" in broker.queue_names()
    assert "--prune" in without_prune.output

    pruned = broker.run("apply", str(smaller), "--auto-approve", "--prune")
    assert pruned.exit_code == 0, pruned.output
    assert broker.queue_names() == {"work", "unrouted", "hand-made"}
    assert broker.get("/exchanges/{vhost}/by-header/bindings/source") == []
    assert broker.run("plan", str(smaller), "--detailed-exitcode").exit_code == 0


def test_prune_refuses_a_queue_holding_messages(broker: Broker) -> None:
    spec = broker.spec(SPEC)
    assert broker.run("apply", str(spec), "--auto-approve").exit_code == 0
    broker.publish("work", 2)
    no_work = SPEC.replace(
        """          - name: work
            type: quorum
            arguments: {x-delivery-limit: 5, x-dead-letter-exchange: dead}
""",
        "",
    ).replace('          - {source: orders, destination: work, routing_key: "order.*"}\n', "")
    smaller = broker.spec(no_work)
    refused = broker.run("apply", str(smaller), "--auto-approve", "--prune")
    assert refused.exit_code == 1, refused.output
    assert "work" in broker.queue_names()
    forced = broker.run("apply", str(smaller), "--auto-approve", "--prune", "--force")
    assert forced.exit_code == 0, forced.output
    assert "work" not in broker.queue_names()


@pytest.mark.versions
def test_export_round_trips(broker: Broker) -> None:
    spec = broker.spec(
        SPEC
        + """
        permissions:
          - {user: "app-{{ vars.vhost }}", configure: "^$", write: ".*", read: ".*"}
    users:
      - {name: "app-{{ vars.vhost }}", password: "{{ env.APP_PASSWORD }}", tags: [monitoring]}
"""
    )
    env = {"APP_PASSWORD": "export-test-pw"}
    first = broker.run("apply", str(spec), "--auto-approve", env=env)
    assert first.exit_code == 0, first.output
    exported = broker.run("export", "--vhost", broker.vhost, "--name", broker.stack, "--users")
    assert exported.exit_code == 0, exported.stdout
    assert "export-test-pw" not in exported.stdout
    assert "password_hash" in exported.stdout
    exported_spec = broker.tmp / "exported.yaml"
    exported_spec.write_text(exported.stdout)

    # Apply the export "elsewhere": wipe the vhost, apply the exported spec, compare.
    before = broker.get("/definitions/{vhost}")
    broker.http.delete(f"/vhosts/{quote(broker.vhost, safe='')}").raise_for_status()
    broker.http.delete(f"/users/app-{quote(broker.vhost, safe='')}").raise_for_status()
    applied = broker.run("apply", str(exported_spec), "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert broker.run("plan", str(exported_spec), "--detailed-exitcode").exit_code == 0
    after = broker.get("/definitions/{vhost}")
    for kind in ("queues", "exchanges", "bindings", "policies"):
        assert sorted(json.dumps(x, sort_keys=True) for x in after[kind]) == sorted(
            json.dumps(x, sort_keys=True) for x in before[kind]
        ), kind
    # The password survived as a hash: the user can still log in with it.
    amqp = urlsplit(broker.vhost_amqp_url)
    params = pika.URLParameters(
        urlunsplit(
            (
                amqp.scheme,
                f"app-{broker.vhost}:export-test-pw@{amqp.hostname}:{amqp.port}",
                amqp.path,
                "",
                "",
            )
        )
    )
    pika.BlockingConnection(params).close()


BAD_SPECS: list[tuple[str, str, Callable[[str], bool]]] = [
    (
        "syntax",
        "version: 1\nvhosts:\n  - name: x\n    queues: [\n",
        lambda out: ":3" in out or ":4" in out or ":5" in out,
    ),
    (
        "unknown-key",
        'version: 1\nvhosts:\n  - name: "{{ vars.vhost }}"\n    queues:\n      - name: q\n        durabel: true\n',
        lambda out: ":6" in out and "durabel" in out,
    ),
    (
        "wrong-type",
        'version: 1\nvhosts:\n  - name: "{{ vars.vhost }}"\n    queues:\n      - name: q\n        arguments: {x-max-length: lots}\n',
        lambda out: ":6" in out and "x-max-length" in out,
    ),
    (
        "dangling",
        'version: 1\nvhosts:\n  - name: "{{ vars.vhost }}"\n    queues: [{name: q}]\n    bindings:\n      - {source: nowhere, destination: q}\n',
        lambda out: ":6" in out and "nowhere" in out,
    ),
]


@pytest.mark.parametrize(("label", "text", "located"), BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_bad_spec_exits_1_with_location_and_changes_nothing(
    broker: Broker, label: str, text: str, located: Callable[[str], bool]
) -> None:
    spec = broker.tmp / f"{label}.yaml"
    spec.write_text(text)
    before = broker.get("/definitions/{vhost}")
    for verb in ("plan", "apply"):
        args = [verb, str(spec)] + (["--auto-approve"] if verb == "apply" else [])
        result = broker.run(*args)
        assert result.exit_code == 1, result.output
        assert str(spec) in result.output and located(result.output), result.output
        assert "Traceback" not in result.output
    assert broker.get("/definitions/{vhost}") == before


class CutOffClient(ManagementClient):
    """The real management client, whose connection drops after a number of writes."""

    def __init__(self, url: str, writes: int) -> None:
        super().__init__(url)
        self.writes_left = writes

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if method != "GET":
            if self.writes_left == 0:
                raise BrokerError("connection reset by peer (injected)")
            self.writes_left -= 1
        return super().request(method, path, **kwargs)


@pytest.mark.versions
def test_failure_half_way_reports_what_was_done_and_the_next_apply_converges(
    broker: Broker,
) -> None:
    spec = broker.spec(
        SPEC
        + """
        permissions:
          - {user: "a-{{ vars.vhost }}"}
          - {user: "b-{{ vars.vhost }}"}
        operator_policies:
          - {name: cap, pattern: ".*", definition: {max-length: 100000}}
    users:
      - {name: "a-{{ vars.vhost }}", password: pw-a}
      - {name: "b-{{ vars.vhost }}", password: pw-b}
"""
    )
    topology = load_topology(spec, {"vhost": broker.vhost, "stack": broker.stack})

    def fresh_plan(client: ManagementClient) -> Plan:
        state = read_state(
            client, broker.stack, [broker.vhost], users=[u.name for u in topology.users]
        )
        return plan(topology, state)

    # Writes: ownership intent, user a, user b, then the permissions... cut after user b.
    flaky = CutOffClient(broker.management_url, writes=3)
    with pytest.raises(ApplyError) as failure:
        apply_plan(flaky, fresh_plan(flaky), ApplyOptions())
    assert failure.value.done == [
        f"created user a-{broker.vhost}",
        f"created user b-{broker.vhost}",
    ]
    assert "run apply again" in str(failure.value)

    with ManagementClient(broker.management_url) as client:
        halfway = fresh_plan(client)
        assert halfway.has_changes
        assert not any(c.drift for c in halfway.changes), "half-made is not drift"
        apply_plan(client, halfway, ApplyOptions())
        assert not fresh_plan(client).has_changes
    assert broker.get(f"/users/a-{quote(broker.vhost, safe='')}") is not None
    assert broker.get("/operator-policies/{vhost}/cap")["definition"] == {"max-length": 100000}
    for user in ("a", "b"):
        broker.http.delete(f"/users/{user}-{quote(broker.vhost, safe='')}")


class ImportCutOff(ManagementClient):
    """The real management client, whose connection drops after a number of imports."""

    def __init__(self, url: str, imports: int) -> None:
        super().__init__(url)
        self.imports_left = imports

    def import_definitions(self, definitions: Any, vhost: str | None = None, **kw: Any) -> None:
        if self.imports_left == 0:
            raise BrokerError("connection reset by peer (injected)")
        self.imports_left -= 1
        super().import_definitions(definitions, vhost, **kw)


MANY = one_vhost_spec(
    """
        exchanges:
          - {name: hub, type: topic}
        queues:
"""
    + "".join(
        f"          - {{name: q{i}, type: {'quorum' if i % 2 else 'classic'}}}\n" for i in range(30)
    )
    + "        bindings:\n"
    + "".join(
        f"          - {{source: hub, destination: q{i}, routing_key: k.{i}}}\n" for i in range(30)
    )
)


@pytest.mark.versions
def test_creations_go_in_chunks_and_a_run_cut_between_two_is_repaired(broker: Broker) -> None:
    topology = load_topology(broker.spec(MANY), {"vhost": broker.vhost, "stack": broker.stack})

    def fresh_plan(client: ManagementClient) -> Plan:
        return plan(topology, read_state(client, broker.stack, [broker.vhost]))

    lines: list[str] = []
    cut = ImportCutOff(broker.management_url, imports=2)
    with pytest.raises(ApplyError) as failure:
        apply_plan(
            cut,
            fresh_plan(cut),
            ApplyOptions(import_chunk=20, import_whole=0, declare_apart=0),
            progress=lines.append,
        )
    assert f"created 20 of 61 object(s) in {broker.vhost} (import 1 of 4)" in lines
    assert f"created 40 of 61 object(s) in {broker.vhost} (import 2 of 4)" in lines
    created = [line for line in failure.value.done if line.startswith("created ")]
    assert len(created) == 40
    # whole chunks only: the exchange and 30 queues came first, then the first 9 bindings
    assert broker.queue_names() == {f"q{i}" for i in range(30)}
    bound = [b for b in broker.get("/bindings/{vhost}") if b["source"] == "hub"]
    assert len(bound) == 9

    with ManagementClient(broker.management_url) as client:
        rest = fresh_plan(client)
        creations = [c for c in rest.changes if c.action is Action.CREATE]
        assert len(creations) == 21 and {c.kind for c in creations} == {"binding"}
        # what the cut run made is adopted (recorded), not planned again
        assert {c.action for c in rest.changes} == {Action.CREATE, Action.ADOPT}
        assert not any(c.drift for c in rest.changes), "half-made is not drift"
        apply_plan(client, rest, ApplyOptions(import_chunk=20, import_whole=0, declare_apart=0))
        assert not fresh_plan(client).has_changes
    assert len([b for b in broker.get("/bindings/{vhost}") if b["source"] == "hub"]) == 30


class QueueAnswerLost(ManagementClient):
    """The real management client; the answer to its first quorum queue PUT is lost (the
    queue is made all the same)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.lost = 1
        self.guard = threading.Lock()

    def put(self, path: str, body: Any) -> None:
        super().put(path, body)
        if path.startswith("/queues/") and body["arguments"].get("x-queue-type") == "quorum":
            with self.guard:
                if self.lost:
                    self.lost -= 1
                    raise NoAnswer(f"PUT {path} got no answer (injected)")


@pytest.mark.versions
def test_quorum_queues_are_declared_apart_before_their_bindings(broker: Broker) -> None:
    """The broker's import declares queues a few at a time; quorum queues go by concurrent
    PUTs between the imports of the rest and of the bindings. A PUT whose answer is lost is
    waited for like an import's objects."""
    topology = load_topology(broker.spec(MANY), {"vhost": broker.vhost, "stack": broker.stack})
    lines: list[str] = []
    with QueueAnswerLost(broker.management_url) as client:
        apply_plan(
            client,
            plan_now(client, topology, broker),
            ApplyOptions(declare_apart=4),
            progress=lines.append,
        )
        assert client.lost == 0, "the injected loss happened"
        assert not plan_now(client, topology, broker).has_changes
    apart = f"created 31 of 61 object(s) in {broker.vhost} (15 queue(s) declared 4 at a time)"
    assert lines[:3] == [
        f"created 16 of 61 object(s) in {broker.vhost} (import 1 of 2)",
        apart,
        f"created 61 of 61 object(s) in {broker.vhost} (import 2 of 2)",
    ], lines
    types = {queue["name"]: queue["type"] for queue in broker.get("/queues/{vhost}")}
    assert types == {f"q{i}": "quorum" if i % 2 else "classic" for i in range(30)}
    assert len([b for b in broker.get("/bindings/{vhost}") if b["source"] == "hub"]) == 30


def plan_now(client: ManagementClient, topology: Topology, broker: Broker) -> Plan:
    """The plan of ``topology`` against what the broker holds now."""
    return plan(topology, read_state(client, broker.stack, [broker.vhost]))


class SwallowedImports(ManagementClient):
    """Every import reaches the broker, but the first ``swallow`` of them never do: as when a
    connection drops after the request went out, or a broker that gave up on it."""

    def __init__(self, url: str, swallow: int) -> None:
        super().__init__(url)
        self.swallow = swallow

    def import_definitions(self, definitions: Any, vhost: str | None = None, **kw: Any) -> None:
        if self.swallow:
            self.swallow -= 1
            raise NoAnswer("POST /api/definitions got no answer (injected)")
        super().import_definitions(definitions, vhost, **kw)


@pytest.mark.versions
def test_an_import_that_outlives_its_timeout_is_waited_for_not_failed(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 50,000-object vhost slows imports down past any fixed timeout: the broker goes on
    with one whose request timed out, and the apply waits while its objects keep appearing."""
    queues = "".join(
        f"          - {{name: slow{i}, type: {'quorum' if i % 2 else 'classic'}}}\n"
        for i in range(200)
    )
    spec = one_vhost_spec("        queues:\n" + queues)
    topology = load_topology(broker.spec(spec), {"vhost": broker.vhost, "stack": broker.stack})
    lines: list[str] = []
    with ManagementClient(broker.management_url) as client:
        # a timeout far below what 100 quorum queues take: the request gives up at once. The
        # quorum queues go into the import (not declared apart, the default), so that the
        # broker is still at it when the apply first looks: 100 classic queues alone may be
        # made by then, and nothing would be waited for
        options = ApplyOptions(import_timeout=0.05, declare_apart=1)
        apply_plan(client, plan_now(client, topology, broker), options, progress=lines.append)
        waited = [line for line in lines if "outlived its 0 s timeout" in line]
        assert waited, lines
        assert broker.queue_names() == {f"slow{i}" for i in range(200)}
        assert not plan_now(client, topology, broker).has_changes


@pytest.fixture
def many(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Topology:
    """MANY's topology, for an applier that takes an import that made nothing for 1 s as one
    the broker never made."""
    from rabbitry.provisioner import applier

    monkeypatch.setattr(applier, "IMPORT_STALL", 1.0)
    return load_topology(broker.spec(MANY), {"vhost": broker.vhost, "stack": broker.stack})


@pytest.mark.versions
def test_an_import_the_broker_never_made_is_sent_again_once(broker: Broker, many: Topology) -> None:
    with SwallowedImports(broker.management_url, swallow=1) as client:
        apply_plan(client, plan_now(client, many, broker), ApplyOptions())
        assert client.swallow == 0
        assert len(broker.queue_names()) == 30
        assert not plan_now(client, many, broker).has_changes


@pytest.mark.versions
def test_an_import_the_broker_never_made_even_sent_twice_fails_clearly_and_is_repaired(
    broker: Broker, many: Topology
) -> None:
    with SwallowedImports(broker.management_url, swallow=2) as client:
        with pytest.raises(ApplyError) as failure:
            apply_plan(client, plan_now(client, many, broker), ApplyOptions(declare_apart=0))
        assert "has made none of its objects for 1 s (0 of 61 made)" in str(failure.value)
        assert "run the same apply again" in str(failure.value)
        assert broker.queue_names() == set()
        apply_plan(client, plan_now(client, many, broker), ApplyOptions(declare_apart=0))
        assert len(broker.queue_names()) == 30
        assert not plan_now(client, many, broker).has_changes


def test_an_apply_while_another_holds_the_stack_is_refused_naming_the_holder(
    broker: Broker,
) -> None:
    spec = str(broker.spec(SPEC))
    with ManagementClient(broker.management_url) as client:
        held = StackLock(client, broker.stack, settle=0.05)
        with held.held():
            refused = broker.run("apply", spec, "--auto-approve")
            assert refused.exit_code == 1
            assert f"stack {broker.stack!r} is being applied by {held.holder}" in refused.output
            assert "--lock-timeout" in refused.output
            assert broker.queue_names() == set(), "nothing was changed"

            # with a timeout the second run waits, and goes on once the first lets go
            threading.Timer(1.0, held.release).start()
            started = time.monotonic()
            waited = broker.run("apply", spec, "--auto-approve", "--lock-timeout", "30")
            assert waited.exit_code == 0, waited.output
            assert time.monotonic() - started >= 1.0
        assert broker.queue_names() == {"work", "unrouted", "audit"}
        assert client.global_parameter(lock_name(broker.stack)) is None, "released"


def test_the_lock_of_a_killed_apply_expires_and_is_taken_over(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    with ManagementClient(broker.management_url) as client:
        long_ago = time.time() - 3600
        killed = {"token": "t", "holder": "ci@runner-7 (pid 4242)", "since": long_ago,
                  "expires": long_ago + 2, "ttl": 2}  # fmt: skip
        client.put_global_parameter(lock_name(broker.stack), killed)
        # it looks abandoned by the clock, so it is watched for its ttl, unchanged, and taken
        started = time.monotonic()
        result = broker.run("apply", str(broker.spec(SPEC)), "--auto-approve")
        assert result.exit_code == 0, result.output
        assert time.monotonic() - started >= 2.0
        assert "taking over the lock" in caplog.text and "ci@runner-7" in caplog.text
        assert client.global_parameter(lock_name(broker.stack)) is None


@pytest.mark.parametrize("early", [False, True], ids=["once-loaded", "from-the-yaml-tree"])
def test_apply_claims_its_lock_while_the_spec_loads_and_plans_while_it_settles(
    broker: Broker, early: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.provisioner.live_plan import locked_plan, plan_topology
    from rabbitry.provisioner.read_ahead import ReadAhead
    from rabbitry.provisioner.target import target_of
    from rabbitry.topology.spec import fast_yaml

    if early:  # a large plain spec: the lock is claimed from the names in its YAML tree
        monkeypatch.setattr(fast_yaml, "FAST_FROM", 0)
    broker.apply(SPEC)
    spec = broker.spec(SPEC.replace("max-length: 1000", "max-length: 2000"))
    options = {"url": broker.amqp_url, "management_url": broker.management_url}
    variables = {"vhost": broker.vhost, "stack": broker.stack}
    with ManagementClient(broker.management_url) as other:
        plans: list[tuple[bool, float]] = []

        def make_plan(client: ManagementClient) -> Plan:
            assert target.lock is not None
            plans.append((target.lock.early_claim_kept, time.monotonic()))
            return plan_topology(client, target.topology)

        ahead = ReadAhead(lock=True, **options)
        target = target_of(spec, variables=variables, ahead=ahead, **options)
        assert target.lock is not None and target.lock.stack == broker.stack
        assert other.global_parameter(lock_name(broker.stack))["token"] == target.lock.token
        assert target.client is not None and f"vhost {broker.vhost}" in target.client._ahead
        with locked_plan(target, broker.stack, make_plan) as (client, the_plan):
            assert target.lock.early_claim_kept, "nobody wrote the lock after the claim"
            assert len(plans) == 1, "planned once, before the claim was confirmed"
            assert [c.action for c in the_plan.changes] == [Action.UPDATE]
            assert not client._ahead, "what was read after the claim was used"
        assert other.global_parameter(lock_name(broker.stack)) is None, "released"

        # another run wrote the lock right after this one's claim (it read "free" before the
        # claim): it goes first and changes the broker; what this run read and planned is stale
        plans.clear()
        ahead = ReadAhead(lock=True, **options)
        target = target_of(spec, variables=variables, ahead=ahead, **options)
        theirs = {"token": "theirs", "holder": "ci@runner-9 (pid 99)", "since": time.time(),
                  "expires": time.time() + 60}  # fmt: skip
        other.put_global_parameter(lock_name(broker.stack), theirs)
        other.put("/policies/{}/cap".format(quote(broker.vhost, safe="")),
                  {"pattern": "^audit$", "apply-to": "queues",
                   "definition": {"max-length": 2000}})  # fmt: skip
        threading.Timer(
            1.0, other.delete, [f"/global-parameters/{lock_name(broker.stack)}"]
        ).start()
        started = time.monotonic()
        with locked_plan(target, broker.stack, make_plan, 30) as (client, the_plan):
            assert time.monotonic() - started >= 1.0, "waited for the other run"
            assert not target.lock.early_claim_kept
            assert len(plans) == 2 and plans[1][1] - started >= 1.0, "planned again after"
            assert not the_plan.has_changes, "on a fresh read, not the stale one"
        assert other.global_parameter(lock_name(broker.stack)) is None


def test_an_apply_of_a_plain_spec_claims_its_lock_before_the_spec_loads(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.provisioner.read_ahead import ReadAhead
    from rabbitry.provisioner.target import target_of

    plain = SPEC.replace('"{{ vars.stack }}"', broker.stack)
    plain = plain.replace('"{{ vars.vhost }}"', broker.vhost)
    claims: list[StackLock | None] = []
    before_loading = ReadAhead.before_loading

    def spy(path: Any, **options: Any) -> ReadAhead:
        ahead = before_loading(path, **options)
        claims.append(ahead.lock)
        return ahead

    monkeypatch.setattr(ReadAhead, "before_loading", spy)
    applied = broker.run("apply", str(broker.spec(plain, "plain.yaml")), "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert len(claims) == 1 and claims[0] is not None and claims[0].stack == broker.stack
    assert claims[0].early_claim_kept, "the claim made before the spec loaded was kept"
    with ManagementClient(broker.management_url) as client:
        assert client.global_parameter(lock_name(broker.stack)) is None, "released"

        # a spec whose problem shows once loaded: the claim is let go, nothing changes
        bad = plain.replace("destination: work", "destination: nowhere")
        failed = broker.run("apply", str(broker.spec(bad, "bad.yaml")), "--auto-approve")
        assert failed.exit_code == 1 and "nowhere" in failed.output, failed.output
        assert claims[-1] is not None and claims[-1].stack == broker.stack
        assert client.global_parameter(lock_name(broker.stack)) is None, "let go"

        # a claim under another name (a wrong guess) is let go for the stack's own
        wrong = StackLock(ManagementClient(broker.management_url), "not-" + broker.stack)
        assert wrong.claim()
        options = {"url": broker.amqp_url, "management_url": broker.management_url}
        spec = broker.spec(plain, "plain.yaml")
        ahead = ReadAhead(lock=True, **options)
        ahead.client, ahead.lock = wrong.client, wrong  # as if claimed under a wrong guess
        target = target_of(spec, ahead=ahead, **options)
        assert target.lock is not None and target.lock.stack == broker.stack
        assert target.lock.claimed
        assert client.global_parameter(lock_name("not-" + broker.stack)) is None
        assert client.global_parameter(lock_name(broker.stack))["token"] == target.lock.token
        target.lock.abandon()
        assert client.global_parameter(lock_name(broker.stack)) is None


def test_an_apply_stopped_before_it_changes_anything_leaves_no_lock(broker: Broker) -> None:
    bad = broker.spec(SPEC.replace("destination: work", "destination: nowhere"), "bad.yaml")
    failed = broker.run("apply", str(bad), "--auto-approve")
    assert failed.exit_code == 1 and "nowhere" in failed.output, failed.output
    refused = broker.run("apply", str(broker.spec(SPEC)), "--json")
    assert refused.exit_code == 1 and "--auto-approve" in refused.output, refused.output
    with ManagementClient(broker.management_url) as client:
        assert client.global_parameter(lock_name(broker.stack)) is None
    assert broker.queue_names() == set()
    applied = broker.run("apply", str(broker.spec(SPEC)), "--auto-approve")
    assert applied.exit_code == 0, applied.output


@pytest.mark.versions
def test_reading_a_vhost_kind_by_kind_sees_what_the_definitions_export_sees(
    broker: Broker,
) -> None:
    """Plan and apply read a vhost through the per-kind endpoints (ten times faster at 50,000
    objects than the definitions export): both reads must give the same objects, including
    what the export leaves out (built-in exchanges, exclusive queues and their bindings)."""
    # 4.3 refuses non-durable, non-exclusive queues by default
    temp = "durable: false, " if broker.version < (4, 3) else ""
    broker.apply(
        one_vhost_spec(f"""
        exchanges:
          - {{name: hub, type: topic, alternate_exchange: spill}}
          - {{name: spill, type: fanout, internal: true}}
          - {{name: heads, type: headers, durable: false, auto_delete: true}}
        queues:
          - {{name: work, type: quorum, arguments: {{x-delivery-limit: 5}}}}
          - {{name: temp, {temp}auto_delete: true}}
          - {{name: log, type: stream}}
          - {{name: plain, arguments: {{x-message-ttl: 1000, x-max-priority: 5}}}}
        bindings:
          - {{source: hub, destination: work, routing_key: "a.#"}}
          - {{source: hub, destination: heads, destination_type: exchange}}
          - {{source: heads, destination: plain, arguments: {{x-match: any, kind: a}}}}
        policies:
          - {{name: cap, pattern: "^plain$", apply_to: queues, definition: {{max-length: 10}}}}
        operator_policies:
          - {{name: guard, pattern: ".*", definition: {{max-length: 100000}}}}
""")
    )
    connection = pika.BlockingConnection(pika.URLParameters(broker.vhost_amqp_url))
    try:
        channel = connection.channel()
        mine = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(mine, "hub", "x.#")
        with ManagementClient(broker.management_url) as client:
            meta = {"name": broker.vhost}
            exported = observed_vhost(broker.vhost, meta, client.vhost_definitions(broker.vhost))
            per_kind = observed_vhost(broker.vhost, meta, client.vhost_objects(broker.vhost))
    finally:
        connection.close()
    exchanges = per_kind.exchanges
    if broker.version >= (4, 3):
        # RabbitMQ 4.3.6's definitions export leaves internal exchanges out (and the `internal`
        # field) and lists bindings to exclusive queues: the per-kind read still sees the one
        # and leaves out the other, as on older brokers
        assert [e.name for e in exchanges if e.internal] == ["spill"]
        assert "spill" not in {e.name for e in exported.exchanges}
        assert mine in {b.destination for b in exported.bindings}
        exported = exported.model_copy(
            update={"bindings": [b for b in exported.bindings if b.destination != mine]}
        )
        per_kind = per_kind.model_copy(
            update={"exchanges": [e for e in exchanges if not e.internal]}
        )
    for kind in ("exchanges", "queues", "bindings", "policies", "operator_policies", "parameters"):
        assert sorted(map(repr, getattr(per_kind, kind))) == sorted(
            map(repr, getattr(exported, kind))
        ), kind
    assert {q.name for q in per_kind.queues} == {"work", "temp", "log", "plain"}
    assert {o.name for o in per_kind.operator_policies} == {"guard"}
    assert len(per_kind.bindings) == 3 and {p.name for p in per_kind.policies} == {"cap"}


@pytest.mark.parametrize("early", [False, True], ids=["once-loaded", "from-the-yaml-tree"])
def test_plan_reads_the_vhost_while_it_checks_the_spec_and_plans_the_same(
    broker: Broker, early: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.provisioner.live_plan import plan_topology
    from rabbitry.provisioner.read_ahead import ReadAhead
    from rabbitry.provisioner.target import target_of
    from rabbitry.topology.spec import fast_yaml

    if early:  # as for a spec of tens of thousands of objects: names read before it is built
        if not fast_yaml.available():
            pytest.fail("the fast extra is part of the test install")
        monkeypatch.setattr(fast_yaml, "FAST_FROM", 0)
        peeked: list[object] = []
        peek = fast_yaml.peek_names
        monkeypatch.setattr(
            "rabbitry.topology.spec.fast_yaml.peek_names",
            lambda text: peeked.append(peek(text)) or peeked[-1],
        )

    broker.apply(SPEC)
    if early:
        peeked.clear()  # the apply peeked too
    spec = broker.spec(SPEC.replace("max-length: 1000", "max-length: 2000"))
    options = {"url": broker.amqp_url, "management_url": broker.management_url}
    variables = {"vhost": broker.vhost, "stack": broker.stack}
    ahead = target_of(spec, variables=variables, ahead=ReadAhead(**options), **options)
    assert ahead.client is not None
    # the vhost's objects, every stack's ownership record and the first reads of a plan
    assert set(ahead.client._ahead) == {
        f"vhost {broker.vhost}",
        "GET /global-parameters",
        "GET /overview",
        "GET /nodes",
        "GET /feature-flags",
        "GET /deprecated-features",
        "GET /vhosts",
        "GET /vhost-limits",
        "GET /user-limits",
    }
    if early:
        assert peeked == [(broker.stack, [broker.vhost])]
    with ahead.client as client:
        read_ahead = plan_topology(client, ahead.topology)
        assert not client._ahead, "taken"
    plain = target_of(spec, variables=variables, **options)
    assert plain.client is None
    with plain.endpoints.management() as client:
        fresh = plan_topology(client, plain.topology)
    assert [(c.action, c.key, c.reasons) for c in read_ahead.changes] == [
        (c.action, c.key, c.reasons) for c in fresh.changes
    ]
    assert [c.action for c in fresh.changes] == [Action.UPDATE]

    # a spec that fails its checks stops at once, reads or not
    bad = broker.spec(SPEC.replace("destination: work", "destination: nowhere"), "bad.yaml")
    started = time.monotonic()
    with pytest.raises(SpecError):
        target_of(bad, variables=variables, ahead=ReadAhead(**options), **options)
    assert time.monotonic() - started < 5


def test_plan_starts_reading_the_broker_before_the_spec_loads(broker: Broker) -> None:
    """A plain spec's vhosts are read off its text and read from the broker at once; the plan
    takes those answers instead of reading again."""
    from rabbitry.provisioner.live_plan import plan_topology
    from rabbitry.provisioner.read_ahead import ReadAhead
    from rabbitry.provisioner.target import target_of

    broker.apply(SPEC)
    plain = SPEC.replace("{{ vars.stack }}", broker.stack).replace("{{ vars.vhost }}", broker.vhost)
    spec = broker.spec(plain.replace("max-length: 1000", "max-length: 2000"), "plain.yaml")
    ahead = ReadAhead.before_loading(spec, management_url=broker.management_url)
    reader = ahead.client
    assert reader is not None
    try:
        assert f"vhost {broker.vhost}" in reader._ahead and "GET /overview" in reader._ahead
        target = target_of(spec, management_url=broker.management_url, ahead=ahead)
        assert target.client is reader
        the_plan = plan_topology(reader, target.topology)
        assert [c.action for c in the_plan.changes] == [Action.UPDATE]
        assert f"vhost {broker.vhost}" not in reader._ahead, "the early answer was used"
    finally:
        reader.close()
    # a templated spec names nothing before it renders: no guess, no early read
    templated = ReadAhead.before_loading(broker.spec(SPEC), management_url=broker.management_url)
    assert templated.client is None
