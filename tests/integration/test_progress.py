"""Progress on a terminal, and nothing of it in pipes, with --json, or in CI.

The CLI runs as a process whose stdout and stderr are a pseudo-terminal (what a person sees) or
pipes (what a script or a CI log sees)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

# Enough objects for a bar; their number does not decide whether one is drawn: rich draws a
# spinner or a bar the moment its task is added, not after a delay. (2,500 queues, one import
# below ApplyOptions.import_whole, cost this module 66 s of its 76 s: three applies and the
# vhost's deletions.)
QUEUES = 200


def spec(broker: Broker) -> Path:
    return broker.spec(
        one_vhost_spec(
            "        queues:\n"
            "        {% for i in range(" + str(QUEUES) + ") %}\n"
            '          - {name: "q{{ i }}"}\n'
            "        {% endfor %}\n"
        )
    )


def command(broker: Broker, path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from rabbitry.cli import main; main()",
        "apply",
        str(path),
        "--auto-approve",
        "--management-url",
        broker.management_url,
        "--url",
        broker.amqp_url,
        "--var",
        f"vhost={broker.vhost}",
        "--var",
        f"stack={broker.stack}",
        *extra,
    ]


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "TERM")}
    env.update(TERM="xterm-256color", COLUMNS="120", **extra)
    return env


def on_a_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    output = bytearray()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=30), output.decode("utf-8", "replace")


def test_apply_shows_progress_on_a_terminal_only(broker: Broker) -> None:
    path = spec(broker)
    code, seen = on_a_terminal(command(broker, path), environment())
    assert code == 0, seen[-3000:]
    assert f"creating objects in {broker.vhost}" in seen and "reading the broker's state" in seen
    assert "\x1b[" in seen  # drawn and erased with terminal control sequences
    assert f"of {QUEUES} object(s)" in seen  # the lines a log would get are still there

    # the same on a terminal in CI: lines only
    broker.http.delete(f"/vhosts/{broker.vhost}", timeout=120).raise_for_status()
    code, seen = on_a_terminal(command(broker, path), environment(CI="true"))
    assert code == 0, seen[-3000:]
    assert "creating objects in" not in seen and "reading the broker's state" not in seen

    # pipes (a script, a log): lines only
    broker.http.delete(f"/vhosts/{broker.vhost}", timeout=120).raise_for_status()
    done = subprocess.run(
        command(broker, path), capture_output=True, text=True, env=environment(), check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "creating objects in" not in done.stdout + done.stderr
    assert "\x1b[" not in done.stdout + done.stderr
    assert f"created {QUEUES} of {QUEUES} object(s)" in done.stdout


def test_json_mode_draws_nothing_even_on_a_terminal(broker: Broker) -> None:
    path = spec(broker)
    code, seen = on_a_terminal(command(broker, path, "--json"), environment())
    assert code == 0, seen[-3000:]
    assert "creating objects in" not in seen and "reading the broker's state" not in seen
