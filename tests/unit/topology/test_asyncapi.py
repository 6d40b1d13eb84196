"""`rabbitry asyncapi`: documents of the example specs and of typed handlers validate against
the official AsyncAPI 3.0 JSON Schema (installed by scripts/setup.sh from the @asyncapi/specs
package), channels carry the AMQP bindings, typed bodies become message schemas, and no password
reaches the document."""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from jsonschema import Draft7Validator
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic reads typing's only from Python 3.12

from rabbitry.cli import cli
from rabbitry.consumer import App, IncomingMessage
from rabbitry.consumer.handler_docs import body_type_name, handler_docs
from rabbitry.topology import expand, load_spec
from rabbitry.topology.asyncapi import AsyncApiError, HandlerDoc, Server, asyncapi_document
from rabbitry.topology.primitives import Exchange, Queue, Topology, Vhost

ROOT = Path(__file__).parents[3]
SCHEMA_FILE = ROOT / ".rabbitry" / "asyncapi" / "asyncapi-3.0.0.schema.json"


@pytest.fixture(scope="module")
def schema() -> Draft7Validator:
    if not SCHEMA_FILE.is_file():
        pytest.fail(f"{SCHEMA_FILE} is missing: run scripts/setup.sh (it installs the schema)")
    document = json.loads(SCHEMA_FILE.read_text())
    Draft7Validator.check_schema(document)
    return Draft7Validator(document)


def problems_of(schema: Draft7Validator, document: Any) -> list[str]:
    return [
        f"/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in schema.iter_errors(document)
    ]


def valid(schema: Draft7Validator, document: Any) -> Any:
    problems = problems_of(schema, document)
    assert not problems, "\n".join(problems[:20])
    return document


def test_the_schema_finds_what_breaks_a_document(schema: Draft7Validator) -> None:
    spec = load_spec(ROOT / "examples" / "shop.yaml")
    document = valid(schema, asyncapi_document(expand(spec), title="shop", version="1"))
    broken = copy.deepcopy(document)
    del broken["info"]["version"]
    channel = next(iter(broken["channels"]))
    broken["channels"][channel]["bindings"] = {"amqp": {"is": "exchange"}}
    problems = problems_of(schema, broken)
    assert any("'version' is a required property" in p for p in problems), problems
    assert any(p.startswith(f"/channels/{channel}") for p in problems), problems


