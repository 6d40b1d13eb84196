"""Delay encoding: how a wanted delay becomes a routing key and an entry exchange.

Two schemes, both plugin-free and free of head-of-line blocking (every message in one queue has
the same TTL, so expiry order is arrival order):

- ``BinaryDelays``: N levels; level k holds messages for ``unit * 2**k``. The routing key carries
  the delay in ticks (units) as N bits, most significant first, each followed by a dot, then the
  target address. Level k's queue is bound with a pattern matching "bit k set"; level k's exchange
  is bound to level k-1's exchange with "bit k clear", so a message skips the levels whose bit is
  0. Level 0 dead-letters into the delivery exchange, where each target is bound by its address.
  A message is published to the layout's mark exchange, which passes it on to the exchange of
  its highest set bit (or, for no delay, to the delivery exchange); any delay up to
  ``unit * (2**N - 1)`` is reachable with at most N hops.

  With ``lanes`` L > 1 each level is L queues ``<prefix>.<kk>.<lane>`` side by side: the key
  starts with one more word, the lane (0..L-1), and each lane's queue is bound with its lane
  word, so a burst that falls due at once leaves a level through L dead-letter processes
  instead of one (a quorum queue dead-letters at-least-once through one process, which keeps
  only 32 messages unconfirmed). Dead-lettering keeps the routing key, so a message stays in its
  lane from level to level. The publisher takes lanes in turn; any lane reaches every delay.
- ``FixedDelays``: a list of delays, one TTL queue each; a delay is rounded up to the next level
  (or rejected past the last). The routing key is ``<level index>.<address>``.

Delays are rounded up to whole units: a message is never delivered early.

A routing key is only right for the layout it was made for: a binary key carries exactly N bits,
and the level patterns count words from the left. A key of another layout lands in the wrong
level or matches nothing at all (level 0 then reads the address as a bit), and a quorum level
dead-lettering at-least-once to an exchange where nothing matches keeps the message for ever.
So every layout has a fingerprint (``layout``) that names a marker exchange
(``<prefix>.layout.<fingerprint>``, declared with the levels): a client passively declares it
before its first delay, and the planner compares it with what the broker holds. A binary delay's
messages are published to that exchange, so once a relayout deletes it, a client still holding
the old layout gets NOT_FOUND from the broker instead of a confirm for a message that would
never arrive.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from rabbitry.errors import DelayError as DelayError


def to_ms(delay: float | timedelta) -> float:
    """Milliseconds from a timedelta or a number of seconds, to the microsecond.

    Rounding to microseconds removes float noise (3 * 0.1 s) before any ceiling is taken;
    it never turns a positive delay into zero.
    """
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    ms = round(seconds * 1000.0, 3)
    if ms == 0 and seconds > 0:
        ms = 0.001
    return ms


def _check_address(address: str) -> None:
    if (
        not address
        or any(c in address for c in "*#")
        or address.startswith(".")
        or address.endswith(".")
    ):
        raise DelayError(
            f"delay target address {address!r} must be a non-empty name without '*', '#' or"
            " leading/trailing dots (it ends a topic routing key)"
        )


@dataclass(frozen=True)
class Route:
    """Where to publish a delayed message: ``exchange`` with ``routing_key``."""

    exchange: str
    routing_key: str
    delay_ms: int
    """The delay the message will actually get (the requested one rounded up to the unit)."""


MAX_LANES = 16
"""The most queues side by side per level (each is a quorum queue on every member)."""


@dataclass(frozen=True)
class BinaryDelays:
    """Binary-decomposed delay levels ``<prefix>.<k>``, delivering via ``<prefix>.deliver``."""

    prefix: str
    unit_ms: int = 1000
    levels: int = 28
    max_ms: int | None = None
    """The longest delay the spec declares (``max``); the levels, whole powers of two, reach
    up to almost twice as far, but a delay past the declared max is refused."""
    lanes: int = 1
    """Queues side by side per level (``<prefix>.<kk>.<lane>``); 1: one queue ``<prefix>.<kk>``
    and keys without a lane word, the layout before lanes existed."""

    def __post_init__(self) -> None:
        if not 1 <= self.lanes <= MAX_LANES:
            raise DelayError(f"delay lanes must be between 1 and {MAX_LANES}, got {self.lanes}")
        if self.unit_ms <= 0:
            raise DelayError(f"delay unit must be positive, got {self.unit_ms} ms")
        if not 1 <= self.levels <= 64:
            raise DelayError(f"delay levels must be between 1 and 64, got {self.levels}")
        if self.max_ms is not None and self.max_ms <= 0:
            raise DelayError(f"delay max must be positive, got {self.max_ms} ms")

    @property
    def max_ticks(self) -> int:
        return (1 << self.levels) - 1

    @property
    def max_delay_ms(self) -> int:
        """The longest delay accepted: the declared max, else what the levels reach."""
        reach = self.unit_ms * self.max_ticks
        return reach if self.max_ms is None else min(self.max_ms, reach)

    def level_exchange(self, level: int) -> str:
        return f"{self.prefix}.{level:02d}"

    def level_queue(self, level: int, lane: int = 0) -> str:
        if self.lanes == 1:
            return f"{self.prefix}.{level:02d}"
        return f"{self.prefix}.{level:02d}.{lane}"

    def level_queues(self, level: int) -> tuple[str, ...]:
        """Every lane's queue of level ``level``."""
        return tuple(self.level_queue(level, lane) for lane in range(self.lanes))

    def level_ttl_ms(self, level: int) -> int:
        return self.unit_ms << level

    @property
    def delivery_exchange(self) -> str:
        return f"{self.prefix}.deliver"

    @property
    def layout(self) -> str:
        """What the routing keys depend on (the unit, the number of levels and of lanes), as a
        name; one lane adds nothing, so a layout made before lanes keeps its name."""
        lanes = f"-{self.lanes}lanes" if self.lanes > 1 else ""
        return f"binary-{self.unit_ms}ms-{self.levels}{lanes}"

    @property
    def layout_exchange(self) -> str:
        """The marker exchange that says the broker's levels have this layout."""
        return layout_exchange(self.prefix, self.layout)

    def ticks(self, delay: float | timedelta) -> int:
        """Whole units, rounded up (never early); errors past the largest representable delay."""
        ms = to_ms(delay)
        if ms < 0 or math.isnan(ms):
            raise DelayError(f"delay must not be negative, got {ms:g} ms")
        if self.max_ms is not None and ms > self.max_ms:
            raise DelayError(
                f"delay of {ms:g} ms exceeds the declared max of {self.max_ms} ms of delay"
                f" {self.prefix!r}: raise its `max` in the spec (vhosts[].delays[].max)"
            )
        ticks = math.ceil(ms / self.unit_ms)
        if ticks > self.max_ticks:
            raise DelayError(
                f"delay of {ms:g} ms exceeds the {self.levels} levels of {self.unit_ms} ms"
                f" (at most {self.unit_ms * self.max_ticks} ms): declare more levels"
            )
        return ticks

    def routing_key(self, ticks: int, address: str, lane: int = 0) -> str:
        """The key of ``ticks`` towards ``address``; ``lane`` is taken modulo ``lanes``."""
        _check_address(address)
        bits = format(ticks, f"0{self.levels}b")
        head = f"{lane % self.lanes}." if self.lanes > 1 else ""
        return head + "".join(f"{b}." for b in bits) + address

    def route(self, delay: float | timedelta, address: str, lane: int = 0) -> Route:
        """Entry exchange (the layout's mark) and routing key for ``delay`` towards ``address``
        through lane ``lane % lanes`` (callers spread messages by passing a counter)."""
        ticks = self.ticks(delay)
        key = self.routing_key(ticks, address, lane)
        return Route(self.layout_exchange, key, ticks * self.unit_ms)

    def decode(self, routing_key: str) -> tuple[int, str]:
        """(ticks, address) from a routing key made by ``routing_key``."""
        return self.decode_lane(routing_key)[:2]

    def decode_lane(self, routing_key: str) -> tuple[int, str, int]:
        """(ticks, address, lane) from a routing key made by ``routing_key``."""
        lane_words = 1 if self.lanes > 1 else 0
        words = routing_key.split(".", self.levels + lane_words)
        bits = words[lane_words:-1]
        lane = words[0] if lane_words else "0"
        if (
            len(words) != self.levels + lane_words + 1
            or any(w not in ("0", "1") for w in bits)
            or not lane.isdigit()
            or int(lane) >= self.lanes
        ):
            raise DelayError(f"{routing_key!r} is not a key of delay layout {self.layout}")
        return int("".join(bits), 2), words[-1], int(lane)

    # -- the bindings that make the routing work -------------------------------------------

    @property
    def _any_lane(self) -> str:
        return "*." if self.lanes > 1 else ""

    def _prefix_words(self, level: int) -> str:
        return "*." * (self.levels - 1 - level)

    def queue_pattern(self, level: int, lane: int = 0) -> str:
        """Binding key of level ``level``'s queue of lane ``lane``: bit ``level`` is set."""
        head = f"{lane}." if self.lanes > 1 else ""
        return f"{head}{self._prefix_words(level)}1.#"

    def skip_pattern(self, level: int) -> str:
        """Binding key from level ``level``'s exchange onwards: bit ``level`` is clear."""
        return f"{self._any_lane}{self._prefix_words(level)}0.#"

    def delivery_pattern(self, address: str) -> str:
        """Binding key of a target on the delivery exchange."""
        _check_address(address)
        return self._any_lane + "*." * self.levels + address

    def entry_pattern(self, level: int) -> str:
        """Binding key from the mark exchange to level ``level``'s: its bit is the highest set."""
        return self._any_lane + "0." * (self.levels - 1 - level) + "1.#"

    @property
    def no_delay_pattern(self) -> str:
        """Binding key from the mark exchange to the delivery exchange: no bit set."""
        return self._any_lane + "0." * self.levels + "#"


