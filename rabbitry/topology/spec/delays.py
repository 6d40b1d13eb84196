"""Delayed delivery as the spec writes it: a delay's levels and where its messages may go.

What a delay becomes on the broker (TTL level queues, dead-letter routing) is
``topology.patterns.delays``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rabbitry.topology.spec.base import Name, SpecModel
from rabbitry.topology.spec.quantities import Milliseconds


class DelayTargetSpec(SpecModel):
    """Where delayed messages may be delivered: a queue, or an exchange with a routing key."""

    queue: Name | None = None
    """Deliver into this queue (its name is the address publishers use)."""
    name: Name | None = None
    """Address of an exchange target (publishers delay "to" this name)."""
    exchange: str | None = None
    """Exchange to deliver to (with `name` and `routing_key`)."""
    routing_key: str = ""
    """Routing key the message is delivered with to `exchange`."""

    @model_validator(mode="after")
    def _one_kind(self) -> DelayTargetSpec:
        if (self.queue is None) == (self.exchange is None):
            raise ValueError("a delay target has either `queue`, or `name` + `exchange`")
        if self.exchange is not None and self.name is None:
            raise ValueError("an exchange target needs a `name`: the address publishers use")
        return self

    @property
    def address(self) -> str:
        return self.queue if self.queue is not None else str(self.name)


class DelaySpec(SpecModel):
    """Delayed delivery without plugins. `levels: binary` (default) accepts any delay up to
    `max`: level k holds unit*2^k, so nothing waits behind a longer message. A list of
    durations gives fixed levels instead (a delay is rounded up to the next one)."""

    name: Name
    """Prefix of every object this declares (<name>.00, <name>.deliver, <name>.parking, ...)."""
    levels: Literal["binary", "fixed"] | list[Milliseconds] = "binary"
    """binary; fixed (the classic 18 levels 1s 5s 10s 30s 1m..10m 20m 30m 1h 2h); or your own
    fixed levels such as [1s, 5s, 10s, 30s, 1m]."""
    unit: Milliseconds = 1000
    """binary: the precision (delays are rounded up to whole units)."""
    max: Milliseconds | None = None
    """binary: the longest delay (sets the number of levels); default 28 levels."""
    count: int | None = Field(None, ge=1, le=64)
    """binary: number of levels instead of `max` (28 x 1s is about 8.5 years)."""
    lanes: int = Field(1, ge=1, le=16)
    """binary: queues side by side per level (`<name>.<kk>.<lane>`), each dead-lettering on its
    own, so a burst that falls due at once leaves a quorum level sooner; 1 (default): one queue
    `<name>.<kk>` per level. Changing it lays the levels out anew (refused while messages wait)."""
    round: Literal["up", "reject"] = "up"
    """fixed: round a delay up to the next level, or reject delays that are not a level."""
    queue_type: Literal["quorum", "classic"] = "quorum"
    """quorum (at-least-once dead-lettering: survives a node failure) or classic."""
    targets: list[DelayTargetSpec] = Field(default_factory=list)
    """Where delayed messages may go; queues retrying `via` this delay are added."""

    @model_validator(mode="after")
    def _lanes_binary(self) -> DelaySpec:
        if self.lanes > 1 and self.levels != "binary":
            raise ValueError("`lanes` is for binary levels only: drop it or use `levels: binary`")
        return self


__all__ = ["DelaySpec", "DelayTargetSpec"]
