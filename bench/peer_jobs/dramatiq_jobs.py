"""The benchmark job as a dramatiq actor on its RabbitmqBroker, with the settings dramatiq's
documentation gives.

Worker:   dramatiq dramatiq_jobs --processes 1 --threads 8 --queues jobs
Publish:  python dramatiq_jobs.py publish FIRST COUNT MAX_DELAY

- RabbitmqBroker with ``confirm_delivery=True`` (its docstring: wait for the broker to confirm
  each enqueue); acks are always late in dramatiq (a message is acked after its actor ran,
  requeued when the worker dies).
- Threads: ``--threads 8`` for short I/O-free jobs in one process (Guide > worker processes
  and threads: the default 8 per process); prefetch is dramatiq's default (2 x threads,
  ``dramatiq_queue_prefetch``).
- Retry: the Retries middleware, asked for exactly 1 s by raising ``dramatiq.Retry(delay=1000)``
  (its backoff options jitter the delay); the retry goes through dramatiq's delay queue
  (``jobs.DQ``) and is held by the worker until due.
- Delay: ``send_with_options(delay=ms)``, the same delay queue.
- Quorum queues: the RabbitmqBroker declares its queues itself, classic only.
"""

from __future__ import annotations

import sys

import dramatiq
import ledger
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.middleware import CurrentMessage

broker = RabbitmqBroker(url=ledger.URL, confirm_delivery=True)
broker.add_middleware(CurrentMessage())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=ledger.QUEUE, max_retries=3)
def job(job_id: int, due: float) -> None:
    message = CurrentMessage.get_current_message()
    retries = message.options.get("retries", 0) if message is not None else 0
    try:
        ledger.run(job_id, due, retries == 0)
    except ledger.FirstAttemptFails as exc:
        raise dramatiq.Retry(str(exc), delay=1000) from exc


def publish(first: int, count: int, max_delay: int) -> None:
    import time

    for job_id, delay in ledger.jobs(first, count, max_delay):
        if delay:
            job.send_with_options(args=(job_id, time.time() + delay), delay=delay * 1000)
        else:
            job.send(job_id, 0.0)


if __name__ == "__main__":
    publish(*ledger.publish_arguments(sys.argv))