@dataclass(frozen=True)
class FixedDelays:
    """Fixed delay levels (ms, ascending), entered at ``<prefix>``, delivered via ``.deliver``."""

    prefix: str
    levels_ms: tuple[int, ...]
    round_up: bool = True
    """Round a delay up to the next level; False rejects any delay that is not exactly a level."""

    def __post_init__(self) -> None:
        if not self.levels_ms:
            raise DelayError("fixed delays need at least one level")
        if list(self.levels_ms) != sorted(set(self.levels_ms)) or self.levels_ms[0] <= 0:
            raise DelayError(
                "fixed delay levels must be positive and strictly ascending:"
                f" {list(self.levels_ms)}"
            )

    @property
    def entry_exchange(self) -> str:
        return self.prefix

    @property
    def delivery_exchange(self) -> str:
        return f"{self.prefix}.deliver"

    @property
    def layout(self) -> str:
        """What the routing keys and TTLs depend on (the list of levels), as a short name."""
        import hashlib  # here: a worker that never reads a fixed layout keeps OpenSSL unloaded

        text = ",".join(str(ms) for ms in self.levels_ms)
        return f"fixed-{len(self.levels_ms)}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    @property
    def layout_exchange(self) -> str:
        """The marker exchange that says the broker's levels have this layout."""
        return layout_exchange(self.prefix, self.layout)

    def level_queue(self, index: int) -> str:
        return f"{self.prefix}.{index:02d}"

    def level_for(self, delay: float | timedelta) -> int:
        ms = to_ms(delay)
        if ms < 0 or math.isnan(ms):
            raise DelayError(f"delay must not be negative, got {ms:g} ms")
        for index, level in enumerate(self.levels_ms):
            if ms <= level:
                if not self.round_up and ms != level:
                    break
                return index
        allowed = ", ".join(str(v) for v in self.levels_ms)
        raise DelayError(
            f"no fixed delay level for {ms:g} ms (levels: {allowed} ms"
            + ("" if self.round_up else "; rounding up is off")
            + ")"
        )

    def route(self, delay: float | timedelta, address: str, lane: int = 0) -> Route:
        """Entry exchange and key for ``delay`` towards ``address`` (fixed levels have one
        lane: ``lane`` is accepted for the one signature of both schemes, and unused)."""
        _check_address(address)
        index = self.level_for(delay)
        return Route(self.entry_exchange, f"{index}.{address}", self.levels_ms[index])

    def queue_pattern(self, index: int) -> str:
        return f"{index}.#"

    def delivery_pattern(self, address: str) -> str:
        _check_address(address)
        return f"*.{address}"