@pytest.fixture
def own_app_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--app` loads the app as `worker run` does: undo what that sets for the process."""
    monkeypatch.setattr(App, "views", App.views)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.mark.parametrize(
    ("spec", "app"),
    [
        ("delays.yaml", "examples/order_worker.py:app"),
        ("delays.yaml", None),
        ("shop.yaml", None),
        ("broker.yaml", None),
    ],
)
def test_the_document_of_each_example_validates(
    schema: Draft7Validator,
    spec: str,
    app: str | None,
    own_app_state: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(
        cli, ["asyncapi", f"examples/{spec}", *(["--app", app] if app else [])]
    )
    assert result.exit_code == 0, result.output
    document = valid(schema, json.loads(result.stdout))
    assert document["asyncapi"] == "3.0.0"
    if app is not None:
        operation = document["operations"]["receive-orders_work"]
        assert operation["action"] == "receive"
        assert operation["channel"] == {"$ref": "#/channels/queue-orders_work"}
        order = document["components"]["messages"]["orders_work-Order"]
        assert order["payload"]["properties"]["order"]["type"] == "integer"


SPEC = """
version: 1
name: shop
broker: {url: "amqp://app:s3cret-pw@rabbit.internal:5671/"}
vhosts:
  - name: shop
    exchanges:
      - {name: shop.events, type: topic}
    queues:
      - {name: orders}
      - {name: refunds}
      - {name: audit}
    bindings:
      - {source: shop.events, destination: orders, routing_key: order.*}
      - {source: shop.events, destination: refunds, routing_key: refund.#}
"""


class Address(BaseModel):
    street: str
    city: str


class Order(BaseModel):
    """An order as the shop publishes it."""

    id: int
    ship_to: Address


@dataclass
class Refund:
    order: int
    amount: float


class AuditEntry(TypedDict):
    who: str
    what: str


@pytest.fixture
def typed_app(tmp_path: Path) -> App:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    app = App(load_spec(path))

    @app.handler("orders")
    def take_order(order: Order, message: IncomingMessage) -> None:
        """Reserve the stock of an order."""

    @app.handler("refunds")
    async def refund(body: Refund) -> None:
        pass

    @app.handler("audit")
    def audit(entry: AuditEntry) -> None:
        pass

    return app


def test_typed_handlers_give_their_bodies_as_message_schemas(
    schema: Draft7Validator, typed_app: App
) -> None:
    spec = typed_app.spec
    assert spec is not None
    document = valid(schema, asyncapi_document(expand(spec), handlers=handler_docs(typed_app)))
    messages = document["components"]["messages"]
    order = messages["orders-Order"]["payload"]
    assert order["required"] == ["id", "ship_to"]
    assert order["properties"]["ship_to"] == {"$ref": "#/components/schemas/Address"}
    assert document["components"]["schemas"]["Address"]["required"] == ["street", "city"]
    assert set(messages["refunds-Refund"]["payload"]["properties"]) == {"order", "amount"}
    assert set(messages["audit-AuditEntry"]["payload"]["properties"]) == {"who", "what"}
    operation = document["operations"]["receive-orders"]
    assert operation["summary"] == "Reserve the stock of an order."
    assert operation["title"].endswith("take_order")
    assert operation["messages"] == [{"$ref": "#/channels/queue-orders/messages/orders-Order"}]


def test_an_exchange_channel_carries_its_bindings_and_the_messages_of_its_queues(
    typed_app: App,
) -> None:
    spec = typed_app.spec
    assert spec is not None
    document = asyncapi_document(expand(spec), handlers=handler_docs(typed_app))
    channel = document["channels"]["exchange-shop_events"]
    assert channel["bindings"]["amqp"] == {
        "is": "routingKey",
        "exchange": {
            "name": "shop.events",
            "durable": True,
            "autoDelete": False,
            "vhost": "shop",
            "type": "topic",
        },
        "bindingVersion": "0.3.0",
    }
    assert [(b["destination"], b["routingKey"]) for b in channel["x-rabbitry-bindings"]] == [
        ("orders", "order.*"),
        ("refunds", "refund.#"),
    ]
    assert set(channel["messages"]) == {"orders-Order", "refunds-Refund"}
    queue = document["channels"]["queue-audit"]["bindings"]["amqp"]
    assert queue["is"] == "queue"
    assert queue["queue"]["name"] == "audit"


def test_servers_name_host_and_port_never_the_password(
    schema: Draft7Validator, tmp_path: Path
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    result = CliRunner().invoke(cli, ["asyncapi", str(path), "--format", "yaml"])
    assert result.exit_code == 0, result.output
    assert "s3cret-pw" not in result.output
    result = CliRunner().invoke(cli, ["asyncapi", str(path)])
    document = valid(schema, json.loads(result.stdout))
    (server,) = document["servers"].values()
    assert server == {
        "host": "rabbit.internal:5671",
        "protocol": "amqp",
        "protocolVersion": "0.9.1",
        "pathname": "/shop",
        "description": "vhost 'shop'",
    }
    assert document["channels"]["queue-orders"]["servers"] == [
        {"$ref": f"#/servers/{next(iter(document['servers']))}"}
    ]


def test_an_exchange_type_the_amqp_binding_cannot_name_is_kept_beside_it(
    schema: Draft7Validator,
) -> None:
    topology = Topology(
        vhosts=(Vhost(name="/", exchanges=(Exchange(name="hash", type="x-consistent-hash"),)),)
    )
    document = valid(schema, asyncapi_document(topology))
    channel = document["channels"]["exchange-hash"]
    assert "type" not in channel["bindings"]["amqp"]["exchange"]
    assert channel["x-rabbitry-exchange-type"] == "x-consistent-hash"


def test_names_outside_the_id_alphabet_become_distinct_ids(schema: Draft7Validator) -> None:
    vhost = Vhost(name="v", queues=(Queue(name="a.b"), Queue(name="a_b")))
    document = valid(schema, asyncapi_document(Topology(vhosts=(vhost,))))
    assert list(document["channels"]) == ["queue-a_b", "queue-a_b_2"]
    assert [c["address"] for c in document["channels"].values()] == ["a.b", "a_b"]


def test_a_handler_of_a_queue_the_spec_lacks_is_refused() -> None:
    vhost = Vhost(name="v", queues=(Queue(name="known"),))
    with pytest.raises(AsyncApiError, match=r"consumes 'gone' in vhost 'v'.*give the spec"):
        asyncapi_document(Topology(vhosts=(vhost,)), handlers=[HandlerDoc("gone", "handle")])


def test_a_body_type_is_named_without_its_module() -> None:
    assert body_type_name(Order) == "Order"
    assert body_type_name(list[Order]) == "list[Order]"
    assert body_type_name(dict[str, int]) == "dict[str, int]"


def test_several_vhosts_keep_their_channels_apart_each_on_its_own_server(
    schema: Draft7Validator,
) -> None:
    vhosts = tuple(Vhost(name=name, queues=(Queue(name="jobs"),)) for name in ("eu", "us"))
    document = valid(
        schema,
        asyncapi_document(Topology(vhosts=vhosts), servers=[Server("amqps", "rabbit", 5671)]),
    )
    assert list(document["channels"]) == ["eu-queue-jobs", "us-queue-jobs"]
    assert [s["pathname"] for s in document["servers"].values()] == ["/eu", "/us"]
    us = document["channels"]["us-queue-jobs"]
    assert us["bindings"]["amqp"]["queue"]["vhost"] == "us"
    assert document["servers"][us["servers"][0]["$ref"].rpartition("/")[2]]["pathname"] == "/us"
