"""Names rabbitry derives: a stack's name made of a file's or a vhost's, and the prefix of its
lock parameters. Apart so the modules that read definitions, take the lock and read ahead can
share them without importing one another."""

from __future__ import annotations

import re

LOCK_PREFIX = "rabbitry.lock."
"""Global parameters named ``rabbitry.lock.<stack>`` are the per-stack locks of apply runs."""


def stack_name(text: str, fallback: str) -> str:
    """A stack name (letters, digits, . _ -) made of a vhost's or a file's name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-._")[:64]
    return name or fallback
