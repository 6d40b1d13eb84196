"""One three-node cluster for the session (the ``cluster`` fixture), shared by test_cluster
and test_failover.

Both modules run on one xdist worker (``xdist_group("cluster")``), so the run starts one
cluster, not one per module (about 40 s each on a loaded machine: three containers and two
joins). A test that stops or kills a node brings it back itself (``restore``), before and
after, so the modules' tests pass in any order."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pika

from rabbitry.testing.broker import Broker
from rabbitry.testing.containers import BrokerContainer
from rabbitry.testing.plugin import BrokerFactory

HOSTS = ("clu-a", "clu-b", "clu-c")


def api(broker: Broker, path: str) -> Any:
    response = httpx.get(f"{broker.management_url}/api{path}", auth=broker.auth, timeout=30)
    response.raise_for_status()
    return response.json()


def wait(condition: Callable[[], bool], timeout: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (httpx.HTTPError, pika.exceptions.AMQPError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def restore(nodes: list[BrokerContainer], queue: str = "") -> None:
    """Start the nodes that are not running, then wait until all three run with their
    plugins, seen from the first, and, with a ``queue``, until each of its members is online
    again: a quorum queue needs two of three nodes, and a test is about to take one away."""
    for node in nodes:
        if not node.running:
            node.start()
    first = nodes[0].broker

    def whole() -> bool:
        found = api(first, "/nodes")
        running = [n for n in found if n.get("running", False)]
        return len(running) == 3 and all(n.get("enabled_plugins") for n in running)

    wait(whole, what="three running nodes")
    if queue:
        wait(
            lambda: len(api(first, f"/queues/%2F/{queue}").get("online", [])) == 3,
            what=f"every member of the queue {queue} online",
        )


@contextlib.contextmanager
def three_nodes() -> Iterator[list[BrokerContainer]]:
    """Three nodes on one network, the second and third joined to the first (the session's
    ``cluster`` fixture, in conftest.py); removed on exit."""
    factory = BrokerFactory()
    try:
        network = factory.network()

        def node(host: str) -> BrokerContainer:
            return factory(
                network=network,
                hostname=host,
                nodename=f"rabbit@{host}",
                erlang_cookie="rabbitry-cluster-test",
            )

        # side by side: one after the other took 41.7 s, together 23.7 s (load 13, 2 cores)
        with ThreadPoolExecutor(len(HOSTS)) as pool:
            nodes = list(pool.map(node, HOSTS))
        for joining in nodes[1:]:
            for argv in (
                ("stop_app",),
                ("reset",),
                ("join_cluster", f"rabbit@{HOSTS[0]}"),
                ("start_app",),
            ):
                # RabbitMQ 4 checks feature flags from both sides before a join; right after a
                # node starts its peer may not reach it yet ({erpc,noconnection}): try again.
                for attempt in range(5):
                    code, output = joining.exec("rabbitmqctl", "-q", *argv)
                    if code == 0 or "noconnection" not in output or attempt == 4:
                        break
                    time.sleep(2)
                assert code == 0, f"rabbitmqctl {' '.join(argv)} on {joining.hostname}: {output}"
        yield nodes
    finally:
        factory.close()


__all__ = ["HOSTS", "api", "restore", "three_nodes", "wait"]
