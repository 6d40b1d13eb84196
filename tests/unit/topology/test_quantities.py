"""Durations and sizes: parsing what people write, writing back what parses to the same int."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rabbitry.topology.spec.quantities import (
    format_duration,
    format_size,
    parse_duration,
    parse_max_age,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("2d", 172_800_000),
        ("1h30m", 5_400_000),
        (" 10 s ", 10_000),
        ("1500", 1500),
        (1500, 1500),
        (2.0, 2),
    ],
)
def test_parse_duration(text: object, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["", "soon", "1.5s", "5 mins", "-1s", -1, True, None, [1], "1w"])
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match=r"expected a duration|cannot be negative"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("10MB", 10_000_000),
        ("10mb", 10_000_000),
        ("512KiB", 512 * 1024),
        ("1GiB", 1024**3),
        ("1 TB", 10**12),
        ("7B", 7),
        ("42", 42),
        (42, 42),
    ],
)
def test_parse_size(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["10 parsecs", "1.5GB", "-1", -5, False, "MB"])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


def test_max_age_keeps_broker_notation() -> None:
    assert parse_max_age("7D") == "7D"
    assert parse_max_age("7d") == "7D"
    assert parse_max_age("1M") == "1M"  # months, not minutes
    assert parse_max_age("30m") == "30m"
    with pytest.raises(ValueError, match="M months"):
        parse_max_age("7 days")
    with pytest.raises(ValueError):
        parse_max_age(7)


def test_formatting_picks_the_largest_exact_unit() -> None:
    assert format_duration(30_000) == "30s"
    assert format_duration(86_400_000) == "1d"
    assert format_duration(90_000) == "90s"
    assert format_duration(1500) == 1500
    assert format_duration(0) == 0
    assert format_size(10 * 1024**2) == "10MiB"
    assert format_size(10_000_000) == "10MB"
    assert format_size(1000) == "1kB"
    assert format_size(1001) == 1001


@given(st.integers(0, 10**15))
def test_durations_round_trip(ms: int) -> None:
    assert parse_duration(format_duration(ms)) == ms


@given(st.integers(0, 10**15))
def test_sizes_round_trip(size: int) -> None:
    assert parse_size(format_size(size)) == size
