"""Expansion: the primitives a spec stands for."""

from __future__ import annotations

from pathlib import Path

import pytest

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology import expand, load_topology
from rabbitry.topology import primitives as p
from rabbitry.topology.patterns.expand import VHOST_STEPS, VhostDraft

from .conftest import load

EXAMPLES = Path(__file__).parents[3] / "examples"

SPEC = """\
version: 1
name: shop
users:
  - {name: app, password: secret, tags: [monitoring]}
  - {name: ops, password_hash: abc, hashing_algorithm: rabbit_password_hashing_sha512}
global_parameters:
  - {name: cluster_name, value: prod}
vhosts:
  - name: v
    description: d
    tags: [t]
    default_queue_type: quorum
    exchanges:
      - {name: e, type: topic, alternate_exchange: ae, unchecked_arguments: {x-p: 1}}
      - {name: ae, type: fanout, internal: true}
      - {name: h, type: x-consistent-hash, arguments: {hash-property: message_id}}
    queues:
      - name: q
        arguments: {x-message-ttl: 30s, x-max-length-bytes: 1KiB}
        unchecked_arguments: {x-custom: true}
      - {name: c, type: classic, durable: false, auto_delete: true}
    bindings:
      - {source: e, destination: q, routing_key: "a.#"}
      - {source: amq.topic, destination: e, destination_type: exchange, arguments: {k: v}}
    policies:
      - name: p
        pattern: ^q$
        apply_to: queues
        priority: 3
        definition: {expires: 1d}
        unchecked_definition: {plugin-key: x}
    operator_policies:
      - {name: cap, pattern: .*, definition: {max-length: 100}}
    permissions:
      - {user: app, configure: ""}
    topic_permissions:
      - {user: app, exchange: e, write: "^a\\\\."}
    parameters:
      - {component: federation-upstream, name: up, value: {uri: "amqp://remote"}}
"""


def test_expand_translates_every_object() -> None:
    topology = expand(load(SPEC))
    assert topology.name == "shop"
    (vhost,) = topology.vhosts
    assert (vhost.name, vhost.description, vhost.tags) == ("v", "d", ("t",))
    assert vhost.default_queue_type is p.QueueType.QUORUM
    assert vhost.exchanges == (
        p.Exchange(
            name="e",
            type=p.ExchangeType.TOPIC,
            arguments={"x-p": 1, "alternate-exchange": "ae"},
        ),
        p.Exchange(name="ae", type=p.ExchangeType.FANOUT, internal=True),
        p.Exchange(
            name="h", type=p.ExchangeType.CONSISTENT_HASH, arguments={"hash-property": "message_id"}
        ),
    )
    assert vhost.queues == (
        p.Queue(
            name="q",
            type=p.QueueType.QUORUM,
            arguments={"x-message-ttl": 30_000, "x-max-length-bytes": 1024, "x-custom": True},
        ),
        p.Queue(name="c", type=p.QueueType.CLASSIC, durable=False, auto_delete=True),
    )
    assert vhost.bindings == (
        p.Binding(source="e", destination="q", routing_key="a.#"),
        p.Binding(
            source="amq.topic",
            destination="e",
            destination_type=p.DestinationType.EXCHANGE,
            arguments={"k": "v"},
        ),
    )
    assert vhost.policies == (
        p.Policy(
            name="p",
            pattern="^q$",
            apply_to=p.ApplyTo.QUEUES,
            priority=3,
            definition={"expires": 86_400_000, "plugin-key": "x"},
        ),
    )
    assert vhost.operator_policies == (
        p.OperatorPolicy(name="cap", pattern=".*", definition={"max-length": 100}),
    )
    assert vhost.permissions == (p.Permission(user="app", configure=""),)
    assert vhost.topic_permissions == (p.TopicPermission(user="app", exchange="e", write="^a\\."),)
    assert vhost.parameters == (
        p.Parameter(component="federation-upstream", name="up", value={"uri": "amqp://remote"}),
    )
    app, ops = topology.users
    assert app.password is not None and app.password.get_secret_value() == "secret"
    assert "secret" not in repr(app) and app.tags == ("monitoring",)
    assert app.hashing_algorithm == "rabbit_password_hashing_sha256"
    assert (ops.password_hash, ops.hashing_algorithm) == ("abc", "rabbit_password_hashing_sha512")
    assert topology.global_parameters[0].value == "prod"


def test_queue_type_stays_out_of_arguments() -> None:
    queue = expand(load(SPEC)).vhosts[0].queues[0]
    assert "x-queue-type" not in queue.arguments
    assert queue.wire_arguments()["x-queue-type"] == "quorum"


def test_expansion_steps_are_pluggable() -> None:
    def add_parking_lot(draft: VhostDraft) -> None:
        draft.queues.append(p.Queue(name=f"{draft.spec.name}.parking-lot"))

    topology = expand(load(SPEC), (*VHOST_STEPS, add_parking_lot))
    assert topology.vhosts[0].queues[-1].name == "v.parking-lot"


def test_load_topology_raises_errors_and_reports_warnings(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nvhosts:\n  - name: v\n    permissions: [{user: nobody}]\n")
    warnings: list[SpecProblem] = []
    topology = load_topology(spec, environ={}, on_warning=warnings.append)
    assert topology.vhosts[0].permissions[0].user == "nobody"
    assert [(w.line, w.path) for w in warnings] == [(4, "vhosts[0].permissions[0].user")]
    spec.write_text("version: 1\nvhosts:\n  - name: v\n    queues: [{name: q, exclusive: true}]\n")
    with pytest.raises(SpecError) as info:
        load_topology(spec, environ={})
    assert [p.line for p in info.value.problems] == [4]


def test_example_expands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOP_PASSWORD", raising=False)
    warnings: list[SpecProblem] = []
    topology = load_topology(
        EXAMPLES / "shop.yaml", {"vhost": "test-1"}, on_warning=warnings.append
    )
    assert warnings == []
    (vhost,) = topology.vhosts
    assert vhost.name == "test-1"
    assert {q.name: q.type for q in vhost.queues}["orders.work"] is p.QueueType.QUORUM
    password = topology.users[0].password
    assert password is not None and password.get_secret_value() == "change-me"


def test_a_vhost_the_checks_expanded_is_not_expanded_again() -> None:
    from rabbitry.topology import check_spec

    spec = load(
        "version: 1\nname: s\nvhosts:\n  - name: v\n    queues:\n"
        "      - {name: work, retry: {attempts: 3, backoff: [1s, 5s]}}\n"
    )
    check_spec(spec)
    _, by_the_checks = spec._expanded[id(spec.vhosts[0])]
    first = expand(spec)
    assert first.vhosts[0] is by_the_checks
    assert not spec._expanded, "taken once"
    again = expand(spec)
    assert again == first and again.vhosts[0] is not first.vhosts[0]
    assert {"work", "work.retry.1s", "work.retry.5s"} <= {q.name for q in first.vhosts[0].queues}
