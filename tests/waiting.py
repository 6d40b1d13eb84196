"""Waiting on a condition with a bound, for tests of both kinds: never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, step: float = 0.02) -> bool:
    """Whether ``condition()`` held within ``timeout`` seconds, asked every ``step``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()
