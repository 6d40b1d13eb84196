"""The stack lock trusts no clock across hosts: a waiter takes a lock over only once it saw it
unrenewed for its ttl on its own monotonic clock, and a holder stops writing once its own lease
ran out or it saw another run's value (fake clocks, a fake broker)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from rabbitry.errors import RabbitryError
from rabbitry.provisioner.lease import HOLD_SHARE, Lease, Watch, holder_ttl
from rabbitry.provisioner.lock import (
    DEFAULT_TTL,
    LockHeld,
    LockLost,
    StackLock,
    default_ttl,
    lock_name,
)


class Clock:
    """A monotonic clock that moves only when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Register:
    """The broker's global parameters, answering at once."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.write_guard = None

    def clone(self) -> Register:
        return self

    def __enter__(self) -> Register:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def global_parameter(self, name: str) -> Any:
        return self.values.get(name)

    def put_global_parameter(self, name: str, value: Any) -> None:
        self.values[name] = value


# -- the rules -------------------------------------------------------------------------------


def test_a_waiter_may_take_over_only_after_seeing_no_change_for_the_ttl() -> None:
    watch = Watch()
    watch.observe("v1", now=0.0)
    assert not watch.may_take_over(59.9, ttl=60)
    assert watch.may_take_over(60.0, ttl=60)


def test_every_renewal_seen_starts_the_wait_again() -> None:
    watch = Watch()
    for second in range(0, 300, 15):  # renewed every 15 s, watched for five minutes
        watch.observe(f"renewal {second // 15}", now=float(second))
        assert not watch.may_take_over(second + 14.9, ttl=60)
    assert watch.changes == 19


def test_nothing_seen_is_nothing_to_take_over() -> None:
    assert not Watch().may_take_over(10_000.0, ttl=1)


def test_the_holder_stops_once_a_share_of_its_ttl_passed_without_a_landed_renewal() -> None:
    lease = Lease(ttl=60)
    lease.confirm(started=0.0)
    assert lease.problem(HOLD_SHARE * 60 - 0.1) == ""
    assert "no renewal of it was confirmed for 45 s" in lease.problem(HOLD_SHARE * 60)
    lease.confirm(started=40.0)
    assert lease.problem(80.0) == ""


def test_a_lost_lease_stays_lost_whatever_lands_after() -> None:
    lease = Lease(ttl=60)
    lease.confirm(0.0)
    lease.lose("ci@b (pid 7) took it over while this run held it")
    lease.confirm(1.0)
    assert lease.problem(1.0).startswith("ci@b (pid 7) took it over")


@pytest.mark.parametrize(
    ("written", "ttl"),
    [
        ({"ttl": 5}, 5.0),
        ({}, 60.0),
        ({"ttl": "x"}, 60.0),
        ({"ttl": 0}, 1.0),
        ({"ttl": 1e9}, 3600.0),
    ],
)
def test_the_holders_ttl_is_read_from_the_lock_within_bounds(
    written: dict[str, Any], ttl: float
) -> None:
    assert holder_ttl(written, 60.0) == ttl


# -- the lock on a fake broker ---------------------------------------------------------------


def lock_of(register: Register, clock: Clock, wall: float = 0.0, ttl: float = 8.0) -> StackLock:
    return StackLock(
        register,  # type: ignore[arg-type]
        "shop",
        ttl=ttl,
        settle=0.05,
        clock=lambda: clock.now + wall,
        monotonic=clock,
        sleep=clock.sleep,
    )


class Renewing(Clock):
    """A clock under which the holder renews its lock every ``every`` seconds that pass."""

    def __init__(self, holder: StackLock, every: float) -> None:
        super().__init__()
        self.holder, self.every, self.next = holder, every, self.now + every

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        while self.now >= self.next:
            self.holder.renewals += 1
            register = self.holder.client
            register.put_global_parameter(self.holder.name, self.holder._value(0.0))
            self.next += self.every


def test_a_waiter_whose_clock_runs_two_minutes_fast_does_not_take_a_live_lock() -> None:
    register = Register()
    holder = lock_of(register, Clock())
    holder.acquire()
    clock = Renewing(holder, every=2.0)  # the holder's ttl / 4
    waiter = lock_of(register, clock, wall=120.0)  # its wall clock: two minutes ahead
    with pytest.raises(LockHeld, match="being applied by"):
        waiter.acquire(timeout=60)
    assert register.values[lock_name("shop")]["token"] == holder.token


def test_a_lock_nobody_renews_is_taken_over_after_its_ttl_on_the_waiters_clock() -> None:
    register = Register()
    holder = lock_of(register, Clock())
    holder.acquire()
    clock = Clock()
    waiter = lock_of(register, clock, wall=120.0)
    started = clock.now
    waiter.acquire(timeout=0)  # it looks abandoned by the wall clock: watched, then taken
    assert register.values[lock_name("shop")]["token"] == waiter.token
    assert 8.0 <= clock.now - started <= 10.0


def test_a_lock_that_looks_live_by_the_clock_is_refused_at_once_without_a_timeout() -> None:
    register = Register()
    lock_of(register, Clock(), ttl=8.0).acquire()
    clock = Clock()
    waiter = lock_of(register, clock, wall=-120.0)  # a slow clock: the lock looks live
    with pytest.raises(LockHeld, match="taken over once it has gone unrenewed for 8 s"):
        waiter.acquire(timeout=0)
    assert clock.now - 1000.0 < 1.0


def test_a_holder_paused_past_its_lease_stops_before_its_next_write() -> None:
    register = Register()
    clock = Clock()
    holder = lock_of(register, clock)
    holder.acquire()
    holder.check()
    clock.now += HOLD_SHARE * 8.0  # SIGSTOP: no renewal went out meanwhile
    with pytest.raises(LockLost, match="no renewal of it was confirmed for 6 s"):
        holder.check()


def test_a_holder_whose_renewer_finds_another_value_stops_every_write_after() -> None:
    register = Register()
    holder = lock_of(register, Clock(), ttl=1.0)  # renewed every 0.25 s, on real time
    with holder.held():
        assert register.write_guard is not None
        register.write_guard()  # still ours: the write goes on
        register.values[lock_name("shop")] = {"token": "theirs", "holder": "ci@b (pid 7)"}
        deadline = time.monotonic() + 5.0
        while not holder.lease.lost and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(LockLost, match="ci@b \\(pid 7\\) took it over while this run held"):
            register.write_guard()
    assert register.write_guard is None, "the guard goes with the lock"
    assert register.values[lock_name("shop")]["token"] == "theirs", "not released: not ours"


def test_the_ttl_comes_from_the_environment_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RABBITRY_LOCK_TTL", raising=False)
    assert default_ttl() == DEFAULT_TTL
    monkeypatch.setenv("RABBITRY_LOCK_TTL", "2.5")
    assert default_ttl() == 2.5
    for wrong in ("0", "nan", "soon", "99999"):
        monkeypatch.setenv("RABBITRY_LOCK_TTL", wrong)
        with pytest.raises(RabbitryError, match="not a number of seconds from 1 to 3600"):
            default_ttl()


def test_a_lock_value_written_by_hand_is_watched_and_taken_over_not_crashed_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    register = Register()
    register.values[lock_name("shop")] = {"token": "x", "since": 1e300, "expires": "never"}
    waiter = lock_of(register, Clock())
    waiter.acquire(timeout=0)
    assert register.values[lock_name("shop")]["token"] == waiter.token
    assert "? held it since ? and has not renewed it for 8 s" in caplog.text


def test_the_first_renewal_comes_a_quarter_ttl_after_the_claim_not_after_the_acquire() -> None:
    register = Register()
    clock = Clock()
    holder = lock_of(register, clock, ttl=8.0)
    holder.claim()  # early: the spec loads meanwhile
    clock.now += 3.0
    holder.acquire()
    assert holder._next_renewal() == pytest.approx(0.5)  # the floor, ttl / 16: 2 s were due
    holder.lease.confirm(clock.now)
    assert holder._next_renewal() == pytest.approx(2.0)
