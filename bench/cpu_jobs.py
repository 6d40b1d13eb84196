"""The CPU-bound job of bench/processes.py, as a rabbitry handler.

Worker:  rabbitry worker run cpu_jobs:app --sync --processes N (run from bench/, as the bench does)

Each job is a fixed amount of pure-Python work (``CPU_JOB_LOOPS`` multiply-adds: it holds the
GIL throughout, as parsing or scoring in Python does), then one ``O_APPEND`` line in the ledger
``CPU_JOB_LEDGER``: ``<job> <pid> <time>``. The queue is ``CPU_JOB_QUEUE``; the broker and vhost
come from ``RABBITRY_URL``.
"""

from __future__ import annotations

import os
import time

from rabbitry.consumer import App, IncomingMessage

LOOPS = int(os.environ.get("CPU_JOB_LOOPS", "200000"))
QUEUE = os.environ.get("CPU_JOB_QUEUE", "cpu")
_ledger = os.open(
    os.environ.get("CPU_JOB_LEDGER", os.devnull), os.O_WRONLY | os.O_APPEND | os.O_CREAT
)

app = App()


def work(loops: int = LOOPS) -> int:
    """The job's work: ``loops`` multiply-adds in the interpreter."""
    total = 0
    for i in range(loops):
        total += i * i
    return total


@app.handler(QUEUE)
def job(message: IncomingMessage) -> None:
    work()
    os.write(_ledger, f"{message.body.decode()} {os.getpid()} {time.time():.6f}\n".encode())
