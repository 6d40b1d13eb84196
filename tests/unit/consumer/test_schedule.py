"""Schedules of periodic jobs: intervals aligned to the epoch and 5-field cron, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.consumer.schedule import (
    Cron,
    Every,
    ScheduleError,
    fingerprint,
    schedule_of,
)
from tests.profiles import examples


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def iso(value: int) -> str:
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M %a")


def test_an_interval_fires_at_whole_multiples_of_itself_since_the_epoch() -> None:
    every = Every.parse("5m")
    assert every.after(ms("2026-11-25 10:41:13")) == ms("2026-11-25 10:45:00")
    assert every.after(ms("2026-11-25 10:45:00")) == ms("2026-11-25 10:50:00")
    assert every.text == "every 5m"


def test_intervals_are_read_from_text_seconds_and_timedeltas() -> None:
    assert Every.parse("1h30m").interval_ms == 5_400_000
    assert Every.parse("250ms").interval_ms == 250
    assert Every.parse(1.5).interval_ms == 1500
    assert Every.parse(timedelta(minutes=2)).interval_ms == 120_000


@pytest.mark.parametrize("bad", ["0s", "soon", -1, 0])
def test_an_interval_that_is_not_a_positive_duration_is_refused(bad: object) -> None:
    with pytest.raises(ScheduleError):
        Every.parse(bad)  # type: ignore[arg-type]


def test_every_five_minutes_in_cron() -> None:
    cron = Cron.parse("*/5 * * * *")
    assert cron.after(ms("2026-11-25 10:41:13")) == ms("2026-11-25 10:45:00")
    assert cron.after(ms("2026-11-25 10:45:00")) == ms("2026-11-25 10:50:00")
    assert cron.after(ms("2026-11-25 23:58:00")) == ms("2026-11-26 00:00:00")


def test_weekdays_at_nine_skip_the_weekend() -> None:
    cron = Cron.parse("0 9 * * mon-fri")
    # 2026-11-27 is a Friday
    assert iso(cron.after(ms("2026-11-27 09:00:00"))) == "2026-11-30 09:00 Mon"


def test_lists_ranges_steps_and_names_combine() -> None:
    cron = Cron.parse("0,30 8-18/2 * jan,jul *")
    assert cron.minutes == {0, 30}
    assert cron.hours == {8, 10, 12, 14, 16, 18}
    assert cron.months == {1, 7}
    assert cron.after(ms("2026-02-01 00:00:00")) == ms("2026-07-01 08:00:00")


def test_a_start_with_a_step_runs_to_the_end_of_the_field() -> None:
    assert Cron.parse("5/20 * * * *").minutes == {5, 25, 45}


def test_sunday_is_zero_and_seven() -> None:
    assert Cron.parse("0 0 * * 7").weekdays == Cron.parse("0 0 * * sun").weekdays == {0}


def test_when_both_day_fields_are_restricted_either_one_makes_a_day_due() -> None:
    cron = Cron.parse("0 0 13 * fri")  # the 13th, and every Friday
    # 2026-11-25 is a Wednesday: Friday the 27th comes before December 13th
    assert iso(cron.after(ms("2026-11-25 12:00:00"))) == "2026-11-27 00:00 Fri"
    assert iso(cron.after(ms("2026-12-11 12:00:00"))) == "2026-12-13 00:00 Sun"


def test_the_29th_of_february_waits_for_a_leap_year() -> None:
    assert iso(Cron.parse("0 0 29 2 *").after(ms("2026-03-01 00:00:00"))) == (
        "2028-02-29 00:00 Tue"
    )


def test_shorthands_stand_for_their_expressions() -> None:
    assert Cron.parse("@hourly").after(ms("2026-11-25 10:41:00")) == ms("2026-11-25 11:00:00")
    assert Cron.parse("@daily").minutes == Cron.parse("0 0 * * *").minutes


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("* * * *", "has 4 fields"),
        ("60 * * * *", "outside 0-59"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "runs backwards"),
        ("0 0 * foo *", "'foo' is not a number"),
        ("0 0 31 2 *", "never fires"),
    ],
)
def test_a_bad_cron_expression_says_what_is_wrong(expression: str, says: str) -> None:
    with pytest.raises(ScheduleError, match=says):
        Cron.parse(expression)


def test_a_job_has_an_interval_or_a_cron_expression_not_both() -> None:
    assert isinstance(schedule_of("5m"), Every)
    assert isinstance(schedule_of(cron="* * * * *"), Cron)
    with pytest.raises(ScheduleError, match="not both or neither"):
        schedule_of("5m", cron="* * * * *")
    with pytest.raises(ScheduleError, match="not both or neither"):
        schedule_of()


def test_the_fingerprint_changes_with_the_schedule_and_only_with_it() -> None:
    assert fingerprint(Every.parse("5m").text) == fingerprint(Every.parse(300).text)
    assert fingerprint(Every.parse("5m").text) != fingerprint(Cron.parse("*/5 * * * *").text)


def brute_force_next(cron: Cron, t_ms: int) -> int:
    """The next due minute found by trying every minute: the reference for ``after``."""
    at = datetime.fromtimestamp((t_ms // 60_000 + 1) * 60, UTC)
    while True:
        if (
            at.minute in cron.minutes
            and at.hour in cron.hours
            and at.month in cron.months
            and cron._day_matches(at)
        ):
            return int(at.timestamp()) * 1000
        at += timedelta(minutes=1)


FIELDS = st.tuples(
    st.sampled_from(["*", "*/7", "0,15,45", "10-20/5", "59"]),
    st.sampled_from(["*", "*/6", "0", "9-17", "23"]),
    st.sampled_from(["*", "1", "1,15", "28-31"]),
    st.sampled_from(["*", "2", "*/3", "nov,dec"]),
    st.sampled_from(["*", "mon-fri", "0", "sat"]),
)


@settings(max_examples=examples(60), deadline=None)
@given(
    FIELDS, st.integers(min_value=ms("2026-01-01 00:00:00"), max_value=ms("2027-12-31 00:00:00"))
)
def test_cron_finds_the_same_next_minute_as_trying_each_minute(
    fields: tuple[str, ...], t_ms: int
) -> None:
    cron = Cron.parse(" ".join(fields))
    found = cron.after(t_ms)
    assert found > t_ms
    if found - t_ms <= 62 * 24 * 3_600_000:  # the reference walks minute by minute
        assert found == brute_force_next(cron, t_ms)


@given(st.integers(min_value=1, max_value=10**8), st.integers(min_value=0, max_value=2**42))
def test_an_interval_is_next_due_within_one_interval_and_on_its_grid(
    interval: int, t_ms: int
) -> None:
    every = Every(interval)
    found = every.after(t_ms)
    assert t_ms < found <= t_ms + interval
    assert found % interval == 0
