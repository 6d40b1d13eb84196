"""One apply at a time per stack, by a lock held on the broker itself (no local state file).

The lock is a global parameter ``rabbitry.lock.<stack>`` whose value says who holds it (user,
host, process), since when, its ``ttl`` and a renewal counter: the holder writes it again every
``ttl / 4`` seconds while it runs. No clock is compared across hosts (``provisioner.lease``): a
waiter takes a lock over only once it has seen the same value for ``ttl`` seconds on its own
monotonic clock, so the lock of a run that was killed is taken over (with a warning naming the
old holder) and a live one never is, whatever the hosts' clocks say. The wall-clock times in
the value are for people, and tell a waiter only whether to watch a lock that looks abandoned
for ``ttl`` seconds rather than refuse at once.

The holder checks before each write that it still holds the lock (``check``, called by its
management client before every request that changes the broker): once it saw another run's
value in the lock, or went ``HOLD_SHARE`` of ``ttl`` without a renewal it knows landed (it was
paused past its lease), it raises ``LockLost`` and writes nothing more.

Taking it: read it; if someone else holds it, wait (up to ``lock_timeout``) or refuse with the
holder's name and since when; otherwise write our own value, wait the settle time, and read it
back: if another run wrote after us, theirs wins and we wait. The management API has no
compare-and-set, so this is Fischer's timed mutual exclusion: two runs that each read "free"
could both go on only if one of them took longer than the settle time from its read to the end
of its write. The settle time is sized to the broker as it answers now: ``SETTLE_FACTOR`` times
this run's own read-to-written time, at least ``settle`` (0.15 s by default) and at most
``MAX_SETTLE``: on a broker answering in milliseconds a run waits 0.15 s, a slow broker (whose
writes could lag that much) gets a longer wait.

The wait need not be idle: ``claim`` writes and returns (an apply loads its spec and reads the
broker meanwhile); ``acquire`` then waits out only what is left of ``settle`` before the
read-back. What was read after a claim that held is as current as
what is read after ``acquire``: nobody else writes until their own read-back, which fails.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rabbitry.errors import BrokerError, RabbitryError
from rabbitry.errors import LockHeld as LockHeld
from rabbitry.errors import LockLost as LockLost
from rabbitry.management.client import ManagementClient, q
from rabbitry.provisioner.lease import MAX_TTL, MIN_TTL, Lease, Watch, holder_ttl
from rabbitry.provisioner.names import LOCK_PREFIX

logger = logging.getLogger("rabbitry.provisioner")

DEFAULT_TTL = 60.0
"""Seconds a lock outlives its last renewal: how long a killed run blocks the next one
(``RABBITRY_LOCK_TTL`` sets it for the runs that take the lock)."""
TTL_ENV = "RABBITRY_LOCK_TTL"
DEFAULT_SETTLE = 0.15
"""The least wait between writing the lock and reading it back (seconds)."""
SETTLE_FACTOR = 20.0
"""The wait is at least this many times the run's own read-to-written time."""
MAX_SETTLE = 3.0


