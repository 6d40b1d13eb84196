"""Chunks as Deliver frames carry them: plain entries and sub-entry batches."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest

from rabbitry.stream.errors import StreamProtocolError
from rabbitry.stream.frames import CHUNK_HEADER, chunk_records


def chunk(data: bytes, entries: int, records: int, first: int = 100, kind: int = 0) -> bytes:
    header = struct.pack(
        ">bbHIqQQiIII",
        0x50,
        kind,
        entries,
        records,
        1_700_000_000_000,
        1,
        first,
        zlib.crc32(data) - (1 << 32 if zlib.crc32(data) >= 1 << 31 else 0),
        len(data),
        0,
        0,
    )
    assert len(header) == CHUNK_HEADER
    return header + data


def entry(record: bytes) -> bytes:
    return struct.pack(">I", len(record)) + record


def test_plain_entries_are_records_in_order_from_the_chunks_first_offset() -> None:
    got = chunk_records(1, memoryview(chunk(entry(b"a") + entry(b"bc"), 2, 2)), check_crc=True)
    assert (got.subscription_id, got.first_offset, got.timestamp_ms) == (1, 100, 1_700_000_000_000)
    assert [bytes(r) for r in got.records] == [b"a", b"bc"]


@pytest.mark.parametrize("codec", [0, 1])
def test_a_sub_entry_batch_is_one_record_per_message(codec: int) -> None:
    inner = entry(b"x") + entry(b"yy")
    payload = gzip.compress(inner) if codec else inner
    batch = bytes((0x80 | codec << 4,)) + struct.pack(">HII", 2, len(inner), len(payload)) + payload
    got = chunk_records(2, memoryview(chunk(batch + entry(b"z"), 2, 3)))
    assert [bytes(r) for r in got.records] == [b"x", b"yy", b"z"]


def test_internal_chunks_hold_no_records() -> None:
    assert chunk_records(1, memoryview(chunk(entry(b"t"), 1, 1, kind=1))).records == []


def test_a_cut_chunk_is_a_protocol_error() -> None:
    with pytest.raises(StreamProtocolError, match="has"):
        chunk_records(1, memoryview(chunk(entry(b"abc"), 1, 1)[:-1]))


def test_a_chunk_cut_to_a_range_keeps_those_records_before_and_after_they_are_read() -> None:
    data = chunk(b"".join(entry(bytes([65 + i]) * (i + 1)) for i in range(5)), 5, 5)
    for read_first in (False, True):
        got = chunk_records(1, memoryview(data))
        if read_first:
            assert len(got.records) == 5
        cut = got.cut(101, 104)
        assert (cut.first_offset, cut.count) == (101, 3)
        assert [bytes(r) for r in cut.records] == [b"BB", b"CCC", b"DDDD"]
        assert cut.cut(103, 200).count == 1 and cut.cut(0, 101).count == 0


def test_entries_holding_fewer_records_than_the_header_says_are_a_protocol_error() -> None:
    got = chunk_records(1, memoryview(chunk(entry(b"a"), 1, 2)))
    assert got.count == 2
    with pytest.raises(StreamProtocolError, match="its entries hold 1 records, its header says 2"):
        _ = got.records


def test_a_record_running_past_its_chunk_is_a_protocol_error() -> None:
    got = chunk_records(1, memoryview(chunk(struct.pack(">I", 9) + b"abc", 1, 1)))
    with pytest.raises(StreamProtocolError, match="past its end"):
        _ = got.records
