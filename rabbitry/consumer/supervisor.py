"""The process pool of ``rabbitry worker run --processes N``: one supervisor, N worker children.

Each child is a whole worker process (its own connection and prefetch) started from
``command``; handlers that hold the CPU then run on every core. The supervisor:

- starts the children and learns from each over a pipe when it consumes (``READY_FD_ENV``:
  the child writes one byte once its start-up check passed on every vhost, see
  ``announce_ready``);
- starts a child that ended again, by the rule of ``consumer.restarts`` (at once after a crash
  or kill of a child that consumed, with a doubling back-off when it fails at start, never
  after a refusal), logging each with the exit code or signal;
- on SIGTERM or SIGINT sends SIGTERM to every child, which finishes its in-flight messages
  and exits; it returns 0 once all exited cleanly. A second signal, or ``drain_timeout``
  passing, kills the children that are left (SIGKILL: their unacked messages return to the
  queues) and it returns 1.

It waits on one selector (the children's pipes and a wake-up pipe the signal handlers write
to), never in a polling loop. The children's output goes where the supervisor's goes. On
Linux a child is sent SIGTERM when the supervisor dies, so a killed supervisor leaves no
orphans consuming (``_dying_with``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import FrameType
from typing import Protocol

from rabbitry.consumer.restarts import ChildExit, GiveUp, Restarts, after_exit, described

__all__ = ["READY_FD_ENV", "Supervisor", "announce_ready"]

logger = logging.getLogger("rabbitry.worker.supervisor")

READY_FD_ENV = "RABBITRY_WORKER_READY_FD"
"""The environment variable naming the file descriptor a child writes to once it consumes."""

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Child:
    """The process in one slot of the pool, and what the supervisor knows of it."""

    slot: int
    process: subprocess.Popen[bytes]
    ready_fd: int | None
    """The read end of its ready pipe, until the child wrote to it or closed it."""
    ready: bool = False
    stopping: bool = False
    """SIGTERM was sent to it."""


@dataclass
class Slot:
    failures: int = 0
    """Failures at start in a row."""
    due: float | None = None
    """When (monotonic) its next child starts, if one is waiting to."""
    child: Child | None = None


@dataclass
class Supervisor:
    """Runs ``processes`` children of ``command`` until a signal or a give-up:
    ``Supervisor(command, processes=4).run()``."""

    command: Sequence[str]
    """The child's command line, started as it is (``sys.executable ...``)."""
    _: KW_ONLY
    processes: int
    env: Mapping[str, str] | None = None
    """The children's environment (default: the supervisor's)."""
    restarts: Restarts = field(default_factory=Restarts)
    drain_timeout: float = 60.0
    """Seconds the children may take to drain after the first signal."""
    refusal_hint: str = "run `rabbitry apply SPEC` to make what the handlers need"
    """What to do when the children refuse to start, said when the pool gives up."""

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError("Supervisor: processes must be at least 1")
        self._slots = [Slot(due=0.0) for _ in range(self.processes)]
        self._signals = 0
        self._gave_up = False
        self._clean = True

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until every child ended after a signal or a give-up; the exit code
        (0: drained cleanly, 1: gave up, killed or a child failed while draining)."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        selector = selectors.DefaultSelector()
        selector.register(wake_r, selectors.EVENT_READ)
        previous_wakeup = signal.set_wakeup_fd(wake_w)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _SIGNALS}
        previous_chld = signal.signal(signal.SIGCHLD, _ignore)  # wakes the selector
        self._selector = selector
        deadline: float | None = None
        killed = False
        try:
            while True:
                now = time.monotonic()
                self._reap(now)
                if (self._signals or self._gave_up) and deadline is None:
                    deadline = now + self.drain_timeout
                    self._stop_children()
                if deadline is None:
                    self._start_due(now)
                else:
                    if not killed and (self._signals > 1 or now >= deadline):
                        killed = self._kill_children()
                    if not any(slot.child for slot in self._slots):
                        break
                timeout = self._next_wait(now, deadline if not killed else None)
                for key, _ in selector.select(timeout):
                    if key.fd == wake_r:
                        _drain_pipe(wake_r)
                    else:
                        self._read_ready(key.fd)
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.signal(signal.SIGCHLD, previous_chld)
            for slot in self._slots:
                if slot.child is not None:  # only when the loop itself failed
                    slot.child.process.kill()
                    slot.child.process.wait()
                    self._close_ready(slot.child)
            selector.close()
            os.close(wake_r)
            os.close(wake_w)
        if self._gave_up or killed or not self._clean:
            return 1
        logger.info("all %d worker processes drained and exited", self.processes)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    def _next_wait(self, now: float, deadline: float | None) -> float | None:
        times = [slot.due for slot in self._slots if slot.due is not None and not self._signals]
        if deadline is not None:
            times.append(deadline)
        return max(0.0, min(times) - now) if times else None

    # -- children ---------------------------------------------------------------------------------

    def _start_due(self, now: float) -> None:
        for number, slot in enumerate(self._slots, 1):
            if slot.child is None and slot.due is not None and slot.due <= now:
                slot.due = None
                slot.child = self._start(number)

    def _start(self, number: int) -> Child:
        read_fd, write_fd = os.pipe()
        environment = dict(os.environ if self.env is None else self.env)
        environment[READY_FD_ENV] = str(write_fd)
        try:
            process = subprocess.Popen(
                list(self.command),
                env=environment,
                pass_fds=(write_fd,),
                preexec_fn=_dying_with(os.getpid()),
            )
        finally:
            os.close(write_fd)
        self._selector.register(read_fd, selectors.EVENT_READ)
        logger.info("worker process %d started (pid %d)", number, process.pid)
        return Child(number, process, read_fd)

    def _read_ready(self, fd: int) -> None:
        child = next(s.child for s in self._slots if s.child and s.child.ready_fd == fd)
        if os.read(fd, 1):
            child.ready = True
            self._slots[child.slot - 1].failures = 0
            logger.info("worker process %d (pid %d) consumes", child.slot, child.process.pid)
        self._close_ready(child)  # one byte, or end of file: the child ended

    def _close_ready(self, child: Child) -> None:
        if child.ready_fd is not None:
            self._selector.unregister(child.ready_fd)
            os.close(child.ready_fd)
            child.ready_fd = None

    def _reap(self, now: float) -> None:
        for slot in self._slots:
            child = slot.child
            if child is None or child.process.poll() is None:
                continue
            code = child.process.returncode
            if child.ready_fd is not None and not child.ready:
                self._read_late_ready(child)
            self._close_ready(child)
            slot.child = None
            if self._signals or self._gave_up:
                self._ended_while_stopping(child, code)
                continue
            verdict = after_exit(self.restarts, ChildExit(code, child.ready), slot.failures)
            if isinstance(verdict, GiveUp):
                self._give_up(child, code, verdict.reason)
                continue
            slot.failures = verdict.failures
            slot.due = now + verdict.delay
            when = f"in {verdict.delay:g} s" if verdict.delay else "now"
            logger.warning(
                "worker process %d (pid %d) ended (%s)%s: starting it again %s",
                child.slot,
                child.process.pid,
                described(code),
                "" if child.ready else " before it consumed",
                when,
            )

    def _read_late_ready(self, child: Child) -> None:
        """The ready byte may still wait in the pipe of a child that ended right after it."""
        assert child.ready_fd is not None
        os.set_blocking(child.ready_fd, False)
        with contextlib.suppress(BlockingIOError):
            child.ready = bool(os.read(child.ready_fd, 1))

    def _ended_while_stopping(self, child: Child, code: int) -> None:
        # a child stopped by our SIGTERM before it installed its handlers consumed nothing
        clean = code == 0 or (not child.ready and -code in (signal.SIGTERM, signal.SIGINT))
        if not clean:
            self._clean = False
        log = logger.info if clean else logger.error
        pid = child.process.pid
        log("worker process %d (pid %d) exited (%s)", child.slot, pid, described(code))

    def _give_up(self, child: Child, code: int, reason: str) -> None:
        self._gave_up = True
        hint = self.refusal_hint if "refused" in reason else "see its error above"
        logger.error(
            "worker process %d (pid %d) ended (%s) and is not started again: %s; %s."
            " Stopping the other worker processes",
            child.slot,
            child.process.pid,
            described(code),
            reason,
            hint,
        )

    def _live(self) -> Iterable[Child]:
        return (slot.child for slot in self._slots if slot.child is not None)

    def _stop_children(self) -> None:
        for slot in self._slots:
            slot.due = None
        children = list(self._live())
        if self._signals:
            logger.info("stopping: %d worker processes finish their messages", len(children))
        for child in children:
            child.stopping = True
            _send(child.process, signal.SIGTERM)

    def _kill_children(self) -> bool:
        children = list(self._live())
        if not children:
            return False
        why = "a second signal" if self._signals > 1 else f"{self.drain_timeout:g} s passed"
        logger.error(
            "%s: killing %d worker processes still draining (their unacked messages return"
            " to the queues)",
            why,
            len(children),
        )
        for child in children:
            _send(child.process, signal.SIGKILL)
        return True


