"""The delay and retry flow of examples/delays.yaml on a live broker, with rabbitry's worker.

    python examples/delay_flow.py          # 1. delays, 2. an order walking the retry ladder
    rabbitry dlq replay orders.work.parking --vhost delays --all
    PAYMENTS=up python examples/delay_flow.py replayed    # 3. the replayed order succeeds

1. Five reminders are published with delays of 5, 4, 3, 2 and 1 seconds, longest first; they
   arrive shortest first, each on time: no message waits behind a longer one.
2. An order whose payment always fails walks the retry ladder (1 s, then 5 s) and lands in the
   parking lot after exactly the 3 attempts the spec allows, with headers that say why.
3. After `rabbitry dlq replay`, the order is back in `orders.work` with a fresh ladder and the
   handler (payment service up again) charges it.

Run after `rabbitry apply examples/delays.yaml` with RABBITRY_URL set (scripts/demo.sh does all
of it). The handlers are in examples/order_worker.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from order_worker import app

from rabbitry.consumer import AsyncWorker
from rabbitry.consumer.app import url_for_app
from rabbitry.consumer.dlq import ParkingLot
from rabbitry.publisher import Publisher
from rabbitry.topology.patterns.delays import delay_scheme

# the handlers print each attempt themselves; the worker's own failure logs would repeat them
logging.getLogger("rabbitry.worker").setLevel(logging.CRITICAL)

URL = url_for_app(os.environ.get("RABBITRY_URL", "amqp://guest:guest@localhost:5672/"), app)


async def work_until(done: Callable[[AsyncWorker], bool], timeout: float = 30.0) -> AsyncWorker:
    worker = AsyncWorker(app, URL)
    task = asyncio.create_task(worker.run())
    deadline = time.monotonic() + timeout
    while not done(worker) and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    worker.stop()
    await task
    return worker


def delays_and_retries() -> int:
    assert app.vhost is not None
    scheme = delay_scheme(next(d for d in app.vhost.delays if d.name == "delay"))
    print("1. Delays: reminders due in 5, 4, 3, 2, 1 s, published longest first")
    with Publisher(URL, delays=scheme) as pub:
        for seconds in (5, 4, 3, 2, 1):
            pub.publish(f"due at {seconds} s".encode(), routing_key="reminders", delay=seconds)
        print("2. Retries: order 42, while the payment service is down")
        pub.publish({"order": 42}, routing_key="orders.work", message_id="order-42")
    worker = asyncio.run(
        work_until(
            lambda w: w.metrics["reminders"].acked >= 5 and w.metrics["orders.work"].parked >= 1
        )
    )
    counters = worker.metrics["orders.work"]
    print(
        f"   order 42: {counters.received} attempts, retried {dict(counters.retried)},"
        f" parked {counters.parked}"
    )
    with ParkingLot(URL, "orders.work.parking") as lot:
        for parked in lot.peek():
            print(f"   parking lot holds {parked.message_id} {parked.body.decode()}:")
            for key, value in sorted(parked.headers.items()):
                print(f"     {key}: {value}")
    return 0


def replayed() -> int:
    print("3. The replayed order, with the payment service up again")
    worker = asyncio.run(work_until(lambda w: w.metrics["orders.work"].acked >= 1, timeout=10))
    return 0 if worker.metrics["orders.work"].acked >= 1 else 1


if __name__ == "__main__":
    sys.exit(replayed() if sys.argv[1:] == ["replayed"] else delays_and_retries())
