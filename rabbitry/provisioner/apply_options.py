"""What an apply is allowed to do (``ApplyOptions``, the user's flags and the import's sizes)
and what it did (``ApplyResult``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rabbitry.provisioner.plans import Plan

MessageCounter = Callable[[str, str], tuple[int, int]]
"""(vhost, queue) -> (messages, consumers), exact; used before deleting quorum/stream queues."""


@dataclass(frozen=True)
class ApplyOptions:
    """What the user allowed on the command line."""

    allow_replace: bool = False
    prune: bool = False
    force: bool = False
    take_over: frozenset[str] = frozenset()
    """Stacks whose objects this apply may act on: they move to this apply's stack."""
    allow_delay_relayout: bool = False
    """Lay a delay's levels out anew although messages wait in them (they are given up)."""
    import_chunk: int = 2000
    """Objects per definitions import. A small broker creates about 500 objects a second from
    an import and answers only when done: chunks of 2,000 answer within seconds, so no HTTP
    timeout is reached at any size, and a run that dies between chunks leaves only whole
    chunks behind (the ownership record already names the rest; the next apply makes them).
    Larger chunks cost more than they save (50,000 objects on RabbitMQ 4.0, 2 cores: 95.8 s in
    chunks of 2,000, 100.7 s of 5,000, 115.0 s of 10,000)."""
    import_whole: int = 6000
    """A vhost with at most this many creations takes one import: each import ends waiting for
    its slowest object, and for 5,104 objects three imports took about a second more than one
    (20.1-21.2 s against 18.7-20.5 s)."""
    declare_apart: int = 8
    """Quorum and stream queues to create are declared by this many concurrent PUTs, between
    the imports of everything else and of the bindings, instead of inside an import: the
    broker's import declares its queues a few at a time (a worker pool the size of its
    schedulers), and a quorum queue's declaration waits mostly on its log's first writes,
    which concurrent declarations share. 0 or 1: everything goes through the imports."""
    import_timeout: float | None = None
    """HTTP timeout of each import (None: sized to the work, see ``import_timeout``). An import
    that outlives it is not a failure: the broker goes on, and the apply waits for its objects
    while they keep appearing."""


@dataclass
class ApplyResult:
    """What an apply did; ``skipped`` lists deletions left for ``--prune``."""

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    plan: Plan | None = None
    """The plan applied (made under the stack's lock, or the saved one)."""

    @property
    def changed(self) -> bool:
        return bool(self.done)

    def to_json(self) -> dict[str, Any]:
        """What ``apply --json`` prints: the plan, what was done and what was kept."""
        return {
            "format_version": 1,
            "plan": self.plan.to_json() if self.plan is not None else None,
            "done": self.done,
            "skipped": self.skipped,
        }


__all__ = ["ApplyOptions", "ApplyResult", "MessageCounter"]