class StartedHook(Protocol):
    on_started: list[Callable[[], None]]


def announce_ready(cores: Sequence[StartedHook], environ: Mapping[str, str] = os.environ) -> None:
    """In a child of the pool: write the ready byte to the supervisor's pipe once every one of
    ``cores`` (a worker's, one per vhost) consumes. Nothing when not started by a pool."""
    value = environ.get(READY_FD_ENV)
    if value is None:
        return
    fd = int(value)
    waiting = set(range(len(cores)))
    announced: list[bool] = []

    def started(index: int) -> None:
        waiting.discard(index)
        if waiting or announced:
            return  # a reconnection starts the cores again: the byte goes once
        announced.append(True)
        try:
            os.write(fd, b"r")
        except OSError:
            pass  # the supervisor is gone; the worker goes on
        finally:
            os.close(fd)

    for index, core in enumerate(cores):
        core.on_started.append(functools.partial(started, index))


_PR_SET_PDEATHSIG = 1


def _dying_with(supervisor: int) -> Callable[[], None] | None:
    """On Linux, what a child runs before its command: SIGTERM comes to it when the supervisor
    dies (a SIGKILL, the out-of-memory killer), so it drains instead of consuming on as an
    orphan nobody stops. Elsewhere nothing (the children then outlive a killed supervisor)."""
    if sys.platform != "linux":
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded before the fork, not after

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != supervisor:  # it died before the request took hold
            os.kill(os.getpid(), signal.SIGTERM)

    return in_child


def _send(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)


def _drain_pipe(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass
