"""Where the source and sink look for the stream protocol, and what keeps the sink on AMQP."""

from __future__ import annotations

import pytest

from rabbitry.spark.options import SinkOptionError, SinkOptions, SourceOptionError
from rabbitry.spark.source_options import SourceOptions
from rabbitry.spark.source_protocol import Protocol, stream_port_from
from rabbitry.spark.stream_sink import stream_target

URL = "amqp://u:p@rabbit:5672/v"


def test_the_stream_port_is_the_option_then_the_dev_brokers_url_then_5552() -> None:
    env = {"RABBITRY_STREAM_URL": "rabbitmq-stream://u:p@rabbit:40001/"}
    assert stream_port_from(URL, 5553, env) == 5553
    assert stream_port_from(URL, None, env) == 40001
    other_host = {"RABBITRY_STREAM_URL": "rabbitmq-stream://u:p@elsewhere:40001/"}
    assert stream_port_from(URL, None, other_host) == 5552
    assert stream_port_from(URL, None, {}) == 5552
    assert stream_port_from("amqps://u:p@rabbit/v", None, {}) == 5551  # the TLS listener


def test_the_source_takes_protocol_and_stream_port_options() -> None:
    parsed = SourceOptions.parse(
        {"url": URL, "stream": "s", "protocol": "STREAM", "stream_port": "6000"}, streaming=False
    )
    assert (parsed.protocol, parsed.stream_port) == ("stream", 6000)
    assert Protocol.parse(None) is Protocol.AUTO
    with pytest.raises(SourceOptionError, match="protocol='kafka': give stream"):
        SourceOptions.parse({"url": URL, "stream": "s", "protocol": "kafka"}, streaming=False)


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"routing_key": "q", "priority": "3"}, "priority and expiration"),
        ({"routing_key_column": "k"}, "names queues row by row"),
        ({"url": f"{URL},amqp://u:p@rabbit2:5672/v", "routing_key": "q"}, "several URLs"),
    ],
)
def test_protocol_stream_refuses_what_only_amqp_carries(options: dict[str, str], why: str) -> None:
    parsed = SinkOptions.parse({"url": URL, "protocol": "stream", **options}, {})
    with pytest.raises(SinkOptionError, match=why):
        stream_target(parsed, has_delays=False, port=5552)


def test_protocol_amqp_never_looks_for_the_stream_protocol() -> None:
    parsed = SinkOptions.parse({"url": URL, "routing_key": "q", "protocol": "amqp"}, {})
    assert stream_target(parsed, has_delays=False, port=1) is None
