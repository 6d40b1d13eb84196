"""What a large plan holds in memory: primitives without a per-instance record of given
fields, broker answers let go as they are converted, no per-line map of an untemplated spec.
A plan of 50,000 objects peaks under 5 KB per object (bench/scale.py); these guard the parts."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology.primitives import Binding, Queue, QueueType
from rabbitry.topology.spec.line_map import LineMap

N = 10_000


def traced_bytes(make: Callable[[], Any]) -> tuple[int, Any]:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        return tracemalloc.get_traced_memory()[0] - before, made
    finally:
        tracemalloc.stop()


def test_a_primitive_with_every_field_given_costs_no_set_of_its_own() -> None:
    names = [f"queue.{i}" for i in range(N)]
    used, queues = traced_bytes(
        lambda: [
            Queue(name=n, type=QueueType.QUORUM, durable=True, auto_delete=False, arguments={})
            for n in names
        ]
    )
    # about 330 bytes each; with pydantic's set of given fields per instance, about 800
    assert used / N < 500, f"{used / N:.0f} bytes per queue"
    assert queues[0].model_fields_set is queues[1].model_fields_set
    renamed = queues[0].model_copy(update={"name": "other"})
    assert renamed.name == "other" and queues[1].name == "queue.1"
    assert Binding(source="a", destination="b").model_fields_set == set(Binding.model_fields)


def test_observed_vhost_lets_each_answer_go_once_converted() -> None:
    definitions: dict[str, Any] = {
        "queues": [{"name": f"q.{i}", "durable": True, "arguments": {}} for i in range(3)],
        "bindings": [{"source": "x", "destination": "q.0", "routing_key": "k"}],
        "exchanges": [{"name": "x", "type": "topic"}],
    }
    vhost = observed_vhost("v", {}, definitions)
    assert [q.name for q in vhost.queues] == ["q.0", "q.1", "q.2"]  # order kept
    assert [b.routing_key for b in vhost.bindings] == ["k"]
    assert definitions == {}, "the answers are still held after conversion"


def test_an_untemplated_spec_keeps_no_line_by_line_map() -> None:
    text = "".join(f"line{i}: {i}\n" for i in range(N))
    used, lines = traced_bytes(lambda: LineMap.identity("spec.yaml", text))
    assert used < 10_000, f"{used} bytes for the line map of {N} lines"
    where = lines.translate(41, 3)
    assert (where.line, where.column, where.file) == (42, 4, "spec.yaml")
    past = lines.translate(N + 5, 0)
    assert (past.line, past.column) == (N + 1, None)
