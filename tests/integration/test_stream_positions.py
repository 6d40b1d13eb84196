"""A stream handler's position outlives its process: a worker SIGKILLed in the middle of a
stream and started again resumes after what it handled (``track=``, kept on the broker)."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pika
import pytest

from rabbitry.consumer import tracking
from rabbitry.consumer.streams import StreamReader
from tests.integration.conftest import Broker, one_vhost_spec, worker_process

pytestmark = pytest.mark.broker

STREAM = one_vhost_spec(
    """
        queues:
          - {name: events, type: stream}
"""
)

TRACKED_APP = """
import os
from rabbitry.consumer import App

app = App(os.environ["T_SPEC"], variables={"vhost": os.environ["T_VHOST"], "stack": "s"})
record = open(os.environ["T_OUT"], "a")


@app.handler("events", track="billing")
def on_event(message):
    record.write(message.body.decode() + "\\n")
    record.flush()
"""

PREFETCH = 300
WINDOW = PREFETCH + PREFETCH // 2
"""What a restart may read again: the deliveries in flight and one ack batch not recorded."""


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def wait_for(what: str, check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def publish(url: str, bodies: list[str]) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", "events", body.encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()


def start_worker(broker: Broker, record: Path, blocking: bool) -> object:
    flags = ["--prefetch", str(PREFETCH), *(["--sync"] if blocking else [])]
    return worker_process(broker, "tracked_app", TRACKED_APP, {"T_OUT": str(record)}, *flags)


@pytest.mark.parametrize("blocking", [False, True])
def test_a_stream_worker_killed_and_started_again_skips_nothing(
    broker: Broker, blocking: bool
) -> None:
    broker.apply(STREAM)
    record = broker.tmp / "record.txt"
    total = 6000
    first = start_worker(broker, record, blocking)
    # the first process starts at offset="next": it is attached once a hello comes through
    hello = 0
    deadline = time.monotonic() + 30
    while not any(line.startswith("hello") for line in lines(record)):
        if time.monotonic() > deadline:
            first.kill()  # type: ignore[attr-defined]
            raise AssertionError(first.communicate()[0].decode())  # type: ignore[attr-defined]
        publish(broker.vhost_amqp_url, [f"hello{hello}"])
        hello += 1
        time.sleep(0.2)
    feeder = threading.Thread(
        target=lambda: [
            publish(broker.vhost_amqp_url, [f"m{i}" for i in range(start, start + 500)])
            for start in range(0, total, 500)
        ]
    )
    feeder.start()
    try:
        wait_for("a third of the stream handled", lambda: len(lines(record)) > total // 3)
        first.send_signal(signal.SIGKILL)  # type: ignore[attr-defined]
        first.wait(timeout=10)  # type: ignore[attr-defined]
        killed_at = len([line for line in lines(record) if line.startswith("m")])
        assert killed_at < total, "killed after the end: nothing was in flight"
        second = start_worker(broker, record, blocking)
        try:
            wanted = {f"m{i}" for i in range(total)}
            wait_for(
                "every message handled after the restart",
                lambda: wanted <= set(lines(record)),
                timeout=120,
            )
        finally:
            second.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
            output = second.communicate(timeout=30)[0].decode()  # type: ignore[attr-defined]
    finally:
        feeder.join(timeout=120)
    assert second.returncode == 0, output  # type: ignore[attr-defined]
    handled = [line for line in lines(record) if line.startswith("m")]
    counts = Counter(handled)
    assert set(counts) == {f"m{i}" for i in range(total)}, "a message was skipped"
    again = sum(n - 1 for n in counts.values())
    assert again <= WINDOW, f"{again} read twice, more than the window of {WINDOW}"
    assert "resumes at offset" in output, output

    # a worker stopped gracefully records where it stopped: the next one reads nothing again
    before = len(lines(record))
    third = start_worker(broker, record, blocking)
    try:
        publish(broker.vhost_amqp_url, ["after-stop"])
        wait_for("the message after the stop", lambda: "after-stop" in lines(record))
    finally:
        third.send_signal(signal.SIGTERM)  # type: ignore[attr-defined]
        output = third.communicate(timeout=30)[0].decode()  # type: ignore[attr-defined]
    assert lines(record)[before:] == ["after-stop"], output


def test_the_stored_position_is_the_last_record_even_behind_markers(broker: Broker) -> None:
    broker.apply(STREAM)
    stream = tracking.tracking_stream("events", "reader")
    with StreamReader(broker.vhost_amqp_url) as reader:
        reader.declare_stream(stream, tracking.TRACKING_ARGUMENTS)
        assert reader.latest(stream, lambda m: tracking.record_offset(m) is not None) is None
        for offset in (5, 17, 42):
            reader.append(stream, tracking.record_body(offset))
        for _ in range(3):  # starts that read and wrote nothing after (each leaves a marker)
            found = reader.latest(stream, lambda m: tracking.record_offset(m) is not None)
            assert found is not None and tracking.record_offset(found[1]) == 42
