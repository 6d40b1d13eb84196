"""``rabbitry worker run --processes N`` on a real broker: a child SIGKILLed mid-run is started
again and no message is lost (duplicates only among what the killed child held unacked), the
queue ends empty by exact AMQP count, SIGTERM drains every child and the supervisor exits 0;
children refused at start are not started again."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
from pathlib import Path

import pytest

from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker, one_vhost_spec, worker_process
from tests.waiting import wait_for

pytestmark = [pytest.mark.broker, pytest.mark.serial]

SPEC = one_vhost_spec("""
        queues:
          - name: work
""")

TOTAL = 2000
PREFETCH = 50

POOL_APP = """
    import os, time
    from pathlib import Path
    from rabbitry.consumer import App
    from rabbitry.topology import load_spec

    spec = load_spec(Path(os.environ["T_SPEC"]), {"vhost": os.environ["T_VHOST"], "stack": "s"})
    app = App(spec)
    records = Path(os.environ["T_RECORDS"])

    @app.handler("work")
    def work(message):
        deadline = time.perf_counter() + 0.002  # a handler that holds the CPU
        while time.perf_counter() < deadline:
            pass
        with (records / f"{os.getpid()}.txt").open("a") as f:
            f.write(message.message_id + "\\n")
"""


def handled(records: Path) -> dict[int, list[str]]:
    """Message ids each child handled, by its pid."""
    return {int(path.stem): path.read_text().split() for path in records.glob("*.txt")}


def start_pool(broker: Broker, records: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    records.mkdir(exist_ok=True)
    return worker_process(
        broker,
        "pool_app",
        POOL_APP,
        {"T_RECORDS": str(records)},
        "--log-level",
        "info",
        *args,
        stdout=log.open("wb"),
    )


@pytest.mark.parametrize("kind", [[], ["--sync"]], ids=["async", "blocking"])
def test_two_processes_handle_every_message_across_a_child_sigkill_and_drain_on_sigterm(
    broker: Broker, kind: list[str]
) -> None:
    broker.apply(SPEC)
    with Publisher(broker.vhost_amqp_url) as publisher:
        for i in range(TOTAL):
            publisher.publish(b"job", routing_key="work", message_id=f"m{i}")
    records, log = broker.tmp / "records", broker.tmp / "pool.log"
    pool = start_pool(broker, records, log, "--processes", "2", "--prefetch", str(PREFETCH), *kind)
    try:
        assert wait_for(
            lambda: sum(len(ids) >= 100 for ids in handled(records).values()) == 2, 60
        ), f"both children consume: {log.read_text()}"
        victim = min(handled(records))
        os.kill(victim, signal.SIGKILL)  # mid-run: up to a prefetch handled but not acked
        every = {f"m{i}" for i in range(TOTAL)}
        assert wait_for(lambda: set().union(*handled(records).values()) >= every, 120), (
            "every message handled by some child"
        )
        assert wait_for(lambda: broker.count("work") == 0, 30)
        assert wait_for(lambda: log.read_text().count("consumes") == 3, 60), log.read_text()
    finally:
        pool.send_signal(signal.SIGTERM)
        code = pool.wait(90)
    text = log.read_text()
    assert code == 0, text
    assert "(killed by SIGKILL): starting it again now" in text
    assert "all 2 worker processes drained and exited" in text
    assert broker.count("work") == 0, "every handled message was acked before the exit"

    by_child = handled(records)
    seen = collections.Counter(i for ids in by_child.values() for i in ids)
    assert set(seen) == every
    duplicates = {i for i, n in seen.items() if n > 1}
    # at least once: only what the killed child had handled but not acked comes again,
    # at most a prefetch's worth, and once more at most
    assert duplicates <= set(by_child[victim])
    assert len(duplicates) <= PREFETCH
    assert max(seen.values()) <= 2
    for pid, ids in by_child.items():
        assert len(ids) == len(set(ids)), f"child {pid} handled a message twice"


def test_children_refused_at_start_are_not_started_again(broker: Broker) -> None:
    broker.spec(SPEC)  # never applied: the queue is missing
    records, log = broker.tmp / "records", broker.tmp / "pool.log"
    pool = start_pool(broker, records, log, "--processes", "2")
    try:
        code = pool.wait(90)
    finally:
        if pool.poll() is None:
            pool.kill()
    text = log.read_text()
    assert code == 1, text
    assert "refused to start" in text
    assert "is not started again" in text
    assert "rabbitry apply" in text
    assert text.count("started (pid") == 2, "no child was started a second time"
