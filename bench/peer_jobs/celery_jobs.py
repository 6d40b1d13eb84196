"""The benchmark job as a Celery task (kombu over RabbitMQ), with the settings Celery's
documentation gives for safety and throughput.

Worker:   celery -A celery_jobs worker -P threads -c 8 --prefetch-multiplier 64 -Q jobs ...
          (and -P solo for the drain: tasks inline in the main process, the fastest pool here
          for no-op tasks; gevent was slower than threads, prefork is more than one process)
Publish:  python celery_jobs.py publish FIRST COUNT MAX_DELAY

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a job is acked after it ran, and one
  whose worker died goes back to the queue ("Should I use retry or acks_late?", User Guide >
  Tasks).
- ``worker_prefetch_multiplier``: raised from 4 for many short tasks (User Guide >
  Optimizing > Prefetch Limits: for many short tasks "say 64, or 128"); prefetch = multiplier x
  concurrency.
- ``broker_transport_options={"confirm_publish": True}``: publishes wait for the broker's
  confirm (kombu's py-amqp transport), so neither a job nor its retry is lost on the way in.
- Quorum queues: ``task_default_queue_type="quorum"`` with a topic exchange, as "Using Quorum
  Queues" (Getting Started > Backends and Brokers > RabbitMQ) asks, so countdowns and retries
  go through kombu's native delayed delivery instead of being held by the worker.
- Retry: ``self.retry(countdown=1)``, the task's own retry.
- No result backend (``ignore_result``): the bench reads the ledger.
"""

from __future__ import annotations

import sys

import ledger
from celery import Celery

app = Celery("peers", broker=ledger.URL)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=64,
    broker_transport_options={"confirm_publish": True},
    broker_connection_retry_on_startup=True,
    task_default_queue=ledger.QUEUE,
    worker_hijack_root_logger=False,
)
if ledger.QUEUE_TYPE == "quorum":
    app.conf.update(
        task_default_queue_type="quorum",
        task_default_exchange_type="topic",
        worker_detect_quorum_queues=True,
    )


@app.task(name="job", bind=True, max_retries=3)
def job(self, job_id: int, due: float) -> None:  # type: ignore[no-untyped-def]
    try:
        ledger.run(job_id, due, self.request.retries == 0)
    except ledger.FirstAttemptFails as exc:
        raise self.retry(exc=exc, countdown=1) from exc


def publish(first: int, count: int, max_delay: int) -> None:
    import time

    for job_id, delay in ledger.jobs(first, count, max_delay):
        if delay:
            job.apply_async((job_id, time.time() + delay), countdown=delay)
        else:
            job.apply_async((job_id, 0.0))


if __name__ == "__main__":
    publish(*ledger.publish_arguments(sys.argv))
