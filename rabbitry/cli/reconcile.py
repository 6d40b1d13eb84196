"""``reconcile``: keep the broker at a spec, pass after pass, until SIGTERM.

Thin over ``rabbitry.provisioner.reconcile``: it parses the options, serves the health and
metrics endpoints, turns SIGTERM/SIGINT into a graceful stop and SIGHUP into a pass now.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rabbitry.cli.common import EXIT_OK, F, command, err, log_options
from rabbitry.cli.spec_source import spec_source_options

if TYPE_CHECKING:
    from rabbitry.provisioner.stack import SpecSource


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"{text!r} is not HOST:PORT (e.g. 0.0.0.0:8080, :8080)")
    return host or "0.0.0.0", int(port)


def _seconds_option(name: str, default: float, help: str) -> Callable[[F], F]:
    """A wait in seconds, at least a tenth of one."""
    return click.option(
        name, type=click.FloatRange(min=0.1), default=default, show_default=True, help=help
    )


@command("reconcile")
@spec_source_options
@_seconds_option(
    "--interval", 60.0, "Seconds between passes (SIGHUP or POST /reconcile starts one at once)."
)
@_seconds_option(
    "--max-backoff",
    300.0,
    "Longest wait after failed passes (the broker down): the wait doubles up to it.",
)
@click.option(
    "--allow-replace", is_flag=True, help="Replace what cannot change in place (else reported)."
)
@click.option("--prune", is_flag=True, help="Delete objects this stack created that left the spec.")
@click.option("--force", is_flag=True, help="Delete or migrate queues with messages or consumers.")
@click.option(
    "--take-over",
    multiple=True,
    metavar="STACK",
    help="Move objects this stack's spec declares from STACK's ownership (repeatable).",
)
@click.option(
    "--listen",
    default=":8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Serve /healthz, /readyz, /metrics and POST /reconcile here (port 0: any free one).",
)
@log_options("json")
def reconcile_command(
    spec: Path,
    source: SpecSource,
    interval: float,
    max_backoff: float,
    allow_replace: bool,
    prune: bool,
    force: bool,
    take_over: tuple[str, ...],
    listen: str,
    log_level: str,
    log_format: str,
) -> int:
    """Keep the broker at SPEC: plan every --interval, apply what the flags allow (creations
    and updates; replace, prune and take-over only when given), report the rest. SPEC and
    the files it reads are read again at each pass. Stops after the pass running on SIGTERM."""
    from rabbitry.cli.worker import setup_logging
    from rabbitry.provisioner.reconcile import (
        ReconcileMetrics,
        ReconcileOptions,
        Reconciler,
        serve_health,
    )
    from rabbitry.provisioner.target import target_of

    host, port = _listen(listen)
    # a spec or URL that is wrong at start is an error; later, a pass reports it and retries
    target_of(spec, **source)
    setup_logging(log_level, log_format)
    metrics = ReconcileMetrics()
    reconciler = Reconciler(
        spec,
        ReconcileOptions(
            interval=interval,
            max_backoff=max_backoff,
            allow_replace=allow_replace,
            prune=prune,
            force=force,
            take_over=frozenset(take_over),
        ),
        on_pass=metrics.record,
        **source,
    )
    server = serve_health(reconciler, metrics, host, port)
    bound_host, bound_port = server.server_address[:2]
    err(f"rabbitry reconcile: serving http://{bound_host!s}:{bound_port}/ (healthz, metrics)")
    signal.signal(signal.SIGTERM, lambda *_: reconciler.stop())
    signal.signal(signal.SIGINT, lambda *_: reconciler.stop())
    signal.signal(signal.SIGHUP, lambda *_: reconciler.request())
    try:
        reconciler.run()
    finally:
        server.shutdown()
    return EXIT_OK
