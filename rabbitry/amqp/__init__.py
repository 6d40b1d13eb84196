"""rabbitry's AMQP 0-9-1 client layer, under the publisher, the workers, the Spark sink and the
tools beside them; the only AMQP client the package uses.

Shaped like h11/httpcore: the protocol is pure, the I/O is thin.

- ``settings``: connection settings from URLs (TLS, heartbeats, back-off), masked for display.
- ``frames`` and ``message``: frame building (pre-built method and header frames, only the sizes
  patched per message) and the ``Message`` value a publish is made of.
- ``session``: the sans-I/O connection and channel state machine (bytes in, events and bytes
  out; no sockets, no clocks: callers pass the time) with ``confirms``, the confirm bookkeeping.
- ``reconnect``: the one rule for a failed connect: retry after back-off, or stop (a refused
  login, a certificate that cannot verify, ``give_up_after`` passed).
- ``blocking`` and ``aio``: the two transports, a non-blocking socket and an asyncio protocol.
- ``channel``: one plain blocking channel (declare, bind, purge, consume, settle, one call at a
  time) for the tools: the parking lots, exact queue counts, the shard check, the Spark driver's
  checks and the delay layout check.
- ``topic``: how a topic exchange matches a routing key (``*`` one word, ``#`` zero or more).
- ``inprocess`` (and ``peer_transport``): connections to a peer in this process instead of a
  socket, for a host a test attached one to (``rabbitry.testing.ScriptedBroker``).

Users reach it through ``rabbitry.publisher`` and ``rabbitry.consumer``; nothing here imports
them.
"""