def default_ttl() -> float:
    """``RABBITRY_LOCK_TTL`` when set, else ``DEFAULT_TTL``."""
    raw = os.environ.get(TTL_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        ttl = float("nan")
    if not MIN_TTL <= ttl <= MAX_TTL:
        raise RabbitryError(
            f"{TTL_ENV}={raw!r} is not a number of seconds from {MIN_TTL:g} to {MAX_TTL:g}"
        )
    return ttl


def _canonical(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def lock_name(stack: str) -> str:
    return LOCK_PREFIX + stack


def holder_description() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


def _when(epoch: float) -> str:
    try:
        return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # a lock value written by hand
        return "?"


class StackLock:
    """The lock of one stack; ``with StackLock(client, stack).held(): ...``."""

    def __init__(
        self,
        client: ManagementClient,
        stack: str,
        *,
        ttl: float | None = None,
        settle: float = DEFAULT_SETTLE,
        renew_client: Callable[[], ManagementClient] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.client = client
        self.name = lock_name(stack)
        self.stack = stack
        self.ttl = ttl if ttl is not None else default_ttl()
        self.settle = settle
        self.token = uuid.uuid4().hex
        self.holder = holder_description()
        self.clock = clock
        """The wall clock: only written into the lock for people, and a hint (see ``acquire``)."""
        self.monotonic = monotonic or time.monotonic
        """Every duration is measured on it (a test passes a fake one, as it passes ``sleep``)."""
        self.sleep = sleep or time.sleep
        # the renewer runs in a thread: it needs its own HTTP connection
        self._renew_client = renew_client or client.clone
        self.since = 0.0
        self.renewals = 0
        self.lease = Lease(self.ttl)
        self._written: float | None = None
        """``monotonic()`` of our last write, while it may still be ours."""
        self._settle_for = settle
        """The wait after our last write: ``settle``, or longer on a slow broker."""
        self._error: BrokerError | None = None
        self.early_claim_kept = False
        """Whether ``acquire`` kept an earlier ``claim``: what was read after it holds."""

    def _value(self, since: float) -> dict[str, Any]:
        now = self.clock()
        return {
            "token": self.token,
            "holder": self.holder,
            "since": since,
            "expires": now + self.ttl,
            "ttl": self.ttl,
            "renewals": self.renewals,
        }

    def _current(self) -> dict[str, Any] | None:
        value = self.client.global_parameter(self.name)
        return value if isinstance(value, dict) else None

    def _claim(self, watch: Watch | None = None) -> dict[str, Any] | None:
        """Write our value unless someone else holds the lock: None when written, else the
        holder's value. With ``watch``, a lock seen unchanged for its ttl is taken over."""
        started = self.monotonic()
        current = self._current()
        if current is not None and current.get("token") != self.token:
            if watch is None:
                return current
            now = self.monotonic()
            watch.observe(_canonical(current), now)
            if not watch.may_take_over(now, holder_ttl(current, self.ttl)):
                return current
            logger.warning(
                "taking over the lock of stack %r: %s held it since %s and has not renewed it"
                " for %.0f s as seen from here (a run that was killed?)",
                self.stack,
                current.get("holder", "?"),
                _when(_number(current.get("since"))),
                watch.unchanged_for(now),
            )
        self.since = self.clock()
        self.lease = Lease(self.ttl)  # a lease of this write only
        writing = self.monotonic()
        self.client.put_global_parameter(self.name, self._value(self.since))
        self.lease.confirm(writing)
        self._written = self.monotonic()
        took = self._written - started
        self._settle_for = min(MAX_SETTLE, max(self.settle, SETTLE_FACTOR * took))
        return None

    @property
    def claimed(self) -> bool:
        """Whether our value was written and may still stand (``claim``, or ``acquire``)."""
        return self._written is not None

    def claim(self) -> bool:
        """Write our value now unless someone else holds the lock: whether it was written.
        The lock is ours once ``acquire`` has read it back; what is read between the two
        counts as read under the lock if that read-back finds our value. A broker that does
        not answer is not asked again: ``acquire`` raises its error (after the spec's own
        problems have been said, for a claim made before the spec was read)."""
        try:
            return self._claim() is None
        except BrokerError as exc:
            self._error = exc
            return False

    def acquire(self, timeout: float = 0.0) -> None:
        """Take the lock, waiting up to ``timeout`` seconds for another holder to let go, or
        to stop renewing it for its ttl. A lock whose expiry (by its holder's clock) has passed
        on ours is watched for its ttl even past ``timeout``: it looks abandoned, but only
        seeing it unchanged for that long says so."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        deadline = self.monotonic() + timeout
        early = self._written is not None
        watch = Watch()
        while True:
            if self._written is None:
                current = self._claim(watch)
                if current is not None:
                    now = self.monotonic()
                    until = deadline
                    ttl = holder_ttl(current, self.ttl)
                    poll = min(1.0, ttl / 8)
                    if not watch.changes and _number(current.get("expires")) <= self.clock():
                        until = max(deadline, watch.since + ttl + poll)
                    if now >= until:
                        raise LockHeld(self._held_message(current, timeout, ttl))
                    self.sleep(min(poll, max(0.05, until - now)))
                    continue
            assert self._written is not None
            self.sleep(max(0.0, self._written + self._settle_for - self.monotonic()))
            after = self._current()
            ours = after is not None and after.get("token") == self.token
            # ours, unless written so long ago (a spec slow to load) that a waiter may be
            # taking it over: then it is written again, and settles again
            if ours and not self.lease.problem(self.monotonic()):
                self.early_claim_kept = early
                return
            # someone wrote after us: theirs stands; wait for it like any other holder
            self._written = None
            early = False

    def _held_message(self, current: dict[str, Any], timeout: float, ttl: float) -> str:
        waited = f" after waiting {timeout:g} s" if timeout else ""
        return (
            f"stack {self.stack!r} is being applied by {current.get('holder', '?')} since"
            f" {_when(_number(current.get('since')))}{waited}; wait for it to finish, or pass"
            " --lock-timeout SECONDS to wait (the lock of a run that was killed is taken over"
            f" once it has gone unrenewed for {ttl:g} s)"
        )

    def check(self) -> None:
        """Raise ``LockLost`` unless this run still holds the lock: called before each write
        of an apply under it."""
        problem = self.lease.problem(self.monotonic())
        if problem:
            raise LockLost(
                f"the lock of stack {self.stack!r} was lost: {problem}; this run stopped"
                " before its next change, and another run may be applying the stack now"
            )

    def release(self) -> None:
        """Let go, unless someone has taken the lock over meanwhile."""
        self._written = None
        current = self._current()
        if current is not None and current.get("token") == self.token:
            self.client.delete(f"/global-parameters/{q(self.name)}")

    def abandon(self) -> None:
        """Let go of a claim that was never acquired (the run stopped before it applied
        anything); nothing when there is none."""
        if self._written is not None:
            with contextlib.suppress(BrokerError):
                self.release()

    @contextlib.contextmanager
    def held(self, timeout: float = 0.0) -> Iterator[StackLock]:
        """Hold the lock for the ``with`` block, renewing it in the background; every write
        of ``client`` meanwhile is checked first (``check``)."""
        try:
            self.acquire(timeout)
        except BaseException:
            self.abandon()  # interrupted between our write and its read-back
            raise
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(stop,), daemon=True)
        renewer.start()
        guarded = self.client.write_guard

        def guard() -> None:
            if guarded is not None:
                guarded()
            self.check()

        self.client.write_guard = guard
        try:
            yield self
        finally:
            self.client.write_guard = guarded
            stop.set()
            renewer.join(timeout=5)
            with contextlib.suppress(BrokerError):
                self.release()

    def _next_renewal(self) -> float:
        """Seconds until the next renewal: ``ttl / 4`` after the last one that landed (an
        early claim may be some time old when the lock is acquired), at least ``ttl / 16``
        (a broker that refused the last one is not asked again at once)."""
        since = self.monotonic() - (self.lease.renewed or 0.0)
        return min(self.ttl / 4, max(self.ttl / 16, self.ttl / 4 - since))

    def _renew(self, stop: threading.Event) -> None:
        with self._renew_client() as client:
            while not stop.wait(self._next_renewal()):
                try:
                    if self._lost(self.lease.problem(self.monotonic())):
                        return
                    current = client.global_parameter(self.name)
                    if not isinstance(current, dict) or current.get("token") != self.token:
                        holder = current.get("holder", "?") if isinstance(current, dict) else ""
                        taken = f"{holder} took it over" if holder else "it was let go"
                        self._lost(f"{taken} while this run held it")
                        return
                    if self._lost(self.lease.problem(self.monotonic())):
                        return  # the read took so long that the lease ran out meanwhile
                    self.renewals += 1
                    writing = self.monotonic()
                    client.put_global_parameter(self.name, self._value(self.since))
                    self.lease.confirm(writing)
                except BrokerError as exc:  # the next renewal may get through
                    logger.warning("could not renew the lock of stack %r: %s", self.stack, exc)

    def _lost(self, problem: str) -> bool:
        if not problem:
            return False
        self.lease.lose(problem)
        logger.error("the lock of stack %r was lost: %s", self.stack, problem)
        return True


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


@contextlib.contextmanager
def stacks_held(
    client: ManagementClient, stacks: Iterable[str], timeout: float = 0.0
) -> Iterator[None]:
    """Hold the locks of ``stacks`` for the ``with`` block, taken in name order (two runs never
    hold one each while waiting for the other's): an apply that takes objects over from other
    stacks keeps their applies out while it rewrites their records."""
    with contextlib.ExitStack() as held:
        for stack in sorted(set(stacks)):
            held.enter_context(StackLock(client, stack).held(timeout))
        yield
