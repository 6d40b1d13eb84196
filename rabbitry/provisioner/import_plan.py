"""Which creations of an apply go through definitions imports, in what order and chunks, and
with what HTTP timeouts (pure): the broker's own bulk path, the fastest there is."""

from __future__ import annotations

from rabbitry.provisioner.plans import Action, Change
from rabbitry.topology.kinds import kind_of
from rabbitry.topology.primitives import Queue, QueueType


def declared_apart(change: Change) -> bool:
    """A creation that ``ApplyOptions.declare_apart`` takes out of the imports."""
    queue = change.desired
    return (
        change.action is Action.CREATE
        and isinstance(queue, Queue)
        and queue.type in (QueueType.QUORUM, QueueType.STREAM)
    )


def _import_rank(change: Change) -> int:
    """The broker's own import order. What a chunk refers to must come in an earlier chunk or
    the same one (exchanges and queues before the bindings between them), and policies come
    before the queues and exchanges: a policy made in a vhost that already holds them is
    matched against every one (at 21,000 queues, several seconds a policy), one made first
    costs nothing."""
    return kind_of(change.kind).import_rank


def import_chunks(changes: list[Change], size: int, whole: int = 0) -> list[list[Change]]:
    """The creations of one vhost in chunks of at most ``size`` (in one when there are at most
    ``whole``), each importable once the chunks before it are in (plan order is kept within
    the exchanges-and-queues and the bindings)."""
    if size < 1:
        raise ValueError(f"import_chunk must be at least 1, got {size}")
    ordered = sorted(changes, key=_import_rank)
    if len(ordered) <= whole:
        return [ordered] if ordered else []
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def import_timeout(objects: int, previous: float | None = None) -> float:
    """HTTP timeout of one import. The broker answers when every object is made, and it slows
    down as a vhost fills (quorum queues most: at 16,000 objects in, a chunk of 2,000 took four
    times as long as the first): four times the previous chunk's time, never below two minutes,
    and for a first chunk 50 ms an object if that is more."""
    floor = max(120.0, 0.05 * objects)
    return floor if previous is None else max(floor, 4 * previous)


IMPORT_STALL = 180.0
"""Seconds an import that outlived its HTTP timeout may go without making one more object
before the apply sends its missing objects again (once), then gives up."""

IMPORT_POLL_MAX = 5.0
"""Longest pause between two reads of a vhost while waiting on such an import."""

PUT_FIRST = frozenset({"vhost", "user", "permission"})
"""Kinds put one by one before the imports: the objects in a vhost may need them. Topic
permissions come after the imports: RabbitMQ 4.3 refuses one for an exchange that does not
exist yet (HTTP 400 no_such_exchange), and the exchange may be in the same plan."""


def imported(change: Change) -> bool:
    """Whether a definitions import can make the object of ``change`` (its kind says)."""
    return kind_of(change.kind).imported


__all__ = [
    "IMPORT_POLL_MAX",
    "IMPORT_STALL",
    "PUT_FIRST",
    "declared_apart",
    "import_chunks",
    "import_timeout",
    "imported",
]
