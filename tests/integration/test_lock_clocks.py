"""The stack's lock on a real broker trusts no clock across hosts: a run paused past the lock's
ttl (SIGSTOP) is taken over and, resumed, stops before its first change with an error; a run
whose wall clock is two minutes fast does not take over a live lock."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from rabbitry.errors import ApplyError
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.applier import ApplyOptions, apply_plan
from rabbitry.provisioner.live_plan import plan_topology
from rabbitry.provisioner.lock import LockHeld, StackLock, lock_name
from rabbitry.topology import load_topology
from rabbitry.topology.primitives import Topology
from tests.integration.conftest import Broker, one_vhost_spec

# A 3 s lock TTL raced against the holder's renewals: beside the parallel run (four workers,
# three brokers on 2 cores) a renewal once went unconfirmed for 2 s and the waiter rightly took
# the lock over; these run with nothing beside them (scripts/test.sh, `serial`).
pytestmark = [pytest.mark.broker, pytest.mark.serial]

TTL = 2.0
"""The paused run's lock ttl (``RABBITRY_LOCK_TTL``): the other run takes over after it."""

SKEW_TTL = 3.0
"""The live holder renews every 0.75 s: well inside the ttl on a busy machine."""

PAUSED_SPEC = one_vhost_spec("""
        queues:
          - {name: work}
          - {name: paused-only}
""")
OTHER_SPEC = one_vhost_spec("""
        queues:
          - {name: work}
""")


class Prompted:
    """``rabbitry apply`` without --auto-approve, its stdin a terminal it is asked on."""

    def __init__(self, broker: Broker, spec: str) -> None:
        self.master, terminal = pty.openpty()
        argv = ["apply", spec, "--management-url", broker.management_url]
        argv += ["--url", broker.amqp_url, "--var", f"vhost={broker.vhost}"]
        argv += ["--var", f"stack={broker.stack}"]
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from rabbitry.cli import main; main()", *argv],
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RABBITRY_LOCK_TTL": str(TTL), "NO_COLOR": "1"},
        )
        os.close(terminal)
        self.output = b""

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while text.encode() not in self.output:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} within {timeout} s: {self.output.decode()}"
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                assert chunk, f"the run ended before {text!r}: {self.output.decode()}"
                self.output += chunk

    def answer(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> tuple[int, str]:
        rest, _ = self.process.communicate(timeout=60)
        return self.process.returncode, (self.output + rest).decode()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


@pytest.fixture
def prompted(broker: Broker) -> Iterator[Prompted]:
    run = Prompted(broker, str(broker.spec(PAUSED_SPEC, "paused.yaml")))
    try:
        yield run
    finally:
        run.close()


def test_a_run_paused_past_its_lock_is_taken_over_and_stops_when_resumed(
    broker: Broker, prompted: Prompted
) -> None:
    # the run holds the lock while it asks; then it is paused, and renews nothing
    prompted.wait_for("Apply these changes?")
    os.kill(prompted.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        other = broker.run(
            "apply", str(broker.spec(OTHER_SPEC, "other.yaml")), "--auto-approve",
            "--lock-timeout", "30",
        )  # fmt: skip
        assert other.exit_code == 0, other.output
        assert time.monotonic() - started >= TTL, "taken over only once unrenewed for its ttl"
        assert broker.queue_names() == {"work"}
    finally:
        os.kill(prompted.process.pid, signal.SIGCONT)

    prompted.answer("y")
    code, output = prompted.finish()
    assert code == 1, output
    assert f"the lock of stack {broker.stack!r} was lost" in output
    assert "no renewal of it was confirmed" in output or "took it over" in output
    assert "Apply complete" not in output
    assert broker.queue_names() == {"work"}, "the resumed run made nothing"


def test_a_run_whose_clock_is_two_minutes_fast_does_not_take_over_a_live_lock(
    broker: Broker,
) -> None:
    with ManagementClient(broker.management_url) as client:
        holder = StackLock(client, broker.stack, ttl=SKEW_TTL, settle=0.05)
        with holder.held():
            with ManagementClient(broker.management_url) as other:
                fast = StackLock(
                    other, broker.stack, ttl=SKEW_TTL, settle=0.05, clock=lambda: time.time() + 120
                )
                started = time.monotonic()
                with pytest.raises(LockHeld, match="being applied by"):
                    fast.acquire(timeout=2 * SKEW_TTL)
                assert time.monotonic() - started >= 2 * SKEW_TTL, "it watched the lock, renewed"
            assert client.global_parameter(lock_name(broker.stack))["token"] == holder.token
            holder.check()  # the holder still holds it, and would go on writing
        assert client.global_parameter(lock_name(broker.stack)) is None, "released"


MIDWAY_SPEC = """
version: 1
name: "{{ vars.stack }}"
users:
  - {name: "{{ vars.stack }}-app", tags: [monitoring]}
vhosts:
  - name: "{{ vars.vhost }}"
    permissions:
      - {user: "{{ vars.stack }}-app"}
    queues:
      - {name: work}
"""


def test_an_apply_that_loses_its_lock_midway_says_what_it_did_and_did_not(
    broker: Broker,
) -> None:
    topology = load_topology(
        broker.spec(MIDWAY_SPEC), {"vhost": broker.vhost, "stack": broker.stack}
    )
    paused = [1000.0]  # the holder's monotonic clock: it jumps as a SIGSTOP would make it
    try:
        message = str(apply_losing_its_lock(broker, topology, paused))
        lost = f"the lock of stack {broker.stack!r} was lost: no renewal of it was confirmed"
        assert lost in message
        done = f"done before the failure (1 change(s)):\n  created user {broker.stack}-app"
        assert done in message
        assert "not done: the plan's changes after those" in message
        assert broker.get(f"/users/{broker.stack}-app") is not None
        assert broker.queue_names() == set(), "nothing after the lock was lost"
        assert broker.get("/permissions/{vhost}/" + f"{broker.stack}-app") is None
    finally:
        broker.http.delete(f"/users/{broker.stack}-app")


def apply_losing_its_lock(broker: Broker, topology: Topology, paused: list[float]) -> ApplyError:
    """Apply ``topology`` under the stack's lock whose holder's clock jumps past the lock's
    ttl after each change made: the error it stopped with."""
    with ManagementClient(broker.management_url) as client:
        holder = StackLock(client, broker.stack, settle=0.05, monotonic=lambda: paused[0])
        with holder.held():
            the_plan = plan_topology(client, topology)

            def pause_after_each_change(_line: str) -> None:
                paused[0] += holder.ttl

            with pytest.raises(ApplyError) as stopped:
                apply_plan(client, the_plan, ApplyOptions(), progress=pause_after_each_change)
    return stopped.value
