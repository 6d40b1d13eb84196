"""Stream offsets as the ``rabbitmq`` source plans them: pure, no broker, no clock.

A stream's messages carry increasing offsets from its first retained one, consecutive within a
segment (each segment after the first begins with one offset that is no message, see
``data_lost``; limits such as ``maxRecordsPerTrigger`` count offsets). The source keeps, per
stream, the offset of the next message to read (Spark's checkpoint stores that map as JSON),
so a micro-batch is a half-open range ``[start, end)`` per stream and reading it again gives the
same rows. This module parses ``startingOffsets`` / ``endingOffsets``, caps a micro-batch at
``maxRecordsPerTrigger`` and cuts ranges into Spark partitions of at most
``maxRecordsPerPartition`` messages.
"""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rabbitry.errors import SourceOptionError


class OffsetKind(enum.StrEnum):
    """Where a read starts or ends."""

    EARLIEST = "earliest"
    """The first message the stream still holds."""
    LATEST = "latest"
    """After the last message the stream holds when the read is planned."""
    TIMESTAMP = "timestamp"
    """The first chunk written at or after a point in time (start only)."""
    OFFSETS = "offsets"
    """Given per stream, as JSON; streams left out take the default (earliest or latest)."""


@dataclass(frozen=True)
class OffsetSpec:
    kind: OffsetKind
    timestamp: dt.datetime | None = None
    offsets: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Bounds:
    """What a stream holds: offsets ``first`` up to ``next - 1`` (empty when equal)."""

    first: int
    next: int


@dataclass(frozen=True)
class OffsetRange:
    """Messages ``start`` up to ``end - 1`` of ``stream``: what one Spark task reads."""

    stream: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def parse_offset_spec(
    option: str, text: str | None, default: OffsetKind, streams: Sequence[str], *, start: bool
) -> OffsetSpec:
    """``earliest``, ``latest``, a timestamp (start only: epoch milliseconds or ISO 8601) or
    JSON ``{"stream": offset}`` naming some of ``streams`` (-2 earliest, -1 latest, as Kafka)."""
    if text is None or not text.strip():
        return OffsetSpec(default)
    value = text.strip()
    lowered = value.lower()
    if lowered in (OffsetKind.EARLIEST, OffsetKind.LATEST):
        return OffsetSpec(OffsetKind(lowered))
    if value.startswith("{"):
        try:
            given = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SourceOptionError(f"{option}: not valid JSON ({exc}): {value!r}") from None
        if not isinstance(given, dict):
            raise SourceOptionError(f"{option}: JSON offsets are an object {{stream: offset}}")
        unknown = sorted(set(given) - set(streams))
        if unknown:
            raise SourceOptionError(
                f"{option}: {', '.join(map(repr, unknown))} not among the streams read"
                f" ({', '.join(streams)})"
            )
        offsets: dict[str, int] = {}
        for name, offset in given.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise SourceOptionError(
                    f"{option}: offset of {name!r} must be a whole number >= 0"
                    f" (or -2 earliest, -1 latest), not {offset!r}"
                )
            offsets[name] = offset
        return OffsetSpec(OffsetKind.OFFSETS, offsets=offsets)
    if start:
        stamp = _timestamp(value)
        if stamp is not None:
            return OffsetSpec(OffsetKind.TIMESTAMP, timestamp=stamp)
    what = "earliest, latest, a timestamp" if start else "earliest, latest"
    raise SourceOptionError(
        f"{option} must be {what} or JSON per stream such as '{{\"orders\": 42}}', not {value!r}"
    )


def _timestamp(value: str) -> dt.datetime | None:
    if value.isdigit():
        return dt.datetime.fromtimestamp(int(value) / 1000, tz=dt.UTC)
    try:
        stamp = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=dt.UTC)


