"""Definitions files as input, on a real broker: a definitions export of a vhost holding every
kind of object becomes a spec (import-definitions) that, applied where none of it exists, makes
the same definitions again, kind by kind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions
import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.early import DEFINITIONS_SECTIONS

from .conftest import Broker, with_credentials

KINDS = DEFINITIONS_SECTIONS

# Definitions files and their import differ between releases (rabbit_version, exported kinds).
pytestmark = pytest.mark.versions


def fill(broker: Broker, user: str, global_name: str) -> None:
    """One of every kind in the test's vhost (and a user and a global parameter of its own)."""
    v = broker.vhost

    def put(path: str, body: Any) -> None:
        broker.http.put(path, json=body).raise_for_status()

    put(f"/vhosts/{v}", {"description": "every kind", "tags": "imported,test"})
    put(f"/vhost-limits/{v}/max-queues", {"value": 500})
    put(f"/users/{user}", {"password": "us3r-pw", "tags": "monitoring"})
    put(f"/user-limits/{user}/max-connections", {"value": 7})
    put(f"/permissions/{v}/{user}", {"configure": "^$", "write": ".*", "read": "^work$"})
    put(f"/exchanges/{v}/orders", {"type": "topic", "durable": True})
    # 4.3 refuses a topic permission on an exchange that does not exist yet
    put(f"/topic-permissions/{v}/{user}", {"exchange": "orders", "write": "^a", "read": ".*"})
    # durable said each time: 4.3 made non-durable the default of PUT /api/exchanges
    put(
        f"/exchanges/{v}/audit",
        {"type": "fanout", "durable": True, "arguments": {"alternate-exchange": "orders"}},
    )
    put(f"/exchanges/{v}/hdr", {"type": "headers", "durable": True, "internal": True})
    put(f"/exchanges/{v}/spread", {"type": "x-consistent-hash", "durable": True})
    put(
        f"/queues/{v}/work",
        {"durable": True, "arguments": {"x-message-ttl": 60000, "x-dead-letter-exchange": "audit"}},
    )
    put(f"/queues/{v}/qq", {"durable": True, "arguments": {"x-queue-type": "quorum"}})
    put(f"/queues/{v}/st", {"durable": True, "arguments": {"x-queue-type": "stream"}})
    for path, body in (
        ("e/orders/q/work", {"routing_key": "order.*"}),
        ("e/orders/e/audit", {"routing_key": "#"}),
        ("e/hdr/q/qq", {"routing_key": "", "arguments": {"x-match": "all", "k": "v"}}),
        ("e/spread/q/work", {"routing_key": "3"}),
    ):
        broker.http.post(f"/bindings/{v}/{path}", json=body).raise_for_status()
    put(
        f"/policies/{v}/cap",
        {
            "pattern": "^work$",
            "definition": {"max-length": 1000},
            "apply-to": "queues",
            "priority": 1,
        },
    )
    put(
        f"/operator-policies/{v}/op",
        {"pattern": "^qq$", "definition": {"max-length": 5000}, "apply-to": "queues"},
    )
    put(
        f"/parameters/federation-upstream/{v}/up",
        {"value": {"uri": "amqp://fed:Fed3ration-pw@remote.invalid", "expires": 3600000}},
    )
    put(
        f"/parameters/shovel/{v}/sh",
        {
            "value": {
                "src-protocol": "amqp091",
                "src-uri": f"amqp:///{v}",
                "src-queue": "work",
                "dest-protocol": "amqp091",
                "dest-uri": f"amqp:///{v}",
                "dest-queue": "qq",
            }
        },
    )
    put(f"/global-parameters/{global_name}", {"value": {"every": "kind"}})


def mine(definitions: dict[str, Any], vhost: str, user: str, global_name: str) -> dict[str, Any]:
    """The definitions of one vhost, one user and one global parameter (the broker is shared)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        items = definitions.get(kind) or []
        if kind == "users":
            items = [i for i in items if i["name"] == user]
        elif kind == "vhosts":
            items = [i for i in items if i["name"] == vhost]
        elif kind == "global_parameters":
            items = [i for i in items if i["name"] == global_name]
        else:
            items = [i for i in items if i.get("vhost") == vhost]
        out[kind] = items
    return out


def renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every string equal to (or a URI ending in) an old name made the new one."""

    def rename(text: str) -> str:
        for old, new in names.items():
            if text == old:
                return new
            if text.endswith("/" + old):
                return text[: -len(old)] + new
        return text

    return each_string(value, rename)


