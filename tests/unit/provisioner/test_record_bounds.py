"""An ownership record is broker state anyone who may write global parameters can set: it is
inflated and parsed within bounds, and one stack's broken record names itself without stopping
the plans of the others (no broker here)."""

from __future__ import annotations

import base64
import functools
import json
import resource
import zlib

import pytest

from rabbitry.errors import PlanError
from rabbitry.provisioner import ownership
from rabbitry.provisioner.ownership import (
    RECORD_PREFIX,
    OwnershipRecord,
    RecordUnreadable,
    records_from,
)
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.provisioner.unreadable import refuse_unknown_owners, unknown_owner_warnings
from rabbitry.topology.primitives import Queue, Topology, Vhost


@functools.cache
def bomb(inflated: int, head: bytes = b"[") -> str:
    """A packed object list that inflates to ``inflated`` bytes, made without holding them."""
    packer = zlib.compressobj(9)
    chunk = b" " * (1 << 20)
    out = [packer.compress(head)]
    for _ in range(inflated // len(chunk)):
        out.append(packer.compress(chunk))
    out.append(packer.compress(b"]") + packer.flush())
    return base64.b64encode(b"".join(out)).decode("ascii")


def packed(text: bytes) -> str:
    return base64.b64encode(zlib.compress(text)).decode("ascii")


def value(managed: str) -> dict[str, object]:
    return {"format_version": 2, "stack": "evil", "managed": managed, "operations": []}


def test_a_record_inflating_past_the_bound_is_refused_naming_it_and_the_bound() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(RecordUnreadable) as refused:
        OwnershipRecord.from_value("evil", value(bomb(64 << 20)))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert refused.value.stack == "evil"
    assert "'rabbitry.stack.evil' inflates past 16 MiB" in str(refused.value)
    assert "clear_global_parameter rabbitry.stack.evil" in str(refused.value)
    assert grown_kib < 64 * 1024, f"reading the record grew the process by {grown_kib} KiB"


def test_a_record_just_under_the_bound_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [["0123456789abcdef", "queue", "v", f"q{i}"] for i in range(1000)]
    text = json.dumps(entries).encode()
    monkeypatch.setattr(ownership, "MAX_RECORD_BYTES", len(text))
    record = OwnershipRecord.from_value("s", value(packed(text)))
    assert len(record.managed) == 1000
    monkeypatch.setattr(ownership, "MAX_RECORD_BYTES", len(text) - 1)
    with pytest.raises(RecordUnreadable, match="inflates past"):
        OwnershipRecord.from_value("s", value(packed(text)))


def test_a_packed_text_longer_than_the_bound_is_not_even_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ownership, "MAX_RECORD_BYTES", 100)
    with pytest.raises(RecordUnreadable, match="101 characters long, over the"):
        OwnershipRecord.from_value("evil", value("A" * 101))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests its object list too deeply"),
        (b'{"a": 1}', "its object list is not a list"),
        (b"[[1, 2]", "cannot read"),
    ],
    ids=["deep", "not-a-list", "broken-json"],
)
def test_a_record_parsed_into_nonsense_is_refused_naming_it(text: bytes, says: str) -> None:
    with pytest.raises(RecordUnreadable, match=says) as refused:
        OwnershipRecord.from_value("evil", value(packed(text)))
    assert "'rabbitry.stack.evil'" in str(refused.value)


def test_a_truncated_compressed_list_is_refused() -> None:
    whole = zlib.compress(json.dumps([["d", "queue", "v", "q"]] * 50).encode())
    cut = base64.b64encode(whole[: len(whole) // 2]).decode("ascii")
    with pytest.raises(RecordUnreadable, match="ends early"):
        OwnershipRecord.from_value("evil", value(cut))


def parameters() -> list[dict[str, object]]:
    mine = OwnershipRecord("mine", {("queue", "v", "mine.q"): "0123456789abcdef"})
    return [
        {"name": RECORD_PREFIX + "mine", "value": mine.to_value()},
        {"name": RECORD_PREFIX + "evil", "value": value(bomb(32 << 20))},
    ]


def test_records_can_set_an_unreadable_one_aside_and_read_the_rest() -> None:
    with pytest.raises(RecordUnreadable):
        records_from(parameters())
    unreadable: dict[str, RecordUnreadable] = {}
    records = records_from(parameters(), unreadable)
    assert set(records) == {"mine"} and set(unreadable) == {"evil"}


def state_with_evil(observed: Topology) -> BrokerState:
    unreadable: dict[str, RecordUnreadable] = {}
    records = records_from(parameters(), unreadable)
    return BrokerState(observed, records["mine"], unreadable=unreadable)


def topology(*queues: str) -> Topology:
    return Topology(
        name="mine", vhosts=(Vhost(name="v", queues=tuple(Queue(name=q) for q in queues)),)
    )


def test_the_plan_goes_on_past_another_stacks_broken_record_and_says_which() -> None:
    state = state_with_evil(topology("mine.q"))
    (warning,) = unknown_owner_warnings(state)
    assert "record of stack 'evil' cannot be read" in warning and "16 MiB" in warning
    # creating, and changing this stack's own objects, is not refused
    refuse_unknown_owners(plan(topology("mine.q", "new.q"), state), state)


def test_apply_refuses_to_adopt_an_object_while_an_owner_is_unknown() -> None:
    state = state_with_evil(topology("mine.q", "theirs.q"))
    with pytest.raises(PlanError) as refused:
        refuse_unknown_owners(plan(topology("mine.q", "theirs.q"), state), state)
    assert "nothing was applied" in str(refused.value)
    assert "queue v/theirs.q" in str(refused.value) and "'evil'" in str(refused.value)
