"""Definitions files checked before they become a topology: what the broker's import would
refuse is an error naming the entry, never a silent default."""

from __future__ import annotations

import pytest

from rabbitry.errors import SpecError
from rabbitry.provisioner.definitions import check_definitions, topology_from_definitions
from rabbitry.topology.primitives import Queue, QueueType


def queue(**entry: object) -> dict[str, object]:
    return {"vhosts": [{"name": "/"}], "queues": [{"name": "q", "vhost": "/", **entry}]}


@pytest.mark.parametrize(
    "entry",
    [
        {"arguments": {"x-queue-type": "bogus"}},
        {"type": "bogus", "arguments": {}},
        {"type": "quorum", "arguments": {"x-queue-type": "qourum"}},
        {"type": ["quorum"], "arguments": {}},
    ],
)
def test_an_unknown_queue_type_is_an_error_naming_the_entry(entry: dict[str, object]) -> None:
    with pytest.raises(SpecError) as caught:
        check_definitions(queue(**entry), "defs.json")
    text = str(caught.value)
    assert "defs.json: queues[0]: unknown queue type" in text, text
    assert "classic, quorum or stream" in text


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"arguments": {"x-queue-type": "quorum"}}, QueueType.QUORUM),
        ({"type": "stream", "arguments": {}}, QueueType.STREAM),
        ({"arguments": {}}, QueueType.CLASSIC),
        ({"type": "classic", "arguments": {"x-queue-type": "classic"}}, QueueType.CLASSIC),
    ],
)
def test_known_queue_types_are_read_in_either_shape(
    entry: dict[str, object], expected: QueueType
) -> None:
    imported = topology_from_definitions(queue(**entry), "defs")
    (made,) = [r for r in imported.topology.resources().values() if isinstance(r, Queue)]
    assert made.type is expected
