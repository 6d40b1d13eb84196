"""examples/order_worker.py, unit-tested the way its docs suggest: in memory, with the harness."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from rabbitry.policies.retry import LAST_ERROR_HEADER
from rabbitry.testing import HandlerHarness

EXAMPLE = Path(__file__).parents[3] / "examples" / "order_worker.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("order_worker", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_order_walks_the_specs_ladder_while_payments_are_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAYMENTS", "down")
    example = load_example()
    outcomes = HandlerHarness(example.app).follow("orders.work", example.Order(order=42))
    assert [(o.action.value, o.tier) for o in outcomes] == [
        ("retry", "1s"),
        ("retry", "5s"),
        ("park", None),
    ]
    assert outcomes[-1].routing_key == "orders.work.parking"


def test_an_order_is_charged_once_payments_are_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENTS", "up")
    harness = HandlerHarness(load_example().app)
    assert harness.deliver("orders.work", {"order": 42}, message_id="order-42").acked
    assert harness.deliver("orders.work", {"order": 42}, message_id="order-42").skipped


def test_a_body_that_is_not_an_order_is_parked_at_once() -> None:
    outcome = HandlerHarness(load_example().app).deliver("orders.work", {"id": 42})
    assert outcome.parked and "order: Field required" in outcome.headers[LAST_ERROR_HEADER]
