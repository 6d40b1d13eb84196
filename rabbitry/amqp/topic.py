"""How a topic exchange matches a routing key against a binding key, as AMQP 0-9-1 defines it.

Words are split on ``.``; ``*`` in a binding key stands for exactly one word, ``#`` for zero or
more. Pure: the publisher reads it to know where a message will land (``publisher.routing``), and
the scripted broker routes by it (``testing.scripted_routing``).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4096)
def topic_matches(pattern: str, key: str) -> bool:
    """Whether binding key ``pattern`` matches routing key ``key`` (an empty key has no words)."""
    return _match(tuple(pattern.split(".")), tuple(key.split(".")) if key else ())


def _match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and _match(rest, words[1:])


__all__ = ["topic_matches"]
