"""Topic matching as AMQP 0-9-1 defines it: the one rule the publisher's routing and the
scripted broker both follow."""

from __future__ import annotations

import pytest

from rabbitry.amqp.topic import topic_matches


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("order.*", "order.new", True),
        ("order.*", "order.new.eu", False),
        ("order.#", "order.new.eu", True),
        ("order.#", "order", True),
        ("#", "anything.at.all", True),
        ("*.new", "order.new", True),
        ("*.new", "new", False),
        ("order.new", "order.new", True),
        ("order.new", "order.old", False),
        ("a.#", "a", True),
        ("#.c", "a.b.c", True),
        ("*.1.#", "0.1.0.q", True),
        ("*.1.#", "1.0.0.q", False),
        ("*.*.q", "0.1.x.q", False),
    ],
)
def test_star_is_one_word_and_hash_zero_or_more(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def test_an_empty_key_has_no_words_so_only_hash_matches_it() -> None:
    assert topic_matches("#", "")
    assert not topic_matches("*", "")
