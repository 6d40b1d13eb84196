"""Hostile broker state: another stack's ownership record that inflates to a GiB (a zip bomb
written by anyone who may set global parameters) costs a plan of this stack a bounded amount of
memory, is named with the bound, and does not stop this stack's plan and apply.

On a broker of its own: every plan on a broker reads every stack's record, so the bomb would
reach the other tests' plans on a shared one."""

from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rabbitry.testing.broker import Broker as ContainerBroker
from rabbitry.testing.containers import start_broker
from rabbitry.testing.vhosts import create_test_vhost, delete_vhost
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

INFLATED = 1 << 30
"""What the bomb inflates to: 1 GiB of JSON whitespace, about 1 MB compressed."""

MEMORY_BOUND_KIB = 400 * 1024
"""The most a plan of a small spec may use beside the bomb (it used over 2 GB without bounds)."""

SPEC = one_vhost_spec("""
        queues:
          - {name: work}
""")


def bomb_record(stack: str) -> dict[str, object]:
    return {"format_version": 2, "stack": stack, "managed": bomb(), "operations": []}


@functools.cache
def bomb() -> str:
    packer = zlib.compressobj(9)
    chunk = b" " * (1 << 20)
    packed = [packer.compress(b"[")]
    packed += [packer.compress(chunk) for _ in range(INFLATED // len(chunk))]
    packed.append(packer.compress(b"]") + packer.flush())
    return base64.b64encode(b"".join(packed)).decode("ascii")


@pytest.fixture(scope="module")
def own_broker() -> Iterator[ContainerBroker]:
    with start_broker() as container:
        yield container.broker


@pytest.fixture
def bombed(own_broker: ContainerBroker, tmp_path: Path) -> Iterator[Broker]:
    vhost = create_test_vhost(own_broker)
    broker = Broker(vhost, tmp_path)
    stack = f"{broker.stack}-evil"
    name = f"rabbitry.stack.{stack}"
    put = broker.http.put(
        f"/global-parameters/{name}", json={"name": name, "value": bomb_record(stack)}
    )
    put.raise_for_status()
    try:
        yield broker
    finally:
        broker.http.delete(f"/global-parameters/{name}")
        delete_vhost(own_broker, vhost.name)


def run_measured(broker: Broker, *argv: str) -> tuple[int, str, int]:
    """``rabbitry ARGV`` in a process of its own: exit code, output, and its peak memory (KiB).
    An address-space limit keeps a run without bounds from taking the machine's memory."""
    code = (  # main() ends with os._exit, after the atexit functions
        "import atexit, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "atexit.register(lambda: print(f'PEAK_KIB={peak()}', file=sys.stderr, flush=True))\n"
        "from rabbitry.cli import main\n"
        "main()\n"
    )
    command = [*argv, "--management-url", broker.management_url]
    if argv[0] != "stacks":  # it reads no spec
        command += ["--url", broker.amqp_url]
        command += ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
    done = subprocess.run(
        [sys.executable, "-c", code, *command],
        env={**os.environ, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    peaks = [line for line in done.stderr.splitlines() if line.startswith("PEAK_KIB=")]
    assert peaks, output
    return done.returncode, output, int(peaks[-1].split("=")[1])


def test_a_zip_bomb_record_of_another_stack_costs_a_plan_little_and_is_named(
    bombed: Broker,
) -> None:
    spec = str(bombed.spec(SPEC))
    code, output, peak = run_measured(bombed, "plan", spec)
    assert code == 0, output
    assert f"+ queue {bombed.vhost}/work" in output
    assert f"record of stack '{bombed.stack}-evil' cannot be read" in output
    assert "inflates past 16 MiB" in output
    assert peak < MEMORY_BOUND_KIB, f"the plan peaked at {peak // 1024} MiB"

    # apply goes on: it creates, and adopts nothing another stack might own
    code, output, peak = run_measured(bombed, "apply", spec, "--auto-approve")
    assert code == 0, output
    assert bombed.queue_names() == {"work"}
    assert peak < MEMORY_BOUND_KIB, f"the apply peaked at {peak // 1024} MiB"


def test_apply_refuses_to_adopt_what_the_unreadable_record_may_own(bombed: Broker) -> None:
    bombed.http.put(f"/queues/{bombed.vhost}/work", json={"durable": True}).raise_for_status()
    code, output, _ = run_measured(bombed, "apply", str(bombed.spec(SPEC)), "--auto-approve")
    assert code == 1, output
    assert "nothing was applied" in output and f"queue {bombed.vhost}/work" in output
    assert f"'{bombed.stack}-evil'" in output and "16 MiB" in output


def test_stacks_lists_the_others_and_names_the_record_past_the_bound(bombed: Broker) -> None:
    bombed.apply(SPEC)
    code, output, peak = run_measured(bombed, "stacks", "--vhost", bombed.vhost)
    assert code == 0, output
    assert f"stack {bombed.stack}: 2 object(s)" in output, "the readable stacks are listed"
    assert f"warning: stack {bombed.stack}-evil: its ownership record cannot be read" in output
    assert f"'rabbitry.stack.{bombed.stack}-evil' inflates past 16 MiB" in output
    assert peak < MEMORY_BOUND_KIB, f"stacks peaked at {peak // 1024} MiB"
    code, output, _ = run_measured(bombed, "stacks", "--vhost", bombed.vhost, "--json")
    listed = json.loads(output[: output.rindex("}") + 1])
    assert [s["stack"] for s in listed["stacks"]] == [bombed.stack]
    assert [u["stack"] for u in listed["unreadable"]] == [f"{bombed.stack}-evil"]
