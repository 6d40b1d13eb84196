"""The kill switches of one worker connection: the rule of each queue (``kill_switch``) put to
work, shared by ``Worker``, ``AsyncWorker`` and the handler harness through ``WorkerCore``.

``Switchboard`` counts each handler outcome into its queue's switch, cancels the queue's
consumers when it trips and starts them again when it half-opens (through the connection's
``ConsumerSession``), holds the deliveries that come to a paused queue, lets a half-open
queue run one handler at a time (the probe: with many at once, a dead dependency would fail
them all), and says each turn in the log and in the queue's counters. It sends no frame
itself and settles no delivery: the core requeues what it hands back. A held delivery stays
unacked in the worker, not returned: a return counts as a failed delivery on a quorum queue
(``x-delivery-count``, up to its delivery limit), and the broker would only deliver it again.
One that was held for ``HOLD_LIMIT_S`` is returned all the same, before the broker's
``consumer_timeout`` (30 min by default) closes the channel over it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rabbitry.consumer.kill_switch import QueueKillSwitch, SwitchState, Turn
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.metrics import WorkerMetrics

if TYPE_CHECKING:
    from rabbitry.consumer.app import Route
    from rabbitry.consumer.session import ConsumerSession

logger = logging.getLogger("rabbitry.worker")

HOLD_LIMIT_S = 600.0
"""How long a delivery may wait in the worker for its queue's switch before it goes back to
the queue (well inside RabbitMQ's default ``consumer_timeout`` of 30 minutes)."""
_CHECK_EVERY_S = 1.0


class Switchboard:
    """The kill switches of the queues of one connection whose handlers have one."""

    def __init__(self, routes: Sequence[Route], metrics: WorkerMetrics) -> None:
        self.switches = {r.queue: QueueKillSwitch(r.kill_switch) for r in routes if r.kill_switch}
        """By queue name."""
        self._consumers = {
            queue: [i for i, route in enumerate(routes) if route.queue == queue]
            for queue in self.switches
        }
        self._routes = routes
        self.metrics = metrics
        self.clock: Callable[[], float] = time.monotonic
        """Monotonic seconds (the handler harness moves its own)."""
        self.held: dict[str, list[IncomingMessage]] = {}
        """Deliveries of paused queues, unacked, in arrival order."""
        self.returning: set[IncomingMessage] = set()
        """Held deliveries handed back to the shell's inbox: admitted once already."""
        self.released: list[IncomingMessage] = []
        """Held deliveries a half-open or closed switch lets run now (``take_released``)."""
        self._probing: set[str] = set()
        """Half-open queues whose probe is running."""
        self._since: dict[IncomingMessage, float] = {}
        self._next_check = 0.0
        for queue in self.switches:
            metrics.queues[queue].kill_switch = SwitchState.CLOSED.value

    def paused_consumers(self) -> set[int]:
        """The consumers a new channel must not start (their switch is open)."""
        return {
            index
            for queue, switch in self.switches.items()
            if switch.state is SwitchState.OPEN
            for index in self._consumers[queue]
        }

    def hold(self, message: IncomingMessage) -> bool:
        """Keep ``message`` when its queue's switch is open, or half-open with its probe
        running (True); its handler must not run."""
        queue = self._routes[message.consumer].queue
        switch = self.switches.get(queue)
        if switch is None or switch.state is SwitchState.CLOSED:
            return False
        if switch.state is SwitchState.HALF_OPEN and queue not in self._probing:
            self._probing.add(queue)
            return False  # the probe
        self.held.setdefault(queue, []).append(message)
        self._since.setdefault(message, self.clock())
        return True

    def record(self, queue: str, failed: bool, session: ConsumerSession | None) -> None:
        """Count a handler's outcome; a trip cancels the queue's consumers on ``session``."""
        switch = self.switches.get(queue)
        if switch is None:
            return
        self._probing.discard(queue)
        turn = switch.record(failed, self.clock())
        if turn is not None:
            self._turned(queue, turn, session)
        held = self.held.get(queue)
        if not held or switch.state is SwitchState.OPEN:
            return
        if switch.state is SwitchState.HALF_OPEN:
            self.released.append(held.pop(0))  # the next probe
            return
        self.released.extend(held)
        del self.held[queue]
        for message in held:
            self._since.pop(message, None)

    def take_released(self) -> list[IncomingMessage]:
        """The held deliveries that may run now, oldest first, taken off the board."""
        out, self.released = self.released, []
        return out

    def resume_due(self, session: ConsumerSession | None) -> list[IncomingMessage]:
        """Half-open the switches whose cool-down has passed and start their consumers on
        ``session``; the deliveries they held, oldest first, to be handled before the rest."""
        now = self.clock()
        released: list[IncomingMessage] = []
        for queue, switch in self.switches.items():
            if switch.due(now):
                self._turned(queue, switch.resume(), session)
                released.extend(self.held.pop(queue, ()))
        if released:
            # a delivery held again keeps its first time; those handled are forgotten
            still = {*released, *(m for messages in self.held.values() for m in messages)}
            self._since = {m: t for m, t in self._since.items() if m in still}
        return released

    def overdue(self) -> list[IncomingMessage]:
        """Held deliveries that waited ``HOLD_LIMIT_S``, taken off the board for the core to
        return to their queue (looked at once a second)."""
        now = self.clock()
        if not self._since or now < self._next_check:
            return []
        self._next_check = now + _CHECK_EVERY_S
        cutoff = now - HOLD_LIMIT_S
        out: list[IncomingMessage] = []
        for queue, messages in self.held.items():
            late = [m for m in messages if self._since[m] <= cutoff]
            if not late:
                continue
            self.held[queue] = [m for m in messages if self._since[m] > cutoff]
            for message in late:
                del self._since[message]
            out.extend(late)
            logger.warning(
                "kill switch of %s: %d deliveries held for %g s go back to the queue, before"
                " the broker's consumer timeout would close the channel over them",
                queue,
                len(late),
                HOLD_LIMIT_S,
                extra={"queue": queue, "kill_switch": self.switches[queue].state.value},
            )
        return out

    def take_all(self) -> list[IncomingMessage]:
        """Every held delivery, taken off the board (shutdown: the core returns them)."""
        out = [*self.released, *(m for messages in self.held.values() for m in messages)]
        self.released.clear()
        self.held.clear()
        self._since.clear()
        return out

    def forget(self) -> None:
        """The channel is gone: the broker took the held deliveries back."""
        self.held.clear()
        self.returning.clear()
        self.released.clear()
        self._probing.clear()
        self._since.clear()

    def _turned(self, queue: str, turn: Turn, session: ConsumerSession | None) -> None:
        """Act on a switch's turn: cancel or start the queue's consumers; say so."""
        counters = self.metrics.queues[queue]
        counters.kill_switch = turn.state.value
        consumers = self._consumers[queue]
        settings = self.switches[queue].settings
        fields = {
            "queue": queue,
            "kill_switch": turn.state.value,
            "failures": turn.failures,
            "handled": turn.handled,
        }
        if turn.state is SwitchState.OPEN:
            counters.kill_switch_trips += 1
            if session is not None:
                session.pause(consumers)
            logger.error(
                "kill switch of %s tripped: %d of %d handled messages failed (%.0f%%, threshold"
                " %.0f%%) %s; cancelling its consumer for %g s; messages delivered and not yet"
                " handled wait unacked, the worker's other queues go on",
                queue,
                turn.failures,
                turn.handled,
                100 * turn.ratio,
                100 * settings.failure_ratio,
                "after resuming" if turn.resumed else f"in the last {turn.window_s:g} s",
                settings.cool_down_s,
                extra={**fields, "window_s": turn.window_s, "cool_down_s": settings.cool_down_s},
            )
        elif turn.state is SwitchState.HALF_OPEN:
            if session is not None:
                session.resume(consumers)
            logger.warning(
                "kill switch of %s half-open after its cool-down of %g s: consuming it again"
                " (one failure trips it at once, %d successes close it)",
                queue,
                settings.cool_down_s,
                settings.probes,
                extra=fields,
            )
        else:
            logger.info(
                "kill switch of %s closed: %d messages succeeded after resuming",
                queue,
                turn.handled,
                extra=fields,
            )
