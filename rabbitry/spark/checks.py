"""Driver-side checks: the spec and the broker agree with the options before any task runs.

With ``spec=``, the exchange must be declared in the spec's vhost and the delay levels for
``delay_column`` come from it. With ``check_exchange`` (the default), the exchange (or the
delay levels' delivery exchange) must exist on the broker: a passive declare over AMQP, so the
check needs only the URL the tasks use.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from rabbitry.amqp.channel import Channel
from rabbitry.errors import (
    BrokerError,
    ChannelRefused,
    RabbitryError,
    SinkOptionError,
    SparkSinkError,
)
from rabbitry.policies.delay import DelayScheme
from rabbitry.publisher.routing import Router
from rabbitry.spark.options import SinkOptions
from rabbitry.spark.partition import SinkPlan
from rabbitry.spark.rows import Column
from rabbitry.spark.source_protocol import stream_port_from
from rabbitry.spark.stream_sink import stream_target

CONNECT_TIMEOUT = 10.0


def resolve_spec(options: SinkOptions) -> DelayScheme | None:
    """Check the exchange against the spec; the delay levels ``delay_column`` goes through."""
    if options.spec is None:
        return None
    from rabbitry.topology import check_spec, expand, load_spec
    from rabbitry.topology.patterns.delays import delay_scheme

    path = Path(options.spec)
    if not path.is_file():
        raise SinkOptionError(f"spec: no such file {options.spec!r}")
    try:
        spec = load_spec(path, dict(options.spec_vars))
        check_spec(spec)
        topology = expand(spec)
    except RabbitryError as exc:
        raise SinkOptionError(f"spec {options.spec}: {exc}") from None
    vhost = options.vhost or options.url_vhost
    try:
        router = Router(topology, vhost)
        router.check_exchange(options.exchange)
    except RabbitryError as exc:
        raise SinkOptionError(f"spec {options.spec}: {exc}") from None
    if (
        options.mandatory
        and options.routing_key_column is None
        and options.delay_column is None
        and not router.reaches_queue(options.exchange, options.routing_key)
    ):
        raise SinkOptionError(
            f"mandatory is on, and by the spec {options.spec} exchange {options.exchange!r}"
            f" routes {options.routing_key!r} to no queue: every row would fail"
        )
    if options.delay_column is None:
        return None
    vhost_spec = next((v for v in spec.vhosts if v.name == vhost), None)
    delays = list(vhost_spec.delays) if vhost_spec is not None else []
    if options.delays is not None:
        chosen = [d for d in delays if d.name == options.delays]
    else:
        chosen = delays if len(delays) == 1 else []
    if not chosen:
        names = ", ".join(d.name for d in delays) or "none"
        want = f"delays entry {options.delays!r}" if options.delays else "single delays entry"
        raise SinkOptionError(
            f"delay_column: vhost {vhost!r} of spec {options.spec} has no {want}"
            f" (delays declared: {names}); name one with delays="
        )
    return delay_scheme(chosen[0])


def check_broker(options: SinkOptions, delays: DelayScheme | None) -> None:
    """Connect once and passively declare the exchange the rows go to."""
    exchange = delays.delivery_exchange if delays is not None else options.exchange
    try:
        # every node of a cluster's list is tried, in the order the tasks will walk them
        channel = Channel(options.url, timeout=CONNECT_TIMEOUT)
    except BrokerError as exc:
        raise SparkSinkError(str(exc)) from None
    with channel:
        if not exchange or exchange.startswith("amq."):
            return
        try:
            channel.exchange_declare(exchange, passive=True)
        except ChannelRefused as exc:
            if exc.reply_code == 404:
                raise SinkOptionError(
                    f"exchange {exchange!r} does not exist in vhost {options.url_vhost!r} at"
                    f" {options.display_url}: declare it (rabbitry apply) or fix exchange="
                ) from None
            raise SparkSinkError(
                f"checking exchange {exchange!r} at {options.display_url}:"
                f" {exc.reply_code} {exc.reply_text}"
            ) from None


def plan_write(
    raw_options: Mapping[str, str],
    columns: Sequence[Column],
    *,
    streaming: bool,
    environ: Mapping[str, str] | None = None,
) -> SinkPlan:
    """Parse and check everything on the driver; the plan the tasks run.

    A batch write without ``id_prefix`` gets a fresh job id here (one per write, the same in
    every attempt of its tasks); a streaming write takes the query's id in each task instead.
    """
    options = SinkOptions.parse(raw_options, environ)
    plan = SinkPlan(options, tuple(columns), options.id_prefix or "")
    plan.encoder()  # checks the columns against the options
    delays = resolve_spec(options)
    if options.check_exchange:
        check_broker(options, delays)
    prefix = options.id_prefix
    if prefix is None and not streaming:
        prefix = uuid.uuid4().hex
    port = stream_port_from(
        options.url, options.stream_port, os.environ if environ is None else environ
    )
    target = stream_target(options, has_delays=delays is not None, port=port)
    return SinkPlan(options, tuple(columns), prefix or "", delays, target)