DelayScheme = BinaryDelays | FixedDelays

LAYOUT_WORD = "layout"
_LAYOUT_NAME = re.compile(
    r"(?P<prefix>.+)\.layout\.(?P<layout>binary-\d+ms-\d+(?:-\d+lanes)?|fixed-\d+-[0-9a-f]{12})"
)


def layout_exchange(prefix: str, layout: str) -> str:
    """The name of the marker exchange of delay ``prefix`` laid out as ``layout``."""
    return f"{prefix}.{LAYOUT_WORD}.{layout}"


def parse_layout_exchange(name: str) -> tuple[str, str] | None:
    """(prefix, layout) of a marker exchange's name; None for any other name."""
    found = _LAYOUT_NAME.fullmatch(name)
    return (found["prefix"], found["layout"]) if found else None


_LEVEL_SUFFIX = re.compile(r"\d{2}(?:\.\d+)?")


def is_level_object(prefix: str, name: str) -> bool:
    """Whether ``name`` is one of delay ``prefix``'s level exchanges or queues (``<prefix>.NN``,
    a lane's ``<prefix>.NN.L``) or its fixed entry exchange (``<prefix>``): what a routing
    key's layout must match."""
    if name == prefix:
        return True
    head, dot, tail = name.partition(prefix + ".")
    return not head and bool(dot) and _LEVEL_SUFFIX.fullmatch(tail) is not None


CLASSIC_FIXED_LEVELS_MS: tuple[int, ...] = tuple(
    s * 1000
    for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)
"""The 18 classic levels: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h."""


def levels_for(max_delay_ms: int, unit_ms: int) -> int:
    """The fewest binary levels that reach ``max_delay_ms`` in ``unit_ms`` units."""
    ticks = math.ceil(max_delay_ms / unit_ms)
    return max(1, ticks.bit_length())


def describe_levels(levels: Sequence[int]) -> str:
    return ", ".join(f"{ms} ms" for ms in levels)