def resolve(
    spec: OffsetSpec, bounds: Mapping[str, Bounds], found: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Offsets per stream for ``spec``; ``found`` holds what the broker answered for a
    timestamp. Offsets are clamped to what the stream holds (retention may have removed the
    beginning; an offset past the end waits there)."""
    out: dict[str, int] = {}
    for stream, b in bounds.items():
        if spec.kind is OffsetKind.EARLIEST:
            offset = b.first
        elif spec.kind is OffsetKind.LATEST:
            offset = b.next
        elif spec.kind is OffsetKind.TIMESTAMP:
            offset = (found or {}).get(stream, b.next)
        else:
            given = spec.offsets.get(stream, -2)
            offset = b.first if given == -2 else b.next if given == -1 else given
        out[stream] = min(max(offset, b.first), b.next)
    return out


def cap(
    start: Mapping[str, int], latest: Mapping[str, int], max_records: int | None
) -> dict[str, int]:
    """End offsets of a micro-batch from ``start``: ``latest``, or ``max_records`` in all,
    shared out in proportion to each stream's backlog (largest remainders first, so the shares
    add up to the limit exactly)."""
    ends = {s: max(latest.get(s, start.get(s, 0)), start.get(s, 0)) for s in latest}
    begin = {s: start.get(s, ends[s]) for s in ends}
    backlog = {s: ends[s] - begin[s] for s in ends}
    total = sum(backlog.values())
    if max_records is None or total <= max_records:
        return ends
    shares = {s: backlog[s] * max_records // total for s in ends}
    left = max_records - sum(shares.values())
    by_remainder = sorted(ends, key=lambda s: (-(backlog[s] * max_records % total), s))
    for stream in by_remainder[:left]:
        shares[stream] += 1
    return {s: begin[s] + min(backlog[s], shares[s]) for s in sorted(ends)}


def ranges(
    start: Mapping[str, int],
    end: Mapping[str, int],
    max_per_partition: int | None,
    min_partitions: int = 1,
) -> list[OffsetRange]:
    """Spark partitions for ``[start, end)`` per stream: one per stream, cut into as few
    near-equal pieces as keep each to at most ``max_per_partition`` messages (``ceil(size /
    max)``, as Spark's Kafka source cuts), never a full piece and a sliver beside it; empty
    ranges are left out. ``min_partitions`` asks at least that many pieces in all: each stream
    is cut into at least as many as its share of all the messages asks (``ceil(size *
    min_partitions / total)``, at most one per message), so a read has at least
    ``min_partitions`` pieces (fewer only when it has fewer messages) and one stream is read by
    several tasks. Ordered by stream, then offset, so the same offsets always give the same
    partitions."""
    sizes = {s: end[s] - start.get(s, end[s]) for s in end}
    total = sum(n for n in sizes.values() if n > 0)
    out: list[OffsetRange] = []
    for stream in sorted(end):
        first, size = start.get(stream, end[stream]), sizes[stream]
        if size <= 0:
            continue
        step = max_per_partition or size
        shares = min(size, -(-size * min_partitions // total))  # ceiling
        pieces = max(shares, -(-size // step))
        cuts = [first + i * size // pieces for i in range(pieces + 1)]
        out.extend(OffsetRange(stream, a, b) for a, b in itertools.pairwise(cuts))
    return out


def offsets_json(offsets: Mapping[str, int]) -> dict[str, int]:
    """The checkpoint form: a plain dict, streams in order."""
    return {stream: int(offsets[stream]) for stream in sorted(offsets)}


def checked_offsets(value: object, streams: Sequence[str]) -> dict[str, int]:
    """Offsets read back from Spark's checkpoint; a stream added since starts at -2 (earliest)."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in value.items()
    ):
        raise SourceOptionError(
            f"the checkpoint holds offsets this source did not write: {value!r}"
        )
    return {stream: int(value.get(stream, -2)) for stream in streams}


@dataclass(frozen=True)
class DataLoss:
    """Offsets ``asked`` up to ``first - 1`` of ``stream`` were to be read, but retention
    removed them: the stream now starts at ``first``."""

    stream: str
    asked: int
    first: int

    @property
    def skipped(self) -> int:
        return self.first - self.asked

    def describe(self) -> str:
        return (
            f"stream {self.stream!r} no longer holds offset {self.asked}: the first offset it"
            f" holds is {self.first} (retention removed {self.skipped:,} offsets to be read)"
        )


def data_lost(asked: Mapping[str, int], bounds: Mapping[str, Bounds]) -> list[DataLoss]:
    """The streams whose offset ``asked`` (-2 and -1 mean earliest and latest, never lost) lies
    before the segment that holds the first message left; a stream never written to has lost
    nothing.

    Offsets count chunks' records, not only messages: every segment after the first begins
    with one that is not a message (the broker's tracking snapshot), so the offset just before
    the first message held still exists and reading from it loses nothing. Past that one, an
    offset before the first message was removed with its segment."""
    return [
        DataLoss(stream, offset, bounds[stream].first)
        for stream, offset in sorted(asked.items())
        if stream in bounds
        and 0 <= offset < bounds[stream].first - 1
        and bounds[stream].next > bounds[stream].first
    ]
