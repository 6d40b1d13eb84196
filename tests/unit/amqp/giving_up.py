"""Driving a ``Reconnect`` until it gives up, for the tests of what its error says."""

from __future__ import annotations

import pytest

from rabbitry.amqp.errors import ConnectionLost
from rabbitry.amqp.reconnect import Reconnect
from rabbitry.amqp.settings import ConnectionSettings


def error_on_giving_up(
    settings: ConnectionSettings, started: float, failed: float, gave_up: float
) -> ConnectionLost:
    """A ``Reconnect`` made at ``started`` fails at ``failed`` (and keeps trying), then at
    ``gave_up``, where it must give up: the error it raises."""
    retry = Reconnect(settings, now=started)
    retry.failed(OSError("refused"), now=failed)
    with pytest.raises(ConnectionLost) as info:
        retry.failed(OSError("refused"), now=gave_up)
    return info.value
