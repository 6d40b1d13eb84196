"""The version table against real brokers: what it says a version refuses, the broker refuses;
plan refuses such a spec before any change, naming the version; --target-version tells what an
upgrade would break. Runs on the default image (4.0), on the 3.10 one
(RABBITRY_TEST_IMAGE=$RABBITRY_COMPAT_IMAGE) and on the newest (RABBITRY_NEWEST_IMAGE, 4.3)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner

import rabbitry
from rabbitry.cli import cli
from rabbitry.errors import RabbitryError
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.versions import (
    Use,
    judge,
    parse_version,
    uses_of_exchange,
    uses_of_policy,
    uses_of_queue,
)

from .conftest import Broker

# The version table against each release: every test here depends on the broker's version.
pytestmark = pytest.mark.versions


def version_of(broker: Broker) -> tuple[int, ...]:
    return parse_version(str(broker.get("/overview")["rabbitmq_version"]))


def refused_by_table(
    uses: list[Use], version: tuple[int, ...], deprecated: dict[str, bool] | None = None
) -> bool:
    return any(v.refused for v in judge(uses, version, deprecated=deprecated or {}))


def deprecated_features(broker: Broker) -> dict[str, bool]:
    """What the broker reports of its deprecated features' state (none before 3.13; 4.0.5
    lists only their phases)."""
    answer = broker.http.get("/deprecated-features")
    if answer.status_code == 404:
        return {}
    answer.raise_for_status()
    return {f["name"]: f["state"] == "permitted" for f in answer.json() if "state" in f}


QUEUES: list[tuple[str, str, dict[str, Any]]] = [
    ("lazy", "classic", {"x-queue-mode": "lazy"}),
    ("v1", "classic", {"x-queue-version": 1}),
    ("leader", "classic", {"x-queue-leader-locator": "balanced"}),
    ("stream", "stream", {}),
    ("retried", "quorum", {"x-delayed-retry-type": "failed", "x-delayed-retry-min": 1000}),
    ("patient", "quorum", {"x-consumer-disconnected-timeout": 60000}),
]


@pytest.mark.parametrize(("name", "kind", "arguments"), QUEUES)
def test_the_broker_refuses_a_queue_exactly_when_the_table_says_so(
    broker: Broker, name: str, kind: str, arguments: dict[str, Any]
) -> None:
    version = version_of(broker)
    wire = {**arguments, "x-queue-type": kind}
    response = broker.http.put(
        f"/queues/{broker.vhost}/{name}", json={"durable": True, "arguments": wire}
    )
    uses = list(uses_of_queue(QueueType(kind), True, arguments))
    assert response.is_error == refused_by_table(uses, version), (version, response.text)


def test_the_broker_takes_a_transient_queue_exactly_when_the_table_says_so(
    broker: Broker,
) -> None:
    # RabbitMQ 4.3 denies transient_nonexcl_queues by default, Debian's 4.3 permits it: the
    # table decides by what the broker reports of the feature, then by its version's default
    version, deprecated = version_of(broker), deprecated_features(broker)
    response = broker.http.put(
        f"/queues/{broker.vhost}/passing", json={"durable": False, "auto_delete": False}
    )
    uses = list(uses_of_queue(QueueType.CLASSIC, False, {}))
    refused = refused_by_table(uses, version, deprecated)
    assert response.is_error == refused, (version, deprecated, response.text)


TRANSIENT = """\
version: 1
name: "{{ stack }}"
vhosts:
  - name: "{{ vhost }}"
    queues:
      - {name: passing, durable: false}
