"""The registry of broker object kinds: one module per kind, found by its name, and the generic
code (state, plan, diff, writes, definitions imports, export, descriptions) asking the kind in
hand rather than knowing it. A toy kind registered here is picked up everywhere with no other
change."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rabbitry.provisioner import writes
from rabbitry.provisioner.broker_documents import definitions_for
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import Action, plan
from rabbitry.provisioner.state import BrokerState, observed_vhost
from rabbitry.topology import kinds
from rabbitry.topology.document import spec_document
from rabbitry.topology.kinds.kind import JSONDict, Kind, Reading, segment
from rabbitry.topology.kinds.vhost import VhostKind
from rabbitry.topology.primitives import (
    KIND_ORDER,
    Primitive,
    Queue,
    ResourceKey,
    Topology,
    Vhost,
)

KINDS_DIR = Path(kinds.__file__).parent
SHARED_MODULES = {"__init__", "kind", "exported_arguments"}
"""The package's modules that are no kind: the registry, the base, what exports share."""


def test_every_resource_kind_has_exactly_one_module_and_every_module_is_a_kind() -> None:
    modules = {path.stem for path in KINDS_DIR.glob("*.py")}
    assert modules - SHARED_MODULES == set(KIND_ORDER)
    assert [kind.name for kind in kinds.registered()] == list(KIND_ORDER)
    for kind in kinds.registered():
        assert kind.primitive.kind == kind.name
        assert kinds.kind_of(kind.name) is kind


def test_the_vhost_kinds_are_the_fields_of_a_vhost_in_creation_order() -> None:
    fields = [kind.vhost_field for kind in kinds.in_vhosts()]
    assert fields == [
        "permissions",
        "topic_permissions",
        "exchanges",
        "queues",
        "bindings",
        "policies",
        "operator_policies",
        "parameters",
    ]
    assert set(fields) <= set(Vhost.model_fields)


def test_a_resource_key_is_the_plain_tuple_of_its_parts_with_names() -> None:
    key = ResourceKey.of("binding", "v", "ex", "queue", "q", "rk", "{}")
    plain = ("binding", "v", "ex", "queue", "q", "rk", "{}")
    assert key == plain and hash(key) == hash(plain) and {plain: 1}[key] == 1
    assert sorted([key, ("a",)]) == [("a",), plain]
    assert json.dumps(key) == json.dumps(list(plain)) and repr(key) == repr(plain)
    assert pickle.loads(pickle.dumps(key)) == key
    assert (key.kind, key.vhost, key.name) == ("binding", "v", "ex")
    assert key.identity == ("ex", "queue", "q", "rk", "{}")
    assert ResourceKey.of("vhost", "v").name == "v"
    assert Queue(name="q").key("v") == ("queue", "v", "q")
    assert type(Queue(name="q").key("v")) is ResourceKey


# -- a toy kind, registered for one test ---------------------------------------------------------


class Toy(Primitive):
    """A kind rabbitry does not have: a named object in a vhost with one setting."""

    kind: ClassVar[str] = "toy"
    name: str
    size: int = 1

    def identity(self) -> tuple[str, ...]:
        return (self.name,)


class ToyVhost(Vhost):
    """A vhost with a field for toys (what a new kind adds to ``Vhost``)."""

    toys: tuple[Toy, ...] = ()

    def members(self) -> Iterator[Primitive]:
        yield from super().members()
        yield from self.toys


class ToyKind(Kind[Toy], name="toy", field="toys", imported=2):
    """The toy's module: what is specific to it (written and exported as the base does)."""

    primitive = Toy

    def describe(self, key: ResourceKey) -> str:
        return f"toy {key.name} in {key.vhost}"

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[Toy]:
        for item in items:
            yield Toy(name=item["name"], size=item.get("size", 1))

    def path(self, resource: Toy, vhost: str) -> str:
        return f"/toys/{segment(vhost)}/{segment(resource.name)}"

    def definitions_entry(self, resource: Toy) -> JSONDict:
        return {"name": resource.name, "size": resource.size}


class ToyVhostKind(VhostKind):
    primitive = ToyVhost


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry with the toy kind after the vhost kinds, and vhosts that hold toys."""
    found = [ToyVhostKind() if k.name == "vhost" else k for k in kinds.registered()]
    found.insert([k.name for k in found].index("global_parameter"), ToyKind())
    monkeypatch.setattr(kinds, "_REGISTRY", tuple(found))
    monkeypatch.setattr(kinds, "_BY_NAME", {k.name: (i, k) for i, k in enumerate(found)})


class RecordingClient:
    """What writes sends, and nothing else."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def put(self, path: str, body: Any) -> None:
        self.sent.append(("PUT", path, body))

    def delete(self, path: str) -> bool:
        self.sent.append(("DELETE", path, None))
        return True


@pytest.mark.usefixtures("toy_registered")
def test_a_kind_registered_alone_is_read_planned_written_imported_and_exported() -> None:
    # state: read from its section of the broker's definitions-shaped answers
    observed = observed_vhost("v", {"name": "v"}, {"toys": [{"name": "a", "size": 1}]})
    assert isinstance(observed, ToyVhost) and observed.toys == (Toy(name="a", size=1),)

    # plan and diff: its key, its fields compared, its place after the other vhost kinds
    desired = Topology(
        name="s",
        vhosts=(ToyVhost(name="v", toys=(Toy(name="a", size=2), Toy(name="b"))),),
    )
    state = BrokerState(
        topology=Topology(name="s", vhosts=(observed,)), record=OwnershipRecord("s")
    )
    the_plan = plan(desired, state)
    toys = [c for c in the_plan.changes if c.kind == "toy"]
    assert [(c.action, c.title, c.reasons) for c in toys] == [
        (Action.UPDATE, "toy a in v", ("size: 1 -> 2",)),
        (Action.CREATE, "toy b in v", ()),
    ]

    # writes: the kind's requests, sent as they are
    client = RecordingClient()
    writes.put(client, "v", Toy(name="b"))  # type: ignore[arg-type]
    writes.delete(client, toys[0], force=False)  # type: ignore[arg-type]
    assert client.sent == [("PUT", "/toys/v/b", {"size": 1}), ("DELETE", "/toys/v/a", None)]

    # definitions imports and export: its entries, in its sections
    assert definitions_for([Toy(name="b")]) == {"toys": [{"name": "b", "size": 1}]}
    exported = spec_document(desired)["vhosts"][0]
    assert exported["toys"] == [{"name": "a", "size": 2}, {"name": "b"}]
    assert kinds.describe_key(ResourceKey.of("toy", "v", "a")) == "toy a in v"


def test_without_its_registration_the_toy_kind_is_unknown() -> None:
    with pytest.raises(KeyError):
        kinds.kind_of("toy")
