"""The supervisor with tiny child processes (no broker): children failing at start are started
again with a back-off until the pool gives up; a refused child is never started again; a child
that crashed after it consumed is started again at once; SIGTERM drains, and a second signal or
the drain's time running out kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rabbitry.consumer.restarts import EXIT_REFUSED, Restarts
from rabbitry.consumer.supervisor import Supervisor
from tests.waiting import wait_for

FAST = Restarts(first_delay=0.01, max_delay=0.05, max_start_failures=3)


def child(starts: Path, code: int) -> list[str]:
    """A child that notes its start in ``starts`` and exits with ``code`` before consuming."""
    script = f"open({str(starts)!r}, 'a').write('x'); raise SystemExit({code})"
    return [sys.executable, "-c", script]


def test_children_failing_at_start_are_retried_then_the_pool_gives_up(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    pool = Supervisor(child(starts, 1), processes=2, restarts=FAST)
    assert pool.run() == 1
    # each slot's third failure in a row gives up; the other slot may be one start behind
    assert 4 <= len(starts.read_text()) <= 6


def test_a_refused_child_is_not_started_again(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    assert Supervisor(child(starts, EXIT_REFUSED), processes=1, restarts=FAST).run() == 1
    assert starts.read_text() == "x"


CHILD = """
import os, signal, sys
mode, record, marker = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
crash = mode == "crash-once" and not os.path.exists(marker)
if crash:
    open(marker, "w").close()
with open(record, "a") as f:
    f.write(f"{os.getpid()}\\n")
fd = int(os.environ["RABBITRY_WORKER_READY_FD"])
os.write(fd, b"r")
os.close(fd)
if crash:
    sys.exit(1)
while True:
    signal.pause()
"""

SUPERVISOR = """
import logging, sys
from rabbitry.consumer.supervisor import Supervisor
logging.basicConfig(level="INFO", stream=sys.stdout)
child, processes, drain = sys.argv[1:-2], int(sys.argv[-2]), float(sys.argv[-1])
sys.exit(Supervisor(child, processes=processes, drain_timeout=drain).run())
"""


class Pool:
    """A supervisor in a process of its own over ``CHILD`` processes (each notes its pid)."""

    def __init__(self, tmp_path: Path, mode: str, processes: int, drain: float) -> None:
        script = tmp_path / "child.py"
        script.write_text(CHILD)
        self.record = tmp_path / "pids"
        child = [sys.executable, str(script), mode, str(self.record), str(tmp_path / "marker")]
        self.log = tmp_path / "supervisor.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", SUPERVISOR, *child, str(processes), str(drain)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def pids(self) -> list[int]:
        return [int(p) for p in self.record.read_text().split()] if self.record.exists() else []

    def stop(self, times: int = 1) -> tuple[int, str]:
        for _ in range(times):
            # a signal sent while the last one is still pending merges with it: send the next
            # once the supervisor said it began stopping
            self.process.send_signal(signal.SIGTERM)
            assert wait_for(lambda: "stopping:" in self.log.read_text())
        code = self.process.wait(60)
        return code, self.log.read_text()


def gone(pid: int) -> bool:
    """The process ended (an orphan's zombie, not yet reaped by init, counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def started_and_stopped(
    tmp_path: Path, kind: str, children: int, *, drain: float, times: int = 1
) -> tuple[Pool, int, str]:
    """A pool of ``children`` of ``kind``, stopped by ``times`` signals once all run; its exit
    code and output."""
    pool = Pool(tmp_path, kind, children, drain=drain)
    assert wait_for(lambda: len(pool.pids()) == children)
    code, out = pool.stop(times=times)
    return pool, code, out


def test_sigterm_drains_every_child_and_the_supervisor_exits_0(tmp_path: Path) -> None:
    pool, code, out = started_and_stopped(tmp_path, "graceful", 2, drain=60)
    assert code == 0, out
    assert "all 2 worker processes drained and exited" in out
    assert all(gone(pid) for pid in pool.pids())


def test_a_child_that_crashed_after_it_consumed_is_started_again_at_once(tmp_path: Path) -> None:
    pool = Pool(tmp_path, "crash-once", 1, drain=60)
    assert wait_for(lambda: len(pool.pids()) == 2), "the crashed child was started again"
    code, out = pool.stop()
    assert code == 0, out
    assert "ended (exit code 1): starting it again now" in out


@pytest.mark.parametrize(
    ("drain", "signals", "said"),
    [
        (0.5, 1, "0.5 s passed: killing 2 worker processes still draining"),
        (600, 2, "a second signal: killing 2 worker processes"),
    ],
    ids=["when-the-time-is-up", "at-a-second-signal"],
)
def test_children_still_draining_are_killed(
    tmp_path: Path, drain: float, signals: int, said: str
) -> None:
    pool, code, out = started_and_stopped(tmp_path, "stubborn", 2, drain=drain, times=signals)
    assert code == 1, out
    assert said in out
    assert all(gone(pid) for pid in pool.pids())


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_children_of_a_killed_supervisor_drain_and_exit(tmp_path: Path) -> None:
    pool = Pool(tmp_path, "graceful", 2, drain=60)
    assert wait_for(lambda: len(pool.pids()) == 2)
    pool.process.kill()
    pool.process.wait(30)
    try:
        assert wait_for(lambda: all(gone(pid) for pid in pool.pids())), "no orphan goes on"
    finally:
        for pid in pool.pids():
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
