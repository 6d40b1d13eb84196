"""A test built on the pytest plugin's fixtures works on the fixture's broker and no other:
``rabbitry.apply``/``plan`` take the fixture's URLs directly, and refuse (rather than guess)
when what they are given could name another broker."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pika
import pytest

import rabbitry
from rabbitry.errors import BrokerError
from rabbitry.testing import TestVhost

pytestmark = pytest.mark.broker

OTHER_AMQP = "amqp://u:p@other-broker.invalid:5672/"
OTHER_MANAGEMENT = "http://u:p@other-broker.invalid:15672"


def spec_of(vhost: TestVhost, tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            version: 1
            name: test-{vhost.name}
            vhosts:
              - name: {vhost.name}
                queues:
                  - name: landed
            """
        )
    )
    return path


def exact_count(vhost: TestVhost, queue: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(vhost.amqp_url))
    try:
        return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
    finally:
        connection.close()


def test_apply_with_the_fixture_urls_lands_in_the_fixture_broker(
    rabbitmq_vhost: TestVhost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another broker in the environment, as on a developer's machine: never reached
    monkeypatch.setenv("RABBITRY_URL", OTHER_AMQP)
    monkeypatch.setenv("RABBITRY_MANAGEMENT_URL", OTHER_MANAGEMENT)
    spec = spec_of(rabbitmq_vhost, tmp_path)
    urls = {
        "url": rabbitmq_vhost.amqp_url,
        "management_url": rabbitmq_vhost.management_url_with_credentials,
    }
    # the password masked (it may equal the user name, as guest's does: look for it as a secret)
    assert f":{rabbitmq_vhost.password}@" not in repr(rabbitmq_vhost)
    assert ":***@" in repr(rabbitmq_vhost)

    assert rabbitry.plan(spec, **urls).has_changes
    rabbitry.apply(spec, **urls)
    assert exact_count(rabbitmq_vhost, "landed") == 0  # declared, in the fixture's vhost
    assert not rabbitry.plan(spec, **urls).has_changes

    # the fixture's AMQP URL alone would pair with the environment's other broker: refused
    with pytest.raises(BrokerError, match="name different hosts"):
        rabbitry.plan(spec, url=rabbitmq_vhost.amqp_url)


def test_the_fixture_amqp_url_alone_is_not_paired_with_a_guessed_management_api(
    rabbitmq_vhost: TestVhost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RABBITRY_URL", raising=False)
    monkeypatch.delenv("RABBITRY_MANAGEMENT_URL", raising=False)
    broker = rabbitmq_vhost.broker
    if broker.amqp_port == 5672:
        pytest.skip("the broker's AMQP port is the default: its management port may be derived")
    with pytest.raises(BrokerError, match="would be a guess"):
        rabbitry.apply(spec_of(rabbitmq_vhost, tmp_path), url=rabbitmq_vhost.amqp_url)
