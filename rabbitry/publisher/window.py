"""The default window: how many messages a publisher keeps unconfirmed, adapted to confirm latency.

A window is a queue as much as a pipeline: past the size that keeps the broker busy, every
extra unconfirmed message waits in the broker before it is stored, and that wait is added to
each message (a delayed job's lateness starts with it). A fixed 512 suits a quiet broker's
throughput and makes a burst of delayed jobs 40-70 ms late on a loaded one; a fixed 64 keeps
them on time and costs a third of the rate. So a publisher built without ``window=`` adapts it.

The rule (``next_window``, pure: no clock, no I/O; the shell passes the latencies it measured):
once per *round* (as many confirms as the window held when the round began) the round's mean
confirm latency is compared with a target, ``base + max(allowance, ratio * base)``, where
``base`` is what a confirm costs with little queued ahead of it: the network's round trip, the
broker's write, and whatever the machine's load adds (a remote broker's long round trip or a
busy host raises the target with it, so neither starves the window):

- latency above the target: the window shrinks in proportion (``window * target / latency``),
  by a quarter at most per round (one slow round on a busy machine is not a trend), and never
  below ``floor``;
- latency at or below the target, and the round filled the window: it grows by an eighth (at
  least one), never above ``ceiling``;
- otherwise (the publisher was not sending fast enough to fill it) it stays: an idle publisher
  does not grow a window it never used, so a burst after a quiet spell starts small;
- after ``sustained`` full rounds in a row (about 5,000 messages at the usual sizes) the
  publisher is streaming a bulk load, not a burst: the latency no longer shrinks the window,
  which grows to ``ceiling`` (the fixed 512 of old) and keeps that rate; the first round that
  does not fill the window ends the stream.

``base`` is measured, not assumed (``AdaptiveWindow``): the lowest round mean since the last
*probe*, and every ``probe_every`` rounds one probe: the window drops to ``floor`` for a round
that lets the deeper window's confirms drain, then a round whose mean becomes the new ``base``
(as TCP BBR re-measures its minimum round trip). Without it, a base measured on a quiet machine
would make every later round on a loaded one look queued, and the window would collapse to the
floor; a base that only rose would let the window creep up without bound.

It settles where the messages in flight keep the broker busy and wait 5 ms (``allowance``) or
three times ``base`` (``ratio``), whichever is more, beyond ``base``: about ``rate * target``
messages. The time a round costs whatever its size (``base``) is amortised over a window that
queues at least three times as long, which keeps three quarters of the rate a deeper window
would get where that rate grows linearly with the window, and more where it saturates.
A message with a delay is sent with at most ``delayed`` (32) unconfirmed messages ahead of it,
whatever the window (``AdaptiveWindow.limit``). Its lateness is counted from when it was handed
over, and a burst pays twice for a deep window: once waiting behind it for its confirm, and again
at every delay level it passes. A quorum level dead-letters at-least-once through one process per
queue that keeps 32 messages unconfirmed towards the next level (RabbitMQ's
``dead_letter_worker_consumer_prefetch``), so it empties at about the rate of a publisher with a
window of 32: a publisher with a deeper window fills a level faster than the level can pass its
messages on when they fall due, and the difference waits at every level of the path.
``window=N`` on the publisher (or per call) turns the rule off and keeps N, delays included.
"""

from __future__ import annotations

from dataclasses import dataclass

from rabbitry.amqp.confirms import Latency


