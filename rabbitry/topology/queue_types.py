"""``QueueType``, in a module of its own: the version table (``versions``) and a worker's start-up
check read it without loading the topology models (pydantic) that ``primitives`` defines."""

from __future__ import annotations

import enum

__all__ = ["QueueType"]


class QueueType(enum.StrEnum):
    """Queue types; the broker cannot change one into another in place."""

    CLASSIC = "classic"
    QUORUM = "quorum"
    STREAM = "stream"
