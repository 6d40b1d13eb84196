"""Where a delayed job's lateness goes, hop by hop: the exchanges it passes, watched from outside.

bench/peers.py ``--hops`` binds one observer queue (classic, exclusive, auto-ack: no part of
the path it watches) with ``#`` to each exchange of a delay's path: the entry exchange, each
level's exchange and the delivery exchange, for rabbitry's levels and for kombu's native delayed
delivery alike (both are binary TTL levels of topic exchanges, each level queue dead-lettering
into the next level's exchange). A copy reaches an observer when the job enters that exchange,
so for each job:

- publish: from the due time's base (when the job was handed to its client) to the entry
  exchange: the client's own wait, its window or confirm round trip included;
- level k, for each bit k set in its delay: from entering level k's exchange to entering the
  next one down, less the level's TTL: how late the level queue expired the job and dead-lettered
  it (with at-least-once dead-lettering, the queue's dead-letter process republishing it);
- deliver: from the delivery exchange to the job's run (its ledger line): the target queue, the
  worker's prefetch and dispatch.

Every figure is read off one clock (``time.time()`` in this machine's processes); the
observers' own delivery latency is in each exchange's time alike, so it cancels between levels
and adds its few hundred microseconds to "publish" and takes them from "deliver". The observers
see a copy of every job at each exchange, so a burst of thousands at once queues in them too:
on a loaded machine the exchange where a burst enters reads late, and the hop after it reads
short, even below zero (a job cannot leave a level before its TTL). Read such a run by the sum
of a job's hops and its end-to-end lateness (the delay table, which runs without observers when
``--hops`` is not given, as the observers' copies add work of their own).
"""

from __future__ import annotations

import json
import multiprocessing
import re
import statistics
import time
from collections import defaultdict
from multiprocessing.connection import Connection
from typing import Any

from results import percentile

from rabbitry.amqp.channel import Channel

ENTRY = "entry"
DELIVER = "deliver"


def delay_exchanges(names: list[str], levels: int) -> dict[str, str]:
    """Exchange name -> label (``entry``, ``L<k>``, ``deliver``) of the delay path in a vhost
    holding rabbitry's delay ``delay`` or kombu's native delayed delivery; levels above
    ``levels - 1`` are left out (kombu declares 28: the jobs pass them without stopping)."""
    found: dict[str, str] = {}
    for name in names:
        if name == "delay.deliver" or name == "celery_delayed_delivery":
            found[name] = DELIVER
        elif name.startswith("delay.layout."):
            found[name] = ENTRY
        elif m := re.fullmatch(r"(?:delay\.|celery_delayed_)(\d+)", name):
            level = int(m.group(1))
            if name == "celery_delayed_27":  # kombu publishes every countdown here
                found[name] = ENTRY
            elif level < levels:
                found[name] = f"L{level}"
    return found


def job_id(body: bytes) -> int:
    """The ledger's job id in a rabbitry job (``{"id": ...}``) or a Celery task message
    (protocol 2: ``[args, kwargs, embed]``, ``args = [job_id, due]``)."""
    data = json.loads(body)
    return int(data["id"] if isinstance(data, dict) else data[0][0])


class HopObserver:
    """Observer queues on a vhost's delay exchanges, consumed by a process of its own with
    rabbitry's plain channel: a burst of thousands of copies must not queue in the observer,
    or its lag would read as the broker's."""

    def __init__(self, url: str, exchanges: dict[str, str]) -> None:
        context = multiprocessing.get_context("fork")
        self._stop = context.Event()
        ready = context.Event()
        self._pipe, child = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_observe, args=(url, exchanges, ready, self._stop, child), daemon=True
        )
        self._process.start()
        if not ready.wait(30):
            self._process.kill()
            raise RuntimeError("hop observers did not start within 30 s")
        self.seen: dict[str, dict[int, float]] = {}

    def stop(self) -> None:
        self._stop.set()
        if not self._pipe.poll(60):
            self._process.kill()
            raise RuntimeError("hop observers did not report within 60 s")
        self.seen = defaultdict(dict, self._pipe.recv())
        self._process.join(10)


def _observe(
    url: str,
    exchanges: dict[str, str],
    ready: Any,
    stop: Any,
    pipe: Connection,
) -> None:
    """The observer process: consume every observer queue until ``stop``, then send back
    label -> job id -> first time seen."""
    seen: dict[str, dict[int, float]] = defaultdict(dict)
    raw: list[tuple[str, bytes, float]] = []
    with Channel(url) as channel:
        labels: dict[str, str] = {}
        for exchange, label in exchanges.items():
            queue = channel.queue_declare("", exclusive=True, auto_delete=True).queue
            channel.queue_bind(queue, exchange, "#")
            labels[channel.consume(queue, no_ack=True)] = label
        ready.set()
        while not stop.is_set():
            delivered = channel.next_delivery(0.05)
            while delivered is not None:  # ids are read afterwards: only the time counts here
                raw.append((labels[delivered.consumer_tag], delivered.body, time.time()))
                delivered = channel.next_delivery(0)
    for label, body, at in raw:
        seen[label].setdefault(job_id(body), at)
    pipe.send(dict(seen))


def hop_lateness(
    seen: dict[str, dict[int, float]],
    handed: dict[int, float],
    ran: dict[int, float],
    delays: dict[int, int],
    unit_s: float = 1.0,
) -> dict[str, list[float]]:
    """Per hop, each job's time in ms beyond what the hop should take (see the module doc)."""
    out: dict[str, list[float]] = defaultdict(list)
    for job, delay in delays.items():
        entry = seen[ENTRY].get(job)
        if job in handed and entry is not None:
            out["publish"].append((entry - handed[job]) * 1000)
        bits = [k for k in range(delay.bit_length() - 1, -1, -1) if delay >> k & 1]
        for k in bits:
            into = seen[f"L{k}"].get(job)
            lower = [b for b in bits if b < k]
            below = seen[f"L{lower[0]}" if lower else DELIVER].get(job)
            if into is not None and below is not None:
                out[f"L{k} ({unit_s * 2**k:g} s)"].append((below - into - unit_s * 2**k) * 1000)
        deliver = seen[DELIVER].get(job)
        if deliver is not None and job in ran:
            out["deliver"].append((ran[job] - deliver) * 1000)
    return dict(out)


def hop_table(name: str, hops: dict[str, list[float]]) -> list[str]:
    """Markdown rows ``| worker | hop | jobs | p50 | p99 | max |``, hops in path order."""

    def order(hop: str) -> tuple[int, int]:
        if hop == "publish":
            return (0, 0)
        if hop == "deliver":
            return (2, 0)
        return (1, -int(hop[1 : hop.index(" ")]))

    return [
        f"| {name} | {hop} | {len(v):,} | {statistics.median(v):.1f} | {percentile(v, 99):.1f}"
        f" | {max(v):.1f} |"
        for hop, v in sorted(hops.items(), key=lambda kv: order(kv[0]))
        if v
    ]