@dataclass(frozen=True, slots=True)
class WindowRule:
    """The bounds and target of the adaptive window (seconds for times)."""

    start: int = 64
    """The window of a new publisher, before any confirm was measured."""
    floor: int = 16
    ceiling: int = 512
    allowance: float = 0.005
    """How much longer than ``base`` a confirm may take before the window shrinks..."""
    ratio: float = 3.0
    """... or this many times ``base``, when that is more: on a host whose load makes every
    confirm slow, a window that queues only ``allowance`` cannot amortise the fixed cost of a
    round, and the rate would collapse."""
    probe_every: int = 64
    """Rounds between two measurements of ``base`` at the floor."""
    sustained: int = 32
    """Full rounds in a row after which the publisher is streaming a bulk load: from then on
    its rate counts more than one message's wait, and the window grows to ``ceiling``."""
    delayed: int = 32
    """The most messages unconfirmed when a delayed message is sent: what a quorum delay
    level keeps in flight as it dead-letters (see the module doc)."""

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.start <= self.ceiling:
            raise ValueError(
                f"window rule needs 1 <= floor <= start <= ceiling, got floor={self.floor},"
                f" start={self.start}, ceiling={self.ceiling}"
            )
        if self.allowance <= 0 or self.ratio < 0:
            raise ValueError(
                "window rule allowance must be positive and ratio not negative, got"
                f" allowance={self.allowance}, ratio={self.ratio}"
            )
        if self.probe_every < 1 or self.sustained < 1 or self.delayed < 1:
            raise ValueError(
                "window rule probe_every, sustained and delayed must be at least 1, got"
                f" probe_every={self.probe_every}, sustained={self.sustained},"
                f" delayed={self.delayed}"
            )


DEFAULT_RULE = WindowRule()


def next_window(
    window: int, latency: float, base: float, full: bool, rule: WindowRule, streak: int = 0
) -> int:
    """The window for the next round, from this round's mean confirm ``latency``, the base
    (``base``), whether the round filled the window (``full``) and how many rounds in a row
    did before it (``streak``)."""
    target = base + max(rule.allowance, base * rule.ratio)
    if latency > target and streak < rule.sustained:
        return max(rule.floor, window - window // 4, int(window * target / latency))
    if full:
        return min(rule.ceiling, window + max(1, window // 8))
    return window


class AdaptiveWindow:
    """The rule's state on one publisher: the current window, the round being measured, and
    when ``base`` is measured again.

    The shell asks ``limit(delayed)`` before each send, calls ``filled()`` when a send found
    the window full and ``update(latency)`` after reading from the broker; each costs a few
    comparisons (``latency`` is the confirm tracker's histogram, whose running sum and count
    give a round's mean)."""

    __slots__ = (
        "_count",
        "_full",
        "_probe",
        "_resume",
        "_rounds",
        "_size",
        "_streak",
        "_sum",
        "base",
        "rule",
        "window",
    )

    def __init__(self, rule: WindowRule = DEFAULT_RULE) -> None:
        self.rule = rule
        self.window = rule.start
        self.base = float("inf")
        self._count = 0
        self._sum = 0.0
        self._size = rule.start
        self._full = False
        self._rounds = 0
        self._streak = 0
        """Full rounds in a row (``WindowRule.sustained``)."""
        self._probe = 0
        """Rounds of the probe still to run: 2 (draining), 1 (measuring), 0 (none)."""
        self._resume = rule.start

    def limit(self, delayed: bool) -> int:
        """How many messages may be unconfirmed when the next one is sent: the window, or for
        a ``delayed`` message at most ``rule.delayed``."""
        return min(self.window, self.rule.delayed) if delayed else self.window

    def filled(self) -> None:
        """A send found the window itself full (not only a delayed message's limit): the
        round counts as full."""
        self._full = True

    def update(self, latency: Latency) -> None:
        count = latency.count - self._count
        if count < self._size:
            return
        mean = (latency.sum - self._sum) / count
        self._count, self._sum = latency.count, latency.sum
        rule = self.rule
        if self._probe == 2:  # the deeper window's confirms have drained: measure
            self._probe = 1
            self._size = rule.floor
            return
        if self._probe == 1:
            self._probe = 0
            self.base = mean
            self.window = self._size = self._resume
            self._full = False
            return
        if mean < self.base:
            self.base = mean
        self.window = next_window(self.window, mean, self.base, self._full, rule, self._streak)
        self._streak = self._streak + 1 if self._full else 0
        self._size = self.window
        self._full = False
        self._rounds += 1
        if self._rounds >= rule.probe_every:
            self._rounds = 0
            self._probe = 2
            self._resume = self.window
            self.window = rule.floor  # the round in flight drains first, at the old size
