"""The benchmark job as a FastStream subscriber on its RabbitBroker (aio-pika underneath).

Worker:   faststream run faststream_jobs:app
Publish:  python faststream_jobs.py publish FIRST COUNT MAX_DELAY

- ``RabbitBroker(default_channel=Channel(prefetch_count=300))`` (the broker's channel
  settings, FastStream > RabbitMQ > Channel), the prefetch the other workers use.
- ``ack_policy=AckPolicy.NACK_ON_ERROR``: acked after the handler returned, a failed message
  is nacked back to its queue (FastStream > Acknowledgement).
- Retry: FastStream has no delayed retry of its own; its retry is that requeue, delivered again
  at once with the ``redelivered`` flag (the bench's "first attempt" test), not after 1 s.
- Delay: FastStream has no delayed delivery without the delayed-message plugin: not run.
- Quorum queues: ``RabbitQueue(queue_type=QueueType.QUORUM)``.
"""

from __future__ import annotations

import asyncio
import sys

import ledger
from faststream import AckPolicy, FastStream
from faststream.rabbit import Channel, QueueType, RabbitBroker, RabbitMessage, RabbitQueue

broker = RabbitBroker(ledger.URL, default_channel=Channel(prefetch_count=300), log_level=30)
queue = RabbitQueue(
    ledger.QUEUE,
    durable=True,
    queue_type=QueueType.QUORUM if ledger.QUEUE_TYPE == "quorum" else QueueType.CLASSIC,
)
app = FastStream(broker)


@broker.subscriber(queue, ack_policy=AckPolicy.NACK_ON_ERROR)
async def job(body: dict[str, float], message: RabbitMessage) -> None:
    ledger.run(int(body["id"]), body["due"], not message.raw_message.redelivered)


async def publish(first: int, count: int, max_delay: int) -> None:
    if max_delay:
        raise SystemExit("FastStream has no delayed delivery without the plugin")
    async with RabbitBroker(ledger.URL) as publisher:
        await publisher.declare_queue(queue)  # publishing alone does not declare it
        pending = []
        for job_id, _ in ledger.jobs(first, count, max_delay):
            pending.append(publisher.publish({"id": job_id, "due": 0.0}, queue=queue))
            if len(pending) == 256:  # confirmed publishes, awaited in windows
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)


if __name__ == "__main__":
    asyncio.run(publish(*ledger.publish_arguments(sys.argv)))