"""


def test_apply_declares_a_transient_queue_where_the_broker_permits_it(broker: Broker) -> None:
    permitted = deprecated_features(broker).get("transient_nonexcl_queues", True)
    applied = broker.run("apply", str(broker.spec(TRANSIENT)), "--auto-approve")
    if not permitted:  # a broker that denies it: refused before any change, saying how
        assert applied.exit_code == 1, applied.output
        assert "transient_nonexcl_queues denied" in applied.output
        assert broker.get("/queues/{vhost}/passing") is None
        return
    assert applied.exit_code == 0, applied.output
    assert broker.get("/queues/{vhost}/passing")["durable"] is False
    again = broker.run("plan", str(broker.spec(TRANSIENT)), "--detailed-exitcode")
    assert again.exit_code == 0, again.output


def server_named_binding(vhost: str, written_by: str) -> dict[str, Any]:
    """A definitions file of ``written_by`` binding a server-named queue (a client's)."""
    return {
        "rabbit_version": written_by,
        "vhosts": [{"name": vhost}],
        "queues": [
            {"name": "amq.gen-Zq3kP0vY7tLm", "vhost": vhost, "durable": False,
             "auto_delete": True, "arguments": {}},
            {"name": "kept", "vhost": vhost, "durable": True, "auto_delete": False,
             "arguments": {}},
        ],
        "bindings": [
            {"source": "amq.topic", "vhost": vhost, "destination": "amq.gen-Zq3kP0vY7tLm",
             "destination_type": "queue", "routing_key": "k", "arguments": {}},
        ],
    }  # fmt: skip


@pytest.mark.parametrize("written_by", ["3.7.13", "4.0.5"])
def test_a_server_named_binding_is_refused_exactly_where_the_broker_s_import_refuses_it(
    broker: Broker, written_by: str
) -> None:
    # the broker's own import decides by its version, not by the file's: so does apply
    own = f"{broker.vhost}-own"
    imported = broker.http.post("/definitions", json=server_named_binding(own, written_by))
    broker.http.delete(f"/vhosts/{quote(own, safe='')}")
    source = broker.tmp / f"{broker.stack}.json"
    source.write_text(json.dumps(server_named_binding(broker.vhost, written_by)))
    argv = ["apply", str(source), "--auto-approve", "--management-url", broker.management_url]
    try:
        applied = CliRunner().invoke(cli, [*argv, "--url", broker.amqp_url])
        if imported.is_error:
            shown = ".".join(str(p) for p in version_of(broker))
            assert applied.exit_code == 1, applied.output
            assert "refuse feature import of a binding to a server-named (amq.gen-*) queue" in (
                applied.output
            )
            assert f"(the broker runs {shown})" in applied.output
            assert broker.get("/queues/{vhost}/kept") is None  # nothing was changed
        else:
            assert applied.exit_code == 0, applied.output
            assert "left out: binding" in applied.output and "amq.gen-Zq3kP0vY7tLm" in (
                applied.output
            )
            assert broker.get("/queues/{vhost}/kept") is not None
    finally:
        broker.http.delete(f"/global-parameters/{quote('rabbitry.stack.' + broker.stack)}")


def test_a_plan_toward_4_3_says_it_would_refuse_a_binding_the_broker_takes_today(
    broker: Broker,
) -> None:
    # a 3.x broker takes the file (the binding left out); a plan looking ahead to 4.3 warns
    source = broker.tmp / f"{broker.stack}-ahead.json"
    source.write_text(json.dumps(server_named_binding(broker.vhost, "3.7.13")))
    planned = CliRunner().invoke(
        cli,
        ["plan", str(source), "--target-version", "4.3", "--management-url",
         broker.management_url, "--url", broker.amqp_url],
    )  # fmt: skip
    if version_of(broker) >= (4, 0):  # the broker itself refuses it: so does the plan
        assert planned.exit_code == 1, planned.output
        assert "(the broker runs" in planned.output
        return
    assert planned.exit_code == 0, planned.output
    assert "left out: binding" in planned.output
    assert "RabbitMQ 4.3 would refuse: binding" in planned.output
    assert "(the target is 4.3)" in planned.output
    assert "nothing in this spec is refused" not in planned.output


@pytest.mark.parametrize(
    ("apply_to", "definition"),
    [
        ("queues", {"ha-mode": "all"}),
        ("quorum_queues", {"max-length": 10}),
        ("all", {"queue-master-locator": "client-local"}),
    ],
)
def test_the_broker_refuses_a_policy_exactly_when_the_table_says_so(
    broker: Broker, apply_to: str, definition: dict[str, Any]
) -> None:
    version = version_of(broker)
    response = broker.http.put(
        f"/policies/{broker.vhost}/p",
        json={"pattern": "^nothing$", "apply-to": apply_to, "definition": definition},
    )
    uses = list(uses_of_policy(apply_to, definition))
    refused = refused_by_table(uses, version, deprecated_features(broker))
    assert response.is_error == refused, (version, response.text)


def test_the_broker_has_x_local_random_exactly_when_the_table_says_so(broker: Broker) -> None:
    version = version_of(broker)
    types = {t["name"] for t in broker.get("/overview")["exchange_types"]}
    refused = refused_by_table(list(uses_of_exchange("x-local-random")), version)
    assert ("x-local-random" not in types) == refused


ONE_POLICY = """\
version: 1
name: "{{ stack }}"
vhosts:
  - name: "{{ vhost }}"
    queues:
      - {name: fresh}
    policies:
      - POLICY
"""
SPEC_4X = ONE_POLICY.replace(
    "POLICY", '{name: mirrored, pattern: "^fresh$", definition: {ha-mode: all}}'
)
SPEC_3X = ONE_POLICY.replace(
    "POLICY",
    '{name: capped, pattern: "^fresh$", apply_to: classic_queues, definition: {max-length: 5}}',
)


def test_plan_refuses_what_the_live_broker_refuses_before_any_change(broker: Broker) -> None:
    version = version_of(broker)
    shown = ".".join(str(p) for p in version)
    spec = broker.spec(SPEC_4X if version >= (4, 0) else SPEC_3X)
    for verb in ("plan", "apply"):
        args = (verb, str(spec)) + (("--auto-approve",) if verb == "apply" else ())
        refused = broker.run(*args)
        assert refused.exit_code == 1, refused.output
        assert f"the broker (RabbitMQ {shown}) cannot hold this spec" in refused.output
        assert f"(the broker runs {shown})" in refused.output
        if version >= (4, 0):
            assert "RabbitMQ 4.0 and newer refuse policy key ha-mode" in refused.output
        else:
            assert "policy apply-to classic_queues needs RabbitMQ 3.12 or newer" in refused.output
        assert broker.get("/queues/{vhost}/fresh") is None  # nothing was changed


UPGRADE = """\
version: 1
name: "{{ stack }}"
vhosts:
  - name: "{{ vhost }}"
    queues:
      - {name: lazy, arguments: {x-queue-mode: lazy, x-queue-version: 1}}
      - {name: work, type: quorum, delivery_limit: 5}
      - {name: open, type: quorum}
"""


def test_target_version_lists_what_an_upgrade_to_4_3_would_break(broker: Broker) -> None:
    spec = broker.spec(UPGRADE)
    runs = version_of(broker)
    planned = broker.run("plan", str(spec), "--target-version", "4.3", "--json")
    if runs >= (4, 3):
        # no upgrade: the broker itself refuses the spec, before any change
        assert planned.exit_code == 1, planned.output
        assert "RabbitMQ 4.3 and newer refuse queue argument x-queue-version" in planned.output
        assert broker.get("/queues/{vhost}/lazy") is None
        return
    assert planned.exit_code == 0, planned.output
    assert (
        "RabbitMQ 4.3 would refuse: queue lazy (vhost "
        f"{broker.vhost}): RabbitMQ 4.3 and newer refuse queue argument x-queue-version"
        in planned.stdout
    )
    # ignored since 3.12 but still declared by 4.3: noted, never refused
    assert "refuse queue argument x-queue-mode" not in planned.stdout
    assert "accept queue argument x-queue-mode without effect" in planned.stdout
    assert "(the target is 4.3)" in planned.stdout
    # the delivery limit default of 4.0 is news only to a broker older than 4.0
    crossed = (
        "RabbitMQ 4.0 changed the default of queue argument x-delivery-limit" in planned.stdout
    )
    assert crossed == (runs < (4, 0))
    assert "queue work" not in planned.stdout
    assert broker.get("/queues/{vhost}/lazy") is None  # a plan changes nothing
    plain = broker.run("plan", str(spec))
    assert plain.exit_code == 0, plain.output
    assert "would refuse" not in plain.output


def test_the_python_api_plans_with_a_target_version_too(broker: Broker) -> None:
    spec = broker.spec(UPGRADE)

    def plan() -> rabbitry.Plan:
        return rabbitry.plan(
            spec,
            url=broker.amqp_url,
            management_url=broker.management_url,
            variables={"vhost": broker.vhost, "stack": broker.stack},
            target_version="4.3",
        )

    if version_of(broker) >= (4, 3):  # the broker itself refuses it
        with pytest.raises(RabbitryError, match="refuse queue argument x-queue-version"):
            plan()
    else:
        the_plan = plan()
        assert any(w.startswith("RabbitMQ 4.3 would refuse: queue lazy") for w in the_plan.warnings)
    assert broker.get("/queues/{vhost}/lazy") is None


def test_quorum_queues_refuse_x_max_priority_and_so_does_rabbitry(broker: Broker) -> None:
    """Every version from 3.10 to 4.3 refuses the argument on a quorum queue (4.0 and newer order
    a quorum queue by message priority without it): rabbitry says so before the broker does."""
    response = broker.http.put(
        f"/queues/{broker.vhost}/priority",
        json={"durable": True, "arguments": {"x-queue-type": "quorum", "x-max-priority": 5}},
    )
    assert response.is_error, (version_of(broker), response.text)
    spec = broker.spec(
        'version: 1\nname: "{{ stack }}"\nvhosts:\n  - name: "{{ vhost }}"\n    queues:\n'
        "      - {name: priority, type: quorum, arguments: {x-max-priority: 5}}\n"
    )
    refused = broker.run("validate", str(spec))
    assert refused.exit_code != 0
    assert "x-max-priority" in refused.output
