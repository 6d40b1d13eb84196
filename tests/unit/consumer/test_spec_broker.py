"""A warm worker reads its broker URL and node order off the spec text (``spec_broker``):
what it reads equals what YAML makes of the text, or it says it cannot tell (None)."""

from __future__ import annotations

import pytest
import yaml

from rabbitry.consumer.spec_broker import broker_settings

READ = [
    "version: 1\nvhosts: []\n",
    "broker:\n  url: amqp://u:p@h:5672/%2F\n  node_order: in-order\n",
    "broker:\n  management_url:\n    - http://a\n  url: 'amqp://it''s@h'  # quoted\nx: 1\n",
    'broker:\n  url: "amqp://h"\n',
    "broker:\n  url:\n  - amqp://a\n  - amqp://b\n  version: '4.0'\nvhosts: []\n",
    "broker:\n  url:\n      - amqp://a\n      - 'amqp://b'\n  node_order: shuffle\n",
    'broker: {url: "amqp://a:1,amqp://b:2", node_order: in-order}\n',
    "# comment\nbroker:   # the broker\n\n  url: amqp://h   # main\nvhosts: []\n",
]
DOUBT = [
    "broker: &b\n  url: amqp://h\n",
    "broker: *b\n",
    "broker:\n  url: [amqp://a, amqp://b]\n",
    'broker:\n  url: "amqp://\\u0068"\n',
    "broker:\n  url: |\n    amqp://h\n",
    "broker:\n  url: amqp://a\nbroker:\n  url: amqp://b\n",
    "broker:\n  url: amqp://a\n  url: amqp://b\n",
    "broker: {url: {x: 1}}\n",
]


def expected(text: str) -> tuple[str | None, str | None]:
    broker = (yaml.safe_load(text) or {}).get("broker") or {}
    url = broker.get("url")
    return (",".join(url) if isinstance(url, list) else url), broker.get("node_order")


@pytest.mark.parametrize("text", READ)
def test_the_common_ways_of_writing_the_broker_are_read_as_yaml_reads_them(text: str) -> None:
    assert broker_settings(text) == expected(text)


@pytest.mark.parametrize("text", DOUBT)
def test_what_the_reader_does_not_follow_is_none_never_a_guess(text: str) -> None:
    assert broker_settings(text) is None
