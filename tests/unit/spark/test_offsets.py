"""The source's offset arithmetic: what a read starts and ends at, micro-batch caps, splits."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitry.spark.offsets import (
    Bounds,
    DataLoss,
    OffsetKind,
    OffsetRange,
    cap,
    checked_offsets,
    data_lost,
    offsets_json,
    parse_offset_spec,
    ranges,
    resolve,
)
from rabbitry.spark.options import SourceOptionError

STREAMS = ("a", "b")


def spec(text: str | None, *, start: bool = True) -> object:
    return parse_offset_spec("startingOffsets", text, OffsetKind.EARLIEST, STREAMS, start=start)


def test_words_timestamps_and_json_are_understood() -> None:
    assert spec(None) == spec("earliest")
    assert parse_offset_spec("x", " LATEST ", OffsetKind.EARLIEST, STREAMS, start=True).kind == (
        OffsetKind.LATEST
    )
    stamp = parse_offset_spec("x", "1700000000000", OffsetKind.EARLIEST, STREAMS, start=True)
    assert stamp.timestamp == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    iso = parse_offset_spec("x", "2024-05-01T10:00:00", OffsetKind.EARLIEST, STREAMS, start=True)
    assert iso.timestamp == dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
    given_ = parse_offset_spec("x", '{"a": 5, "b": -1}', OffsetKind.EARLIEST, STREAMS, start=True)
    assert (given_.kind, dict(given_.offsets)) == (OffsetKind.OFFSETS, {"a": 5, "b": -1})


@pytest.mark.parametrize(
    ("text", "start", "message"),
    [
        ("soon", True, "must be earliest, latest, a timestamp or JSON"),
        ("1700000000000", False, "endingOffsets must be earliest, latest or JSON"),
        ('{"c": 1}', True, "'c' not among the streams read (a, b)"),
        ('{"a": "1"}', True, "offset of 'a' must be a whole number"),
        ('{"a": -3}', True, "offset of 'a' must be a whole number"),
        ("[1]", True, "must be earliest"),
        ("{nope", True, "not valid JSON"),
    ],
)
def test_bad_offsets_name_the_option_and_what_to_write(
    text: str, start: bool, message: str
) -> None:
    option = "startingOffsets" if start else "endingOffsets"
    with pytest.raises(SourceOptionError, match=re.escape(message)):
        parse_offset_spec(option, text, OffsetKind.LATEST, STREAMS, start=start)


def test_offsets_resolve_against_what_each_stream_holds() -> None:
    bounds = {"a": Bounds(10, 100), "b": Bounds(0, 0)}
    earliest = parse_offset_spec("x", "earliest", OffsetKind.LATEST, STREAMS, start=True)
    latest = parse_offset_spec("x", "latest", OffsetKind.LATEST, STREAMS, start=True)
    assert resolve(earliest, bounds) == {"a": 10, "b": 0}
    assert resolve(latest, bounds) == {"a": 100, "b": 0}
    # below the first retained offset and past the end are clamped; -2/-1 are earliest/latest
    given_ = parse_offset_spec("x", '{"a": 3}', OffsetKind.LATEST, STREAMS, start=True)
    assert resolve(given_, bounds) == {"a": 10, "b": 0}
    past = parse_offset_spec("x", '{"a": 500, "b": -1}', OffsetKind.LATEST, STREAMS, start=True)
    assert resolve(past, bounds) == {"a": 100, "b": 0}
    stamp = parse_offset_spec("x", "1700000000000", OffsetKind.LATEST, STREAMS, start=True)
    assert resolve(stamp, bounds, {"a": 42}) == {"a": 42, "b": 0}


def test_a_micro_batch_is_capped_in_proportion_to_each_backlog() -> None:
    start = {"a": 0, "b": 100}
    latest = {"a": 900, "b": 200}
    assert cap(start, latest, None) == latest
    assert cap(start, latest, 5000) == latest
    assert cap(start, latest, 100) == {"a": 90, "b": 110}
    # the shares add up to the limit: the largest remainders get the odd ones
    assert cap({"a": 0, "b": 0}, {"a": 10_000, "b": 1}, 10) == {"a": 10, "b": 0}
    assert cap({"a": 0, "b": 0}, {"a": 5, "b": 5}, 3) == {"a": 2, "b": 1}
    # offsets never go back, even if a stream looks shorter than where the query stands
    assert cap({"a": 50}, {"a": 40}, None) == {"a": 50}


@given(
    backlog=st.dictionaries(
        st.sampled_from("abcd"), st.integers(0, 10_000), min_size=1, max_size=4
    ),
    limit=st.integers(1, 5_000),
)
def test_a_capped_batch_reads_its_limit_exactly_when_the_backlog_is_larger(
    backlog: dict[str, int], limit: int
) -> None:
    start = dict.fromkeys(backlog, 7)
    latest = {s: 7 + n for s, n in backlog.items()}
    end = cap(start, latest, limit)
    read = sum(end[s] - start[s] for s in backlog)
    assert all(start[s] <= end[s] <= latest[s] for s in backlog)
    if sum(backlog.values()) <= limit:
        assert end == latest
    else:
        assert read == limit


def test_ranges_are_one_per_stream_cut_into_near_equal_pieces_of_at_most_the_size() -> None:
    assert ranges({"a": 0, "b": 5}, {"a": 250, "b": 5}, 100) == [
        OffsetRange("a", 0, 83),
        OffsetRange("a", 83, 166),
        OffsetRange("a", 166, 250),
    ]
    assert ranges({"b": 3, "a": 1}, {"a": 2, "b": 9}, None) == [
        OffsetRange("a", 1, 2),
        OffsetRange("b", 3, 9),
    ]


@given(start=st.integers(0, 10_000), size=st.integers(0, 10_000), piece=st.integers(1, 3_000))
def test_ranges_cover_each_offset_exactly_once(start: int, size: int, piece: int) -> None:
    got = ranges({"s": start}, {"s": start + size}, piece)
    covered = [o for r in got for o in range(r.start, r.end)]
    assert covered == list(range(start, start + size))
    assert all(0 < r.size <= piece for r in got)
    assert len(got) == -(-size // piece), "as few pieces as the size allows"
    assert all(max(r.size for r in got) - r.size <= 1 for r in got), "near-equal"


def test_min_partitions_cuts_one_stream_into_near_equal_pieces() -> None:
    assert ranges({"s": 10}, {"s": 15}, 100, min_partitions=4) == [
        OffsetRange("s", 10, 11),
        OffsetRange("s", 11, 12),
        OffsetRange("s", 12, 13),
        OffsetRange("s", 13, 15),
    ]
    # each stream by its share: 900 of 1000 messages ask 3 of 3 pieces (ceiling), 100 ask 1
    assert ranges({"a": 0, "b": 0}, {"a": 900, "b": 100}, None, min_partitions=3) == [
        OffsetRange("a", 0, 300),
        OffsetRange("a", 300, 600),
        OffsetRange("a", 600, 900),
        OffsetRange("b", 0, 100),
    ]


def test_min_partitions_below_what_the_partition_size_gives_changes_nothing() -> None:
    assert ranges({"a": 0}, {"a": 250}, 100, min_partitions=2) == ranges({"a": 0}, {"a": 250}, 100)


def test_a_range_just_past_the_partition_size_is_halved_not_cut_into_a_piece_and_a_sliver() -> None:
    # 500,000 messages and one offset more (streams' offsets are not dense): two tasks of
    # half each, not one task reading everything while the other reads one offset
    assert ranges({"s": 0}, {"s": 500_001}, 500_000, min_partitions=2) == [
        OffsetRange("s", 0, 250_000),
        OffsetRange("s", 250_000, 500_001),
    ]
    assert [r.size for r in ranges({"s": 0}, {"s": 1_000_001}, 500_000)] == [
        333_333,
        333_334,
        333_334,
    ]


@given(
    sizes=st.lists(st.integers(0, 5_000), min_size=1, max_size=4),
    piece=st.one_of(st.none(), st.integers(1, 3_000)),
    least=st.integers(1, 64),
)
def test_min_partitions_reads_each_offset_once_in_at_least_that_many_pieces(
    sizes: list[int], piece: int | None, least: int
) -> None:
    start = {f"s{i}": 7 * i for i in range(len(sizes))}
    end = {s: start[s] + n for s, n in zip(start, sizes, strict=True)}
    got = ranges(start, end, piece, min_partitions=least)
    for s in start:
        covered = [o for r in got if r.stream == s for o in range(r.start, r.end)]
        assert covered == list(range(start[s], end[s]))
    assert all(r.size > 0 and (piece is None or r.size <= piece) for r in got)
    assert len(got) >= min(least, sum(sizes))
    assert ranges(start, end, piece, min_partitions=least) == got


def test_checkpoint_offsets_round_trip_and_new_streams_start_at_the_beginning() -> None:
    saved = offsets_json({"b": 4, "a": 2})
    assert list(saved) == ["a", "b"]
    assert checked_offsets(saved, ("a", "b", "c")) == {"a": 2, "b": 4, "c": -2}
    with pytest.raises(SourceOptionError, match="did not write"):
        checked_offsets({"a": "x"}, ("a",))


def test_offsets_retention_removed_are_data_loss_and_earliest_or_latest_never_are() -> None:
    bounds = {"a": Bounds(120, 500), "b": Bounds(0, 40), "c": Bounds(0, 0)}
    asked = {"a": 100, "b": 0, "c": 7}
    assert data_lost(asked, bounds) == [DataLoss("a", 100, 120)]
    assert data_lost({"a": -2, "b": -1}, bounds) == []
    assert data_lost({"a": 120}, bounds) == []
    assert data_lost({"a": 119}, bounds) == []  # the first held segment's tracking snapshot
    assert data_lost({"a": 118}, bounds) == [DataLoss("a", 118, 120)]
    loss = data_lost({"a": 3}, bounds)[0]
    assert loss.skipped == 117
    assert loss.describe() == (
        "stream 'a' no longer holds offset 3: the first offset it holds is 120"
        " (retention removed 117 offsets to be read)"
    )
