"""Primitives made without validation (``Primitive.trusted``) are the ones validation makes:
the same fields, of the same types, from the spec's expansion and from the broker's answers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology import load_topology
from rabbitry.topology.primitives import (
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Primitive,
    Queue,
    QueueType,
)

ROOT = Path(__file__).parents[3]


def typed(primitive: Primitive) -> dict[str, tuple[type, Any]]:
    """Each field with its type: ``ExchangeType.TOPIC == "topic"``, and must not pass for it."""
    return {name: (type(value), value) for name, value in primitive.__dict__.items()}


def assert_as_validated(primitives: list[Primitive]) -> None:
    assert primitives
    for primitive in primitives:
        validated = type(primitive).model_validate(primitive.model_dump())
        assert typed(primitive) == typed(validated), primitive
        assert primitive == validated
        assert primitive.model_fields_set == validated.model_fields_set


def scale_spec(tmp_path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from scale import spec_text
    finally:
        sys.path.remove(str(ROOT / "bench"))
    path = tmp_path / "scale.yaml"
    path.write_text(spec_text("s", "s", 6000))
    return path


@pytest.mark.parametrize("name", ["shop.yaml", "delays.yaml", "broker.yaml", "scale"])
def test_the_expansion_makes_what_validation_would(name: str, tmp_path: Path) -> None:
    path = scale_spec(tmp_path) if name == "scale" else ROOT / "examples" / name
    topology = load_topology(path)
    for vhost in topology.vhosts:
        made: list[Primitive] = [*vhost.exchanges, *vhost.queues, *vhost.bindings]
        assert_as_validated(made)


def test_the_brokers_answers_make_what_validation_would() -> None:
    definitions: dict[str, Any] = {
        "exchanges": [
            {"name": "orders", "type": "topic", "durable": True, "arguments": {}},
            {"name": "plugin", "type": "x-local-random", "internal": True},
            {"name": "ae", "type": "fanout", "arguments": {"alternate-exchange": "x"}},
        ],
        "queues": [
            {"name": "q", "durable": True, "arguments": {"x-queue-type": "quorum"}},
            {"name": "c", "type": "classic", "arguments": {"x-message-ttl": 1000}},
            {"name": "s", "arguments": {"x-queue-type": "stream", "x-max-age": "1D"}},
        ],
        "bindings": [
            {"source": "orders", "destination": "q", "routing_key": "a.#", "arguments": {}},
            {"source": "orders", "destination": "ae", "destination_type": "exchange"},
            {"source": "", "destination": "q", "routing_key": "q"},  # the default exchange's
        ],
    }
    vhost = observed_vhost("v", {}, definitions)
    assert_as_validated([*vhost.exchanges, *vhost.queues, *vhost.bindings])
    assert vhost.exchanges[1].type == "x-local-random"
    assert vhost.queues[0].type is QueueType.QUORUM
    assert vhost.bindings[1].destination_type is DestinationType.EXCHANGE


def test_trusted_defaults_are_the_models_and_never_shared() -> None:
    one, two = Queue.trusted(name="a"), Queue.trusted(name="b")
    assert typed(one) == typed(Queue(name="a"))
    assert one.arguments is not two.arguments, "a default_factory is called for each"
    assert Exchange.trusted(name="x").type is ExchangeType.DIRECT
    assert Binding.trusted(source="a", destination="b") == Binding(source="a", destination="b")


def test_an_unknown_or_missing_field_is_a_bug_that_says_so() -> None:
    with pytest.raises(TypeError, match="no field"):
        Queue.trusted(name="a", typo=1)
    with pytest.raises(TypeError, match="needs"):
        Binding.trusted(source="a")
