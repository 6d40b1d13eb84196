"""Cost grows with the spec, not with its square: the Python function calls that validating,
expanding and planning make, counted on a spec and on one ten times its size.

Counting calls instead of timing them makes the guard exact on any machine: a loop over every
queue for every queue (the quadratic kind that hides at 1,000 objects and stops a user at
50,000) multiplies the calls by about 100 when the spec grows tenfold, linear work by about 10.
The speed itself is measured by bench/scale.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rabbitry.provisioner.ownership import OwnershipRecord, digest, owners_by_key, records_from
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology import check_spec, expand, load_spec
from rabbitry.topology.primitives import Topology

SMALL, LARGE = 1_000, 10_000
LIMIT = 13  # tenfold the work: at most 13 times the calls (quadratic would be about 100)

# one xdist worker makes the two specs and their topologies for all the tests
pytestmark = pytest.mark.xdist_group("linear-cost")


def calls(work: Callable[[], object]) -> int:
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count


def spec_text(objects: int) -> str:
    """About ``objects`` primitives, every kind in proportion: topic exchanges, classic and
    quorum queues with bindings, one queue in 20 with a retry ladder, a policy per 100."""
    n = objects // 5
    lines = ["version: 1", "name: linear", "vhosts:", "  - name: linear", "    exchanges:"]
    lines += [f"      - {{name: ex.{i}, type: topic}}" for i in range(n)]
    lines.append("    queues:")
    for i in range(n):
        retry = ", retry: {attempts: 3, backoff: [1s, 5s]}" if i % 20 == 0 else ""
        kind = "quorum" if i % 2 else "classic"
        lines.append(f"      - {{name: q.{i}, type: {kind}{retry}}}")
        lines.append(f"      - {{name: audit.{i}, arguments: {{x-message-ttl: 60000}}}}")
    lines.append("    bindings:")
    for i in range(n):
        lines.append(f"      - {{source: ex.{i}, destination: q.{i}, routing_key: a.#}}")
        lines.append(f"      - {{source: ex.{i}, destination: audit.{i}, routing_key: '#'}}")
    lines.append("    policies:")
    lines += [
        f"      - {{name: cap.{i}, pattern: '^audit\\.{i}$', definition: {{max-length: 9}}}}"
        for i in range(max(1, n // 100))
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    out = {}
    for size in (SMALL, LARGE):
        path = tmp_path_factory.mktemp("linear") / f"spec-{size}.yaml"
        path.write_text(spec_text(size))
        out[size] = path
    return out


@pytest.fixture(scope="module")
def topologies(specs: dict[int, Path]) -> dict[int, Topology]:
    """Each spec loaded and expanded (plans do not change a topology)."""
    return {size: expand(load_spec(path)) for size, path in specs.items()}


def applied(topology: Topology) -> BrokerState:
    """The broker after this stack applied ``topology``: everything there, all recorded."""
    resources = topology.resources()
    record = OwnershipRecord(
        topology.name, managed={key: digest(r) for key, r in resources.items()}
    )
    return BrokerState(topology=topology, record=record)


def test_loading_and_checking_a_spec_costs_in_proportion(specs: dict[int, Path]) -> None:
    small = calls(lambda: check_spec(load_spec(specs[SMALL])))
    large = calls(lambda: check_spec(load_spec(specs[LARGE])))
    assert large / small <= LIMIT, (small, large)


def test_expanding_costs_in_proportion(specs: dict[int, Path]) -> None:
    loaded = {size: load_spec(path) for size, path in specs.items()}
    small = calls(lambda: expand(loaded[SMALL]))
    large = calls(lambda: expand(loaded[LARGE]))
    assert large / small <= LIMIT, (small, large)


def test_planning_costs_in_proportion(topologies: dict[int, Topology]) -> None:
    states = {size: applied(t) for size, t in topologies.items()}
    assert not plan(topologies[SMALL], states[SMALL]).has_changes  # nothing to do: a re-plan
    small = calls(lambda: plan(topologies[SMALL], states[SMALL]))
    large = calls(lambda: plan(topologies[LARGE], states[LARGE]))
    assert large / small <= LIMIT, (small, large)


def owned_by_another_stack(topology: Topology) -> BrokerState:
    """The broker after another stack applied ``topology``: every change of this one is marked."""
    other = applied(topology).record
    parameters = [{"name": f"rabbitry.stack.{name}", "value": other.to_value()} for name in "ab"]
    records = records_from(parameters)
    return BrokerState(
        topology=topology,
        record=OwnershipRecord(topology.name),
        other_owners=owners_by_key(records, but=topology.name),
    )


def test_planning_against_other_stacks_records_costs_in_proportion(
    topologies: dict[int, Topology],
) -> None:
    marked = plan(topologies[SMALL], owned_by_another_stack(topologies[SMALL]))
    assert marked.has_changes and all(
        c.owners == ("a", "b") for c in marked.changes if c.kind != "vhost"
    )
    small = calls(lambda: plan(topologies[SMALL], owned_by_another_stack(topologies[SMALL])))
    large = calls(lambda: plan(topologies[LARGE], owned_by_another_stack(topologies[LARGE])))
    assert large / small <= LIMIT, (small, large)


def test_the_version_checks_judge_each_shape_of_object_once(
    topologies: dict[int, Topology], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan judges every object against the broker's version; objects of one shape (most of
    a large spec) share their uses, and those are judged once. What is unique to an object (a
    retry tier's dead-letter routing key) still is judged for it."""
    from rabbitry.provisioner import capabilities
    from rabbitry.topology.versions import judge as real

    judged: list[object] = []

    def counting(uses: object, version: object, **broker_says: object) -> object:
        judged.append(uses)
        return real(uses, version, **broker_says)  # type: ignore[arg-type]

    monkeypatch.setattr(capabilities, "judge", counting)
    for size in (SMALL, LARGE):
        judged.clear()
        needs = capabilities.requirements(topologies[size])
        refused, _ = capabilities._judged(needs, (3, 10, 0))
        objects = sum(1 for need in needs if need.kind == "version")
        assert len(judged) * 10 < objects, (size, len(judged), objects)
        assert [need for need, _ in refused] == [  # the same answer as judging each object
            need for need in needs if need.kind == "version" and real(need.uses, (3, 10, 0))
        ]
