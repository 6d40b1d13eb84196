"""The RabbitMQ stream protocol (the ``rabbitmq_stream`` plugin): a sans-I/O ``session``,
its ``frames``, the AMQP 1.0 message format streams store (``amqp10``), and a blocking
driver (``blocking``: reading a range of offsets, publishing with de-duplication)."""

from rabbitry.errors import StreamProtocolError, StreamRefused, StreamUnavailable

__all__ = ["StreamProtocolError", "StreamRefused", "StreamUnavailable"]
