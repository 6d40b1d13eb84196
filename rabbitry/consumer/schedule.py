"""When a periodic job is due: fixed intervals and 5-field cron expressions, in UTC.

A schedule answers one question, ``after(t_ms)``: the first occurrence strictly after ``t_ms``
(milliseconds since the epoch). Everything is pure and in UTC: no clock (the caller passes the
time), no time zones (a cron expression read in local time would skip or repeat occurrences at
daylight-saving changes), no I/O.

- ``Every``: every ``interval_ms``, aligned to the epoch (``Every(300_000)`` fires at :00, :05,
  :10 ...). Alignment is what lets several workers that start at different moments compute the
  same occurrences without talking to each other.
- ``Cron``: the standard five fields ``minute hour day-of-month month day-of-week`` with ``*``,
  lists (``1,15``), ranges (``9-17``), steps (``*/5``, ``0-30/10``, ``5/15``), month names
  (``jan``-``dec``) and weekday names (``sun``-``sat``; 0 and 7 are Sunday). As in Vixie cron,
  when both day fields are restricted a day matching either one is due. The ``@hourly``,
  ``@daily`` (``@midnight``), ``@weekly``, ``@monthly`` and ``@yearly`` (``@annually``) shorthands
  are accepted.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rabbitry.errors import ScheduleError as ScheduleError

MINUTE_MS = 60_000


@dataclass(frozen=True)
class Every:
    """Every ``interval_ms`` milliseconds, at whole multiples of it since the epoch (UTC)."""

    interval_ms: int

    def __post_init__(self) -> None:
        if self.interval_ms <= 0:
            raise ScheduleError(f"a periodic interval must be positive, got {self.interval_ms} ms")

    @classmethod
    def parse(cls, text: str | int | float | timedelta) -> Every:
        """``"5m"``, ``"1h30m"``, ``"250ms"``, a number of seconds, or a ``timedelta``."""
        if isinstance(text, timedelta):
            return cls(round(text.total_seconds() * 1000))
        if isinstance(text, int | float) and not isinstance(text, bool):
            return cls(round(text * 1000))
        from rabbitry.topology.spec.quantities import parse_duration  # loads pydantic

        try:
            return cls(parse_duration(text))
        except ValueError as exc:
            raise ScheduleError(f"periodic interval: {exc}") from None

    def after(self, t_ms: int) -> int:
        """The first occurrence strictly after ``t_ms``."""
        return (t_ms // self.interval_ms + 1) * self.interval_ms

    @property
    def text(self) -> str:
        """``every 5m``: how the schedule is written into its occurrences."""
        from rabbitry.topology.spec.quantities import format_duration

        return f"every {format_duration(self.interval_ms)}"


_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
_SHORTHANDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NO_NAMES: dict[str, int] = {}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, _NO_NAMES),
    ("hour", 0, 23, _NO_NAMES),
    ("day of month", 1, 31, _NO_NAMES),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _WEEKDAYS),
)
_SEARCH_YEARS = 28
"""The calendar repeats every 28 years (weekdays and leap years within 1901-2099): a cron
expression with no occurrence in that span has none at all."""


def _value(word: str, low: int, high: int, names: dict[str, int], field: str) -> int:
    number = names.get(word.lower()) if names else None
    if number is None:
        if not word.isdigit():
            raise ScheduleError(f"cron {field}: {word!r} is not a number from {low} to {high}")
        number = int(word)
    if not low <= number <= high:
        raise ScheduleError(f"cron {field}: {number} is outside {low}-{high}")
    return number


def _field(text: str, low: int, high: int, names: dict[str, int], field: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ScheduleError(f"cron {field}: step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            start, stop = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start = _value(first, low, high, names, field)
            stop = _value(last, low, high, names, field)
            if stop < start:
                raise ScheduleError(f"cron {field}: range {base!r} runs backwards")
        else:
            start = _value(base, low, high, names, field)
            stop = high if step_text else start
        values.update(range(start, stop + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A 5-field cron expression, read in UTC (see the module docstring for the syntax)."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday (7 is read as 0)."""
    any_day: bool
    """The day-of-month field is ``*``."""
    any_weekday: bool
    """The day-of-week field is ``*``."""

    @classmethod
    def parse(cls, expression: str) -> Cron:
        text = " ".join(expression.split())
        words = _SHORTHANDS.get(text.lower(), text).split(" ")
        if len(words) != 5:
            raise ScheduleError(
                f"cron expression {expression!r} has {len(words)} fields; expected 5:"
                " minute hour day-of-month month day-of-week (e.g. '*/5 * * * *')"
            )
        sets = [
            _field(word, low, high, names, name)
            for word, (name, low, high, names) in zip(words, _FIELDS, strict=True)
        ]
        weekdays = frozenset(d % 7 for d in sets[4])
        cron = cls(
            text,
            sets[0],
            sets[1],
            sets[2],
            sets[3],
            weekdays,
            any_day=words[2] == "*",
            any_weekday=words[4] == "*",
        )
        if cron.any_weekday and all(
            min(cron.days) > _longest_month(month) for month in cron.months
        ):
            raise ScheduleError(
                f"cron expression {expression!r} never fires: no month it names has day"
                f" {min(cron.days)}"
            )
        return cron

    @property
    def text(self) -> str:
        """``cron */5 * * * *``: how the schedule is written into its occurrences."""
        return f"cron {self.expression}"

    def _day_matches(self, day: datetime) -> bool:
        weekday = (day.weekday() + 1) % 7  # Python's Monday = 0, cron's Sunday = 0
        in_days = day.day in self.days
        in_weekdays = weekday in self.weekdays
        if self.any_day or self.any_weekday:
            return in_days and in_weekdays
        return in_days or in_weekdays

    def after(self, t_ms: int) -> int:
        """The first occurrence strictly after ``t_ms`` (whole minutes)."""
        start = (t_ms // MINUTE_MS + 1) * MINUTE_MS
        at = datetime.fromtimestamp(start / 1000, UTC)
        end = at.replace(year=at.year + _SEARCH_YEARS, month=1, day=1, hour=0, minute=0)
        while at < end:
            if at.month not in self.months:
                year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
                at = at.replace(year=year, month=month, day=1, hour=0, minute=0)
                continue
            if not self._day_matches(at):
                at = (at + timedelta(days=1)).replace(hour=0, minute=0)
                continue
            if at.hour not in self.hours:
                at = (at + timedelta(hours=1)).replace(minute=0)
                continue
            if at.minute not in self.minutes:
                at += timedelta(minutes=1)
                continue
            return int(at.timestamp()) * 1000
        raise ScheduleError(f"cron expression {self.expression!r} never fires")


def _longest_month(month: int) -> int:
    return 29 if month == 2 else calendar.monthrange(2001, month)[1]


Schedule = Every | Cron
"""When a periodic job is due."""


def schedule_of(
    every: str | int | float | timedelta | None = None, *, cron: str | None = None
) -> Schedule:
    """The schedule of ``@app.periodic(every)`` or ``@app.periodic(cron=...)``: exactly one."""
    if (every is None) == (cron is None):
        raise ScheduleError(
            "give a periodic job either an interval (periodic('5m')) or a cron expression"
            " (periodic(cron='*/5 * * * *')), not both or neither"
        )
    if cron is not None:
        return Cron.parse(cron)
    assert every is not None
    return Every.parse(every)


def fingerprint(text: str) -> str:
    """Eight hex digits of a schedule's ``text`` that change when the schedule does (part of
    each occurrence's id)."""
    import hashlib  # OpenSSL's, 2 MiB resident: only workers with periodic jobs need it

    return hashlib.sha256(text.encode()).hexdigest()[:8]