def each_string(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` with every string in it, in lists and mappings too, changed by ``change``."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [each_string(v, change) for v in value]
    if isinstance(value, dict):
        return {k: each_string(v, change) for k, v in value.items()}
    return value


def canonical(items: list[Any]) -> list[str]:
    """Items as comparable text. A classic queue's `x-queue-type: classic` counts as unset:
    apply names the type of every queue (a vhost's default queue type must not change what
    it makes), and RabbitMQ 3.10 keeps the argument where 4.0 does not."""
    out = []
    for item in items:
        arguments = item.get("arguments")
        if isinstance(arguments, dict) and arguments.get("x-queue-type") == "classic":
            item = {
                **item,
                "arguments": {k: v for k, v in arguments.items() if k != "x-queue-type"},
            }
        out.append(json.dumps(item, sort_keys=True))
    return sorted(out)


def every_kind_renamed(broker: Broker, suffix: str) -> tuple[dict[str, str], dict[str, Any]]:
    """One of every kind filled in the test's vhost, and its definitions renamed for objects
    that do not exist yet (another vhost, user, global parameter: ``names``, old -> new)."""
    user, global_name = f"{broker.stack}-u", f"{broker.stack}-g"
    fill(broker, user, global_name)
    exported = mine(broker.get("/definitions"), broker.vhost, user, global_name)
    assert all(exported[kind] for kind in KINDS), {k: len(v) for k, v in exported.items()}
    names = {old: f"{old}{suffix}" for old in (broker.vhost, user, global_name)}
    expected = renamed(exported, names)
    expected["rabbit_version"] = broker.get("/overview")["rabbitmq_version"]
    return names, expected


def remove_renamed(broker: Broker, names: dict[str, str], stack: str) -> None:
    """What ``every_kind_renamed``'s definitions made, and the stack's record."""
    vhost, user, global_name = names.values()
    for path in (
        f"/vhosts/{vhost}",
        f"/users/{user}",
        f"/global-parameters/{global_name}",
        f"/global-parameters/rabbitry.stack.{stack}",
    ):
        broker.http.delete(path)


def test_a_definitions_file_round_trips_through_a_spec_kind_by_kind(broker: Broker) -> None:
    # the same definitions for objects that do not exist yet: another vhost, user, parameter
    names, expected = every_kind_renamed(broker, "-2")
    source = broker.tmp / "definitions.json"
    source.write_text(json.dumps(expected))
    spec = broker.tmp / "imported.yaml"
    stack = f"{broker.stack}-2"
    made = CliRunner().invoke(
        cli,
        ["import-definitions", str(source), "-o", str(spec), "--name", stack, "--users"],
        catch_exceptions=False,
    )
    assert made.exit_code == 0, made.output
    assert "RABBITRY_FEDERATION_UPSTREAM_UP_URI_PASSWORD" in made.output
    assert "Fed3ration-pw" not in spec.read_text() + made.output
    assert "left out" not in made.output, made.output

    env = {"RABBITRY_FEDERATION_UPSTREAM_UP_URI_PASSWORD": "Fed3ration-pw"}
    try:
        applied = CliRunner().invoke(
            cli,
            ["apply", str(spec), "--auto-approve", "--management-url", broker.management_url,
             "--url", broker.amqp_url],
            env=env,
            catch_exceptions=False,
        )  # fmt: skip
        assert applied.exit_code == 0, applied.output
        again = mine(broker.get("/definitions"), *names.values())
        for kind in KINDS:
            assert canonical(again[kind]) == canonical(expected[kind]), (kind, applied.output)
    finally:
        remove_renamed(broker, names, stack)


def test_plan_and_apply_take_a_definitions_file_as_the_spec(broker: Broker) -> None:
    """A team's definitions.json, as it is: planned, applied, then nothing left to do, and the
    broker's export equals the file kind by kind; the drift of one object shows."""
    names, expected = every_kind_renamed(broker, "-3")
    stack = f"{broker.stack}-3"
    source = broker.tmp / f"{stack}.json"  # the stack is named after the file
    source.write_text(json.dumps(expected))

    def run(*args: str) -> Any:
        verb, *rest = args
        argv = [verb, *rest, "--management-url", broker.management_url, "--url", broker.amqp_url]
        return CliRunner().invoke(cli, argv, catch_exceptions=False)

    try:
        templated = run("plan", str(source), "--var", "x=1")
        assert templated.exit_code == 1
        assert "a definitions file is not a template" in templated.output

        planned = run("plan", str(source), "--detailed-exitcode")
        assert planned.exit_code == 2, planned.output
        assert f"stack: {stack}" in planned.output
        assert f"+ vhost {names[broker.vhost]}" in planned.output
        assert f"+ queue {names[broker.vhost]}/work" in planned.output

        applied = run("apply", str(source), "--auto-approve")
        assert applied.exit_code == 0, applied.output
        assert "Fed3ration-pw" not in planned.output + applied.output
        again = mine(broker.get("/definitions"), *names.values())
        for kind in KINDS:
            assert canonical(again[kind]) == canonical(expected[kind]), (kind, applied.output)

        settled = run("plan", str(source), "--detailed-exitcode")
        assert settled.exit_code == 0, settled.output
        broker.http.delete(f"/queues/{names[broker.vhost]}/work").raise_for_status()
        drifted = run("plan", str(source), "--detailed-exitcode")
        assert drifted.exit_code == 2, drifted.output
        assert f"+ queue {names[broker.vhost]}/work" in drifted.output
    finally:
        remove_renamed(broker, names, stack)


def test_validate_reads_a_definitions_file_and_names_what_it_leaves_out(tmp_path: Path) -> None:
    source = tmp_path / "legacy defs.json"
    source.write_text(
        json.dumps(
            {
                "rabbit_version": "3.12.1",
                "vhosts": [{"name": "/"}],
                "parameters": [{"vhost": "/", "component": "mqtt-port", "name": "x", "value": 1}],
                "queues": [{"name": "jobs", "vhost": "/", "durable": True, "auto_delete": False,
                            "arguments": {"x-queue-type": "quorum"}}],
            }
        )
    )  # fmt: skip
    result = CliRunner().invoke(cli, ["validate", str(source)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "valid (1 vhost, 1 queue)" in result.stdout
    assert "left out: parameter //mqtt-port/x" in result.stderr
    as_json = CliRunner().invoke(cli, ["validate", "--json", str(source)])
    report = json.loads(as_json.stdout)
    assert report["valid"] and report["counts"]["queue"] == 1
    assert [p["severity"] for p in report["problems"]] == ["warning"], report
    assert report["problems"][0]["message"].startswith("left out: parameter //mqtt-port/x")

    # a spec written as JSON (it has `version:`) is still read as a spec
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"version": 1, "name": "s", "vhosts": [{"name": "v"}]}))
    assert CliRunner().invoke(cli, ["validate", str(spec)]).exit_code == 0
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"vhosts": [{"name": "/"}], "queues": [{"vhost": "/"}]}))
    for command in ("validate", "import-definitions"):
        refused = CliRunner().invoke(cli, [command, str(broken)])
        assert refused.exit_code == 1, refused.output
        assert "broken.json: queues[0]: the entry has no `name`" in refused.output


def test_what_a_spec_cannot_hold_is_named_and_the_rest_imported(tmp_path: Path) -> None:
    source = tmp_path / "defs.json"
    source.write_text(
        json.dumps(
            {
                "rabbit_version": "3.8.9",
                "users": [
                    {
                        "name": "app",
                        "password_hash": "",
                        "passwordless": True,
                        "tags": "management,monitoring",
                    }
                ],
                "vhosts": [{"name": "/"}],
                "permissions": [],
                "parameters": [
                    {"vhost": "/", "component": "mqtt-port", "name": "x", "value": 1},
                    {
                        "vhost": "/",
                        "component": "vhost-limits",
                        "name": "limits",
                        "value": {"max-connections": 4},
                    },
                ],
                "global_parameters": [{"name": "internal_cluster_id", "value": "rabbitmq-1"}],
                "policies": [],
                "queues": [
                    {
                        "name": "jobs",
                        "vhost": "/",
                        "durable": True,
                        "auto_delete": False,
                        "arguments": {"x-queue-type": "quorum"},
                    }
                ],
                "exchanges": [
                    {
                        "name": "recent",
                        "vhost": "/",
                        "type": "x-recent-history",
                        "durable": True,
                        "auto_delete": False,
                        "internal": False,
                        "arguments": {},
                    }
                ],
                "bindings": [
                    {
                        "source": "recent",
                        "vhost": "/",
                        "destination": "jobs",
                        "destination_type": "queue",
                        "routing_key": "",
                        "arguments": {},
                    }
                ],
            }
        )
    )
    result = CliRunner().invoke(
        cli, ["import-definitions", str(source), "--users"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    for named in (
        "kept unchecked: exchange //recent: type 'x-recent-history' is not one rabbitry knows",
        "left out: parameter //mqtt-port/x",
        "left out: global parameter internal_cluster_id",
    ):
        assert named in result.stderr, result.stderr
    assert "name: jobs" in result.stdout and "type: quorum" in result.stdout
    # a plugin's exchange type is kept, with its binding
    assert "type: x-recent-history" in result.stdout and "source: recent" in result.stdout
    assert "left out: exchange" not in result.stderr
    assert "max-connections: 4" in result.stdout
    assert "- management" in result.stdout and "name: defs" in result.stdout


# Exports every vhost of the broker: a vhost another test deletes meanwhile is a 404 there.
@pytest.mark.broker_wide
def test_export_names_what_it_leaves_out_and_exports_every_vhost(broker: Broker) -> None:
    v = broker.vhost
    broker.http.put(f"/queues/{v}/jobs", json={"durable": True}).raise_for_status()
    # what the federation plugin leaves in a vhost another broker federates from
    broker.http.put(
        f"/exchanges/{v}/federation: up -> rabbit@remote",
        json={"type": "topic", "internal": True, "arguments": {"x-internal-purpose": "federation"}},
    ).raise_for_status()
    broker.http.put(
        f"/queues/{v}/federation: up -> rabbit@remote",
        json={"durable": True, "arguments": {"x-internal-purpose": "federation"}},
    ).raise_for_status()
    broker.http.post(
        f"/bindings/{v}/e/federation: up -> rabbit@remote/q/jobs", json={"routing_key": "#"}
    ).raise_for_status()
    spec = broker.tmp / "export.yaml"
    result = broker.run("export", "--vhost", v, "-o", str(spec))
    assert result.exit_code == 0, result.output
    for named in (
        f"left out: exchange {v}/federation: up -> rabbit@remote: internal to the federation",
        f"left out: queue {v}/federation: up -> rabbit@remote: internal to the federation",
        f"left out: binding {v}/federation: up -> rabbit@remote -> jobs",
    ):
        assert named in result.output, result.output
    text = spec.read_text()
    assert "name: jobs" in text and "x-internal-purpose" not in text
    checked = CliRunner().invoke(cli, ["validate", str(spec)], catch_exceptions=False)
    assert checked.exit_code == 0, checked.output  # the export is a spec rabbitry accepts
    # and it applies back: what the user owns is adopted, the plugin's objects stay untouched
    applied = broker.run("apply", str(spec), "--auto-approve", "--prune")
    assert applied.exit_code == 0, applied.output
    assert "federation" not in applied.output
    again = broker.run("plan", str(spec), "--detailed-exitcode")
    assert again.exit_code == 0, again.output
    assert broker.queue_names() == {"jobs", "federation: up -> rabbit@remote"}

    every = broker.run("export", "--all-vhosts", "--name", "whole")
    assert every.exit_code == 0, every.output
    assert f"- name: {v}" in every.stdout and "name: whole" in every.stdout
    assert "- name: /\n" in every.stdout  # the default vhost too: every vhost there is


def test_export_keeps_a_plugin_exchange_type_and_the_spec_applies_back(broker: Broker) -> None:
    """x-local-random is core since RabbitMQ 4.0; an older broker lacks it and is told so."""
    v = broker.vhost
    overview = broker.get("/overview")
    has_type = "x-local-random" in {t["name"] for t in overview["exchange_types"]}
    assert has_type == (int(overview["rabbitmq_version"].split(".")[0]) >= 4)
    # an argument no check knows (the broker keeps any x- argument)
    broker.http.put(
        f"/queues/{v}/jobs", json={"durable": True, "arguments": {"x-team": "billing"}}
    ).raise_for_status()
    if has_type:
        broker.http.put(
            f"/exchanges/{v}/pick", json={"type": "x-local-random", "durable": True}
        ).raise_for_status()
        broker.http.post(f"/bindings/{v}/e/pick/q/jobs", json={}).raise_for_status()
    spec = broker.tmp / "export.yaml"
    exported = broker.run("export", "--vhost", v, "--name", broker.stack, "-o", str(spec))
    assert exported.exit_code == 0, exported.output
    if not has_type:
        # the broker cannot make one: a spec asking for it is refused before any change
        spec.write_text(
            spec.read_text().replace(
                "    queues:",
                "    exchanges:\n      - {name: pick, type: x-local-random}\n    queues:",
            )
        )
        refused = broker.run("plan", str(spec))
        assert refused.exit_code == 1, refused.output
        assert "the broker has no exchange type x-local-random" in refused.output
        return
    assert f"kept unchecked: exchange {v}/pick: type 'x-local-random'" in exported.output
    assert f"kept unchecked: queue {v}/jobs: keys x-team" in exported.output
    text = spec.read_text()
    assert "type: x-local-random" in text and "source: pick" in text
    assert "unchecked_arguments" in text and "x-team: billing" in text

    checked = CliRunner().invoke(cli, ["validate", str(spec)], catch_exceptions=False)
    assert checked.exit_code == 0, checked.output
    assert "'x-local-random' is not one rabbitry knows" in checked.output

    # gone from the broker, the export declares it again, with its binding
    broker.http.delete(f"/exchanges/{v}/pick").raise_for_status()
    applied = broker.run("apply", str(spec), "--auto-approve")
    assert applied.exit_code == 0, applied.output
    assert broker.get("/exchanges/{vhost}/pick")["type"] == "x-local-random"
    bound = broker.get("/exchanges/{vhost}/pick/bindings/source")
    assert [b["destination"] for b in bound] == ["jobs"]
    again = broker.run("plan", str(spec), "--detailed-exitcode")
    assert again.exit_code == 0, again.output  # the broker matches the export


OLDER_SHAPES = """{
  "rabbit_version": "3.8.9",
  "rabbitmq_version": "3.8.9",
  "users": [
    {"name": "OPS", "hashing_algorithm": "rabbit_password_hashing_sha256",
     "password_hash": "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR",
     "tags": "administrator,monitoring"},
    {"name": "BILLING", "hashing_algorithm": "rabbit_password_hashing_sha256",
     "password_hash": "A0EX\\/2hiwrIDKFS+nEqwbCGcVxwEkDBFF3mBfkNW53KFFk64",
     "tags": [], "limits": {}}
  ],
  "vhosts": [
    {"name": "LEDGER", "limits": [],
     "metadata": {"description": "Ledger events", "tags": ["finance"],
                  "default_queue_type": "quorum"}},
    {"name": "LEGACY"}
  ],
  "permissions": [
    {"user": "BILLING", "vhost": "LEDGER", "configure": "^billing\\\\.", "write": ".*",
     "read": ".*"}
  ],
  "topic_permissions": [
    {"user": "BILLING", "vhost": "LEDGER", "exchange": "amq.topic", "write": "^invoices\\\\.",
     "read": ".*"}
  ],
  "parameters": [
    {"vhost": "LEDGER", "component": "operator_policy", "name": "caps",
     "value": {"pattern": "^billing\\\\.", "priority": 2, "apply-to": "queues",
               "definition": {"max-length": 50000, "message-ttl": 86400000}}}
  ],
  "global_parameters": [],
  "policies": [
    {"vhost": "LEGACY", "name": "overflow", "pattern": "^work$", "apply-to": "queues",
     "definition": {"overflow": "reject-publish", "max-length": 1000}, "priority": 0}
  ],
  "queues": [
    {"name": "billing.invoices", "vhost": "LEDGER", "durable": true, "auto_delete": false,
     "type": "quorum", "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 7}},
    {"name": "work", "vhost": "LEGACY", "durable": true, "auto_delete": false, "arguments": {}},
    {"name": "scratch", "vhost": "LEGACY", "durable": false, "auto_delete": false,
     "arguments": {"x-message-ttl": 60000}}
  ],
  "exchanges": [
    {"name": "invoices", "vhost": "LEDGER", "type": "topic", "durable": true,
     "auto_delete": false, "internal": false, "arguments": {}}
  ],
  "bindings": [
    {"source": "invoices", "vhost": "LEDGER", "destination": "billing.invoices",
     "destination_type": "queue", "routing_key": "invoice.#", "arguments": {}},
    {"source": "amq.direct", "vhost": "LEGACY", "destination": "work",
     "destination_type": "queue", "routing_key": "work", "arguments": {}}
  ]
}"""
"""A definitions file in the shapes older exports and hand-written files have: user tags as one
comma-separated string, vhost limits as an empty list, metadata with a default queue type, a
queue's `type` field beside its `x-queue-type`, an operator policy given as a runtime parameter,
a binding from a built-in exchange. Upper-case words are replaced by each test's own names."""


def test_a_file_in_older_shapes_makes_what_the_brokers_own_import_makes(broker: Broker) -> None:
    def named(side: str) -> dict[str, str]:
        return {
            w: f"{broker.vhost}-{side}-{w.lower()}" for w in ("OPS", "BILLING", "LEDGER", "LEGACY")
        }

    def text(names: dict[str, str]) -> str:
        out = OLDER_SHAPES
        if broker.version >= (4, 3):  # which refuses non-durable, non-exclusive queues by default
            out = out.replace(
                '"scratch", "vhost": "LEGACY", "durable": false',
                '"scratch", "vhost": "LEGACY", "durable": true',
            )
        for word, name in names.items():
            out = out.replace(f'"{word}"', f'"{name}"')
        return out

    ours, theirs = named("ours"), named("theirs")
    source = broker.tmp / "older.json"
    source.write_text(text(ours))
    spec = broker.tmp / "older.yaml"
    stack = f"{broker.stack}-older"
    try:
        made = CliRunner().invoke(
            cli,
            ["import-definitions", str(source), "-o", str(spec), "--name", stack, "--users"],
            catch_exceptions=False,
        )  # fmt: skip
        assert made.exit_code == 0 and "left out" not in made.output, made.output
        applied = CliRunner().invoke(
            cli,
            ["apply", str(spec), "--auto-approve", "--management-url", broker.management_url,
             "--url", broker.amqp_url],
            catch_exceptions=False,
        )  # fmt: skip
        assert applied.exit_code == 0, applied.output
        broker.http.post("/definitions", json=json.loads(text(theirs))).raise_for_status()

        # broker-wide, beside other tests deleting their vhosts: read as rabbitry reads it,
        # asked again when a vhost listed vanished before it was read (an empty HTTP 500; a CI
        # run on 3.10 met one)
        with ManagementClient(broker.management_url) as client:
            everything = client.definitions()

        def held(names: dict[str, str]) -> dict[str, list[str]]:
            vhosts, users = {names["LEDGER"], names["LEGACY"]}, {names["OPS"], names["BILLING"]}
            back = {name: word for word, name in names.items()}
            out = {}
            for kind in KINDS:
                items = everything.get(kind) or []
                if kind == "users":
                    items = [i for i in items if i["name"] in users]
                elif kind == "vhosts":
                    items = [i for i in items if i["name"] in vhosts]
                else:
                    items = [i for i in items if i.get("vhost") in vhosts]
                out[kind] = canonical(renamed(items, back))
            return out

        assert held(ours) == held(theirs)
        assert held(ours)["queues"] and held(ours)["parameters"] and held(ours)["users"]
    finally:
        for names in (ours, theirs):
            for word in ("LEDGER", "LEGACY"):
                broker.http.delete(f"/vhosts/{names[word]}")
            for word in ("OPS", "BILLING"):
                broker.http.delete(f"/users/{names[word]}")
        broker.http.delete(f"/global-parameters/rabbitry.stack.{stack}")


def plaintext_definitions(broker: Broker, suffix: str, algorithm: str | None) -> dict[str, Any]:
    """A definitions file as the official Docker image's `load_definitions` takes it: a user
    with a plain password (and maybe the hashing algorithm to use), allowed into a vhost."""
    vhost, user = f"{broker.vhost}{suffix}", f"{broker.stack}{suffix}-u"
    entry: dict[str, Any] = {"name": user, "password": "Plain-pw 1", "tags": ""}
    if algorithm:
        entry["hashing_algorithm"] = algorithm
    return {
        "users": [entry],
        "vhosts": [{"name": vhost}],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
        ],
    }


def logs_in(broker: Broker, vhost: str, user: str, password: str) -> bool:
    """Whether ``user`` opens an AMQP connection to ``vhost`` with ``password``."""
    url = with_credentials(broker.amqp_url, user, password) + quote(vhost, safe="")
    try:
        pika.BlockingConnection(pika.URLParameters(url)).close()
    except pika.exceptions.ProbableAuthenticationError:
        return False
    return True


def run_on(broker: Broker, *args: str) -> Any:
    """A command against the test broker, without the test's template variables (a
    definitions file takes none)."""
    verb, *rest = args
    argv = [verb, *rest, "--management-url", broker.management_url, "--url", broker.amqp_url]
    return CliRunner().invoke(cli, argv, catch_exceptions=False)


def test_a_user_from_a_plaintext_password_file_logs_in_after_apply(broker: Broker) -> None:
    definitions = plaintext_definitions(broker, "-p1", None)
    vhost, user = definitions["vhosts"][0]["name"], definitions["users"][0]["name"]
    stack = f"{broker.stack}-p1"
    source = broker.tmp / f"{stack}.json"
    source.write_text(json.dumps(definitions))
    try:
        applied = run_on(broker, "apply", str(source), "--auto-approve")
        assert applied.exit_code == 0, applied.output
        assert "Plain-pw" not in applied.output
        assert logs_in(broker, vhost, user, "Plain-pw 1")
        assert not logs_in(broker, vhost, user, "another")
        # the password, compared with the broker's hash, matches: nothing left to change
        settled = run_on(broker, "plan", str(source), "--detailed-exitcode")
        assert settled.exit_code == 0, settled.output
    finally:
        remove_renamed(broker, {"v": vhost, "u": user, "g": "-"}, stack)


def test_a_user_from_a_plaintext_password_file_logs_in_after_import_and_apply(
    broker: Broker,
) -> None:
    definitions = plaintext_definitions(broker, "-p2", "rabbit_password_hashing_sha512")
    vhost, user = definitions["vhosts"][0]["name"], definitions["users"][0]["name"]
    stack = f"{broker.stack}-p2"
    source, spec = broker.tmp / "plain.json", broker.tmp / "plain.yaml"
    source.write_text(json.dumps(definitions))
    try:
        made = broker.run(
            "import-definitions", str(source), "-o", str(spec), "--name", stack, "--users"
        )
        assert made.exit_code == 0, made.output
        text = spec.read_text()
        assert "Plain-pw" not in text + made.output
        assert "password_hash:" in text and "rabbit_password_hashing_sha512" in text
        applied = run_on(broker, "apply", str(spec), "--auto-approve")
        assert applied.exit_code == 0, applied.output
        assert logs_in(broker, vhost, user, "Plain-pw 1")
        assert not logs_in(broker, vhost, user, "another")
    finally:
        remove_renamed(broker, {"v": vhost, "u": user, "g": "-"}, stack)


def test_an_export_of_limits_and_a_direct_shovel_validates_and_applies_back(
    broker: Broker,
) -> None:
    v = broker.vhost
    broker.http.put(f"/vhost-limits/{v}/max-queues", json={"value": 50}).raise_for_status()
    broker.http.put(f"/queues/{v}/a", json={"durable": True}).raise_for_status()
    broker.http.put(
        f"/parameters/shovel/{v}/sh",
        json={
            "value": {
                "src-protocol": "amqp091",
                "src-uri": f"amqp:///{quote(v, safe='')}",
                "src-queue": "a",
                "dest-protocol": "amqp091",
                "dest-uri": ["amqp://", f"amqp:///{quote(v, safe='')}"],
                "dest-queue": "b",
            }
        },
    ).raise_for_status()
    spec = broker.tmp / "export.yaml"
    exported = broker.run("export", "--vhost", v, "--name", broker.stack, "-o", str(spec))
    assert exported.exit_code == 0, exported.output
    text = spec.read_text()
    assert "vhost-limits" not in text and "max-queues: 50" in text  # the limits, once
    checked = CliRunner().invoke(cli, ["validate", str(spec)], catch_exceptions=False)
    assert checked.exit_code == 0, checked.output
    applied = broker.run("apply", str(spec), "--auto-approve")
    assert applied.exit_code == 0, applied.output
    settled = broker.run("plan", str(spec), "--detailed-exitcode")
    assert settled.exit_code == 0, settled.output


def test_a_shovel_the_broker_would_refuse_is_found_before_the_first_change(
    broker: Broker,
) -> None:
    """A URI without a host connects inside the node as the user applying: into a vhost that
    user may not enter, the broker refuses the shovel (HTTP 400), so apply refuses first."""
    other = f"{broker.vhost}-sealed"
    broker.http.put(f"/vhosts/{other}", json={}).raise_for_status()
    connected = broker.get("/whoami")["name"]
    broker.http.delete(f"/permissions/{other}/{connected}").raise_for_status()
    fresh = f"{broker.vhost}-new"
    definitions = {
        "vhosts": [{"name": fresh}],
        "queues": [{"name": "a", "vhost": fresh, "durable": True}],
        "parameters": [
            {
                "component": "shovel",
                "name": "sh",
                "vhost": fresh,
                "value": {
                    "src-protocol": "amqp091",
                    "src-uri": f"amqp:///{fresh}",
                    "src-queue": "a",
                    "dest-protocol": "amqp091",
                    "dest-uri": f"amqp:///{other}",
                    "dest-queue": "b",
                },
            }
        ],
    }
    source = broker.tmp / f"{broker.stack}-sh.json"
    source.write_text(json.dumps(definitions))
    try:
        planned = run_on(broker, "plan", str(source))
        assert f"apply will refuse: parameter {fresh}/shovel/sh: its dest-uri" in planned.output
        applied = run_on(broker, "apply", str(source), "--auto-approve")
        assert applied.exit_code == 1, applied.output
        assert "nothing was applied" in applied.output
        assert "may not connect to; the broker refuses such a shovel" in applied.output
        assert broker.get(f"/vhosts/{quote(fresh, safe='')}") is None  # no change was made
    finally:
        broker.http.delete(f"/vhosts/{other}")
        broker.http.delete(f"/vhosts/{fresh}")


def test_export_users_all_keeps_a_user_without_any_permission(broker: Broker) -> None:
    watcher = f"{broker.stack}-watch"
    broker.http.put(
        f"/users/{watcher}", json={"password": "w-pw", "tags": "monitoring"}
    ).raise_for_status()
    try:
        some = broker.run("export", "--vhost", broker.vhost, "--users")
        assert some.exit_code == 0, some.output
        assert f"name: {watcher}" not in some.stdout
        every = broker.run("export", "--vhost", broker.vhost, "--users", "all")
        assert every.exit_code == 0, every.output
        assert f"name: {watcher}" in every.stdout and "- monitoring" in every.stdout
    finally:
        broker.http.delete(f"/users/{watcher}")


def test_import_definitions_takes_one_vhost_and_users_only_when_asked(broker: Broker) -> None:
    definitions = plaintext_definitions(broker, "-s", None)
    definitions["vhosts"].append({"name": "elsewhere"})
    definitions["users"].append({"name": "root", "password_hash": "", "passwordless": True})
    definitions["queues"] = [{"name": "q", "vhost": "elsewhere", "durable": True}]
    source = broker.tmp / "shared.json"
    source.write_text(json.dumps(definitions))
    vhost, user = definitions["vhosts"][0]["name"], definitions["users"][0]["name"]

    bare = broker.run("import-definitions", str(source), "--vhost", vhost)
    assert bare.exit_code == 0, bare.output
    assert "note: 2 user(s) of the file were left out: --users takes them" in bare.stderr
    assert "users:" not in bare.stdout and "permissions:" not in bare.stdout
    assert "elsewhere" not in bare.stdout

    some = broker.run("import-definitions", str(source), "--vhost", vhost, "--users")
    assert some.exit_code == 0, some.output
    assert f"name: {user}" in some.stdout and "name: root" not in some.stdout
    every = broker.run("import-definitions", str(source), "--vhost", vhost, "--users", "all")
    assert "name: root" in every.stdout and f"name: {user}" in every.stdout
