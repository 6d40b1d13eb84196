"""The delay and retry flow of examples/delays.yaml, on a live broker, with plain pika.

1. Five reminders are published with delays of 5, 4, 3, 2 and 1 seconds, longest first; they
   arrive shortest first, each on time: no message waits behind a longer one.
2. An order whose handler always fails walks the retry ladder (1 s, then 5 s) and lands in the
   parking lot after exactly the 3 attempts the spec allows, with headers that say why.

Run after `rabbitry apply examples/delays.yaml` with RABBITRY_URL set (scripts/demo.sh does all
of it):  python examples/delay_flow.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pika

from rabbitry.policies.retry import Outcome, failed_attempts, failure_headers
from rabbitry.topology import load_spec
from rabbitry.topology.patterns import delay_scheme, queue_retry

SPEC = Path(__file__).with_name("delays.yaml")


def vhost_url(url: str, vhost: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(vhost, safe=""), "", ""))


def main() -> int:
    url = os.environ.get("RABBITRY_URL", "amqp://guest:guest@localhost:5672/")
    spec = load_spec(SPEC).vhosts[0]
    connection = pika.BlockingConnection(pika.URLParameters(vhost_url(url, spec.name)))
    channel = connection.channel()
    channel.confirm_delivery()  # every publish below returns only once the broker has it

    print("1. Delays: publishing reminders due in 5, 4, 3, 2, 1 s (longest first)")
    scheme = delay_scheme(next(d for d in spec.delays if d.name == "delay"))
    start = time.monotonic()
    for seconds in (5, 4, 3, 2, 1):
        route = scheme.route(seconds, "reminders")
        channel.basic_publish(
            route.exchange,
            route.routing_key,
            f"due in {seconds}s".encode(),
            pika.BasicProperties(delivery_mode=2),
            mandatory=True,
        )
    received = 0
    for method, _props, body in channel.consume("reminders", inactivity_timeout=0.05):
        if method is None:
            continue
        print(f"   {time.monotonic() - start:5.2f} s  {body.decode()}")
        channel.basic_ack(method.delivery_tag)
        received += 1
        if received == 5:
            break
    channel.cancel()

    print("2. Retries: an order whose handler always fails")
    work = next(q for q in spec.queues if q.name == "orders.work")
    retry = queue_retry(spec, work)
    assert retry is not None
    channel.basic_publish(
        "",
        "orders.work",
        b'{"order": 42}',
        pika.BasicProperties(message_id="order-42", delivery_mode=2),
        mandatory=True,
    )
    start = time.monotonic()
    for method, props, body in channel.consume("orders.work", inactivity_timeout=0.05):
        if method is None:
            continue
        error = RuntimeError("payment service unavailable")
        verdict = retry.policy.decide(failed_attempts(props.headers), error)
        headers = failure_headers(
            props.headers, verdict, error, "orders.work", now_ms=int(time.time() * 1000)
        )
        out = pika.BasicProperties(headers=headers, message_id=props.message_id, delivery_mode=2)
        if verdict.outcome is Outcome.PARK:
            channel.basic_publish("", retry.parking_queue, body, out, mandatory=True)
            channel.basic_ack(method.delivery_tag)
            print(
                f"   {time.monotonic() - start:5.2f} s  attempt {verdict.attempt} failed:"
                f" parked in {retry.parking_queue} ({verdict.reason})"
            )
            break
        tier = retry.tier_queue(verdict.delay_ms)
        channel.basic_publish("", tier, body, out, mandatory=True)  # confirmed first ...
        channel.basic_ack(method.delivery_tag)  # ... then acked: a crash duplicates, never loses
        print(
            f"   {time.monotonic() - start:5.2f} s  attempt {verdict.attempt} failed:"
            f" retry in {verdict.delay_ms / 1000:g} s via {tier}"
        )
    channel.cancel()

    method, props, body = channel.basic_get(retry.parking_queue, auto_ack=True)
    assert method is not None, "the parked message is in the parking lot"
    print(f"   parking lot holds {body.decode()} with headers:")
    for key, value in sorted((props.headers or {}).items()):
        print(f"     {key}: {value}")
    connection.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
