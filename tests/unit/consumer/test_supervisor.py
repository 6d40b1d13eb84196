"""The supervisor with tiny child processes (no broker): children failing at start are started
again with a back-off until the pool gives up; a refused child is never started again."""

from __future__ import annotations

import sys
from pathlib import Path

from rabbitry.consumer.restarts import EXIT_REFUSED, Restarts
from rabbitry.consumer.supervisor import Supervisor

FAST = Restarts(first_delay=0.01, max_delay=0.05, max_start_failures=3)


def child(starts: Path, code: int) -> list[str]:
    """A child that notes its start in ``starts`` and exits with ``code`` before consuming."""
    script = f"open({str(starts)!r}, 'a').write('x'); raise SystemExit({code})"
    return [sys.executable, "-c", script]


def test_children_failing_at_start_are_retried_then_the_pool_gives_up(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    pool = Supervisor(child(starts, 1), 2, restarts=FAST)
    assert pool.run() == 1
    # each slot's third failure in a row gives up; the other slot may be one start behind
    assert 4 <= len(starts.read_text()) <= 6


def test_a_refused_child_is_not_started_again(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    assert Supervisor(child(starts, EXIT_REFUSED), 1, restarts=FAST).run() == 1
    assert starts.read_text() == "x"
