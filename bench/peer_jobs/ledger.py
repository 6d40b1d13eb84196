"""What every benchmark job does, whichever framework runs it: one line per run in a ledger.

The job processes of bench/peers.py import this module (they run with this folder on
``PYTHONPATH``). Settings come from the environment the bench sets:

- ``PEERS_LEDGER``: the file every run of a job appends one line to, ``<id> <outcome> <time>
  <due>``, with one ``write`` on a descriptor opened ``O_APPEND`` (atomic for lines this short,
  across threads and across a restarted process); no lock, no fsync: a run costs a few
  microseconds, the same for every framework.
- ``PEERS_SCENARIO``: ``drain``, ``retry``, ``crash`` or ``delay``. In ``retry`` and ``crash`` a
  job's first attempt fails (``f`` line, then raises) and the next succeeds (``ok`` line).
- ``PEERS_URL``: the broker, with the vhost of this framework and queue type.
- ``PEERS_QUEUE_TYPE``: ``classic`` or ``quorum``.
"""

from __future__ import annotations

import json
import os
import time

QUEUE = "jobs"
URL = os.environ.get("PEERS_URL", "amqp://guest:guest@localhost:5672/%2F")
QUEUE_TYPE = os.environ.get("PEERS_QUEUE_TYPE", "classic")
SCENARIO = os.environ.get("PEERS_SCENARIO", "drain")
FAILS_FIRST = SCENARIO in ("retry", "crash")

_fd = os.open(os.environ.get("PEERS_LEDGER", os.devnull), os.O_WRONLY | os.O_APPEND | os.O_CREAT)


class FirstAttemptFails(Exception):
    """The failure every job of the retry and crash scenarios has on its first attempt."""


def run(job_id: int, due: float, first_attempt: bool) -> None:
    """The job: fail on the first attempt where the scenario says so, else succeed."""
    if FAILS_FIRST and first_attempt:
        os.write(_fd, f"{job_id} f {time.time():.6f} {due:.6f}\n".encode())
        raise FirstAttemptFails(job_id)
    os.write(_fd, f"{job_id} ok {time.time():.6f} {due:.6f}\n".encode())


def body(job_id: int, due: float = 0.0) -> bytes:
    """The JSON body of a job for frameworks that take bytes."""
    return json.dumps({"id": job_id, "due": due}).encode()


def jobs(first: int, count: int, max_delay: int) -> list[tuple[int, int]]:
    """``(id, delay in whole seconds)`` for ids ``first..first+count-1``; delays 1..max_delay
    spread evenly and shuffled by a fixed rule (0 when ``max_delay`` is 0), so every framework
    gets the same schedule."""
    if max_delay <= 0:
        return [(i, 0) for i in range(first, first + count)]
    return [(i, 1 + (i * 7919) % max_delay) for i in range(first, first + count)]


def publish_arguments(argv: list[str]) -> tuple[int, int, int]:
    """``publish FIRST COUNT MAX_DELAY`` from the command line of a job module."""
    if len(argv) != 5 or argv[1] != "publish":
        raise SystemExit(f"usage: {argv[0]} publish FIRST COUNT MAX_DELAY")
    return int(argv[2]), int(argv[3]), int(argv[4])
