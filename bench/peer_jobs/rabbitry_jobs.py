"""The benchmark job as a rabbitry handler, run by ``rabbitry worker run`` (and ``--sync``).

Worker:   rabbitry worker run rabbitry_jobs:app [--sync]
Publish:  python rabbitry_jobs.py publish FIRST COUNT MAX_DELAY

The spec (``PEERS_SPEC``, written and applied by bench/peers.py) declares the queue with
``retry: {attempts: 2, backoff: [1s]}`` (a failed job goes to the 1 s tier queue, then back)
and a binary delay with a 1 s unit targeting it (``delay=`` of the publisher). The worker runs
at its defaults: prefetch 300, batched multiple acks, retries published with a confirm before
the ack. Jobs are published at the publisher's defaults (its adaptive window), or with the fixed
window ``PEERS_WINDOW`` when set (the reference row at 512), or with the adaptive window's limit
for delayed messages set to ``PEERS_DELAYED_LIMIT`` (the reference row without that limit).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Iterator

import ledger

from rabbitry.amqp.message import Message
from rabbitry.consumer import App, IncomingMessage
from rabbitry.publisher import Publisher

SPEC = os.environ.get("PEERS_SPEC", "")
VHOST = os.environ.get("PEERS_VHOST", "/")

app = App(SPEC, vhost=VHOST) if SPEC else App()


@app.handler(ledger.QUEUE)
def job(message: IncomingMessage) -> None:
    data = json.loads(message.body)
    ledger.run(data["id"], data["due"], message.attempt == 1)


def publish(first: int, count: int, max_delay: int) -> None:
    import time

    def messages() -> Iterator[Message]:  # a generator: each due is taken as it is sent
        for job_id, delay in ledger.jobs(first, count, max_delay):
            due = time.time() + delay if delay else 0.0
            yield Message(ledger.body(job_id, due), delay=delay or None)

    # unset: the publisher's own default, as users keep it; the reference row sets 512
    window = int(os.environ["PEERS_WINDOW"]) if os.environ.get("PEERS_WINDOW") else None
    with Publisher.from_spec(SPEC, vhost=VHOST, url=ledger.URL) as pub:
        limit = os.environ.get("PEERS_DELAYED_LIMIT")
        if limit and pub.adaptive is not None:  # the comparison row: another delayed limit
            pub.adaptive.rule = dataclasses.replace(pub.adaptive.rule, delayed=int(limit))
        for delivery in pub.stream(messages(), routing_key=ledger.QUEUE, window=window):
            if not delivery.ok:
                raise SystemExit(f"job not stored: {delivery.error}")


if __name__ == "__main__":
    publish(*ledger.publish_arguments(sys.argv))
