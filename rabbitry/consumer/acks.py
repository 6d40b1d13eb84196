"""Moved to ``rabbitry.amqp.acks`` (the AMQP layer holds the protocol of both roles); this path
keeps working for code that imports it from here."""

from rabbitry.amqp.acks import BASIC_REJECT, AckTracker, ack_frame, nack_frame, reject_frame
from rabbitry.amqp.frames import BASIC_ACK, BASIC_NACK

__all__ = [
    "BASIC_ACK",
    "BASIC_NACK",
    "BASIC_REJECT",
    "AckTracker",
    "ack_frame",
    "nack_frame",
    "reject_frame",
]
