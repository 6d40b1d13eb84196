"""Dynamic shovels in the spec: the parameter they become, what is refused (no broker)."""

from __future__ import annotations

import pytest

from rabbitry.topology import expand
from rabbitry.topology.document import spec_document

from .conftest import load, one_problem

SPEC = """
version: 1
name: shop
vhosts:
  - name: shop
    shovels:
      - name: out
        source: {{uri: "amqp:///shop", queue: outbox}}
        destination:
          uri: [amqp://shovel@dc2/shop, amqp://shovel@dc3/shop]
          password: "p@ss/word"
          exchange: orders
          routing_key: from-dc1
        prefetch: 500
        delete_after: {delete_after}
        reconnect_delay: 2500ms
"""


def test_a_shovel_is_a_shovel_parameter_in_the_brokers_terms() -> None:
    (parameter,) = expand(load(SPEC.format(delete_after="queue-length"))).vhosts[0].parameters
    assert (parameter.component, parameter.name) == ("shovel", "out")
    assert parameter.value == {
        "src-protocol": "amqp091",
        "src-uri": "amqp:///shop",
        "src-queue": "outbox",
        "dest-protocol": "amqp091",
        "dest-uri": [
            "amqp://shovel:p%40ss%2Fword@dc2/shop",
            "amqp://shovel:p%40ss%2Fword@dc3/shop",
        ],
        "dest-exchange": "orders",
        "dest-exchange-key": "from-dc1",
        "ack-mode": "on-confirm",
        "src-prefetch-count": 500,
        "src-delete-after": "queue-length",
        "reconnect-delay": 2.5,
    }
    assert "p@ss/word" not in repr(load(SPEC.format(delete_after=10)))
    assert (
        expand(load(SPEC.format(delete_after=10))).vhosts[0].parameters[0].value["src-delete-after"]
        == 10
    )
    # an exported spec keeps the shovel as a parameter: it applies back the same
    assert spec_document(expand(load(SPEC.format(delete_after=10))))["vhosts"][0]["parameters"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('{uri: "amqp:///shop"}', "the source needs a queue or an exchange"),
        ('{uri: "amqp:///shop", queue: q, exchange: x}', "a queue or an exchange, not both"),
        ('{uri: "amqp:///shop", queue: q, address: /q/a}', "`address` is AMQP 1.0"),
        ('{uri: "amqp:///shop", queue: q, protocol: amqp10}', "has `address`, not queue"),
        ('{uri: "amqp:///shop", protocol: amqp10}', "needs an `address`"),
        ('{uri: "amqp:///shop", queue: q, routing_key: k}', "routing_key goes with an exchange"),
    ],
)
def test_a_shovel_end_that_cannot_work_is_refused(source: str, message: str) -> None:
    text = SPEC.format(delete_after="never").replace('{uri: "amqp:///shop", queue: outbox}', source)
    problem = one_problem(text)
    assert message in problem.message and problem.path == "vhosts[0].shovels[0]"
