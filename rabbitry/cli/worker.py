"""``rabbitry worker run module:app``: run the handlers of an ``App`` until SIGTERM/SIGINT."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from rabbitry.cli.common import (
    Invocation,
    MaskingFormatter,
    fail,
    group,
    log_options,
    reset_verbosity,
)
from rabbitry.consumer.app import App, url_for_app
from rabbitry.consumer.supervisor import announce_ready
from rabbitry.uri import mask_text

if TYPE_CHECKING:
    from rabbitry.consumer.aio import AsyncWorker
    from rabbitry.consumer.sync import Worker

_STANDARD = set(vars(logging.makeLogRecord({})))


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": mask_text(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(data, default=str)


def load_app(target: str) -> App:
    """``package.module:name`` (or ``path/to/file.py:name``) to the ``App`` it names.

    Its spec's worker view is read from the cache when the spec did not change since a
    command last loaded it (``App.views``): the worker then never loads the spec model."""
    App.views = True
    module_name, _, attr = target.partition(":")
    attr = attr or "app"
    if module_name.endswith(".py"):
        directory, _, file_name = module_name.rpartition("/")
        sys.path.insert(0, os.path.abspath(directory or "."))
        module_name = file_name[:-3]
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(f"cannot import {module_name!r}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise click.UsageError(f"{target!r} is not a rabbitry App (found {type(app).__name__})")
    return app


def setup_logging(level: str, fmt: str) -> None:
    """Log records to stderr, passwords in URLs masked; ``-v`` lowers the level to debug."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLogFormatter())
    else:
        handler.setFormatter(MaskingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    verbose = Invocation.verbose
    reset_verbosity()  # the worker's own handler, in its format, takes every record
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel("DEBUG" if verbose else level.upper())


@group("worker")
def worker() -> None:
    """Run consumers whose failures walk the spec's retry ladder."""


@worker.command("run")
@click.argument("target", metavar="MODULE:APP")
@click.option(
    "--url",
    metavar="URL",
    envvar="RABBITRY_URL",
    show_envvar=True,
    help="AMQP URL, or a cluster's nodes as comma-separated URLs (default: the app's spec,"
    " then localhost).",
)
@click.option(
    "--node-order",
    type=click.Choice(["shuffle", "in-order"]),
    envvar="RABBITRY_NODE_ORDER",
    show_envvar=True,
    help="How several URLs are walked on connect and reconnect (default: the spec's"
    " broker.node_order, then shuffle).",
)
@click.option("--prefetch", default=300, show_default=True, help="Unacked deliveries at most.")
@click.option(
    "--concurrency", default=64, show_default=True, help="Async handlers running at once."
)
@click.option("--sync", "blocking", is_flag=True, help="Use the blocking Worker (no asyncio).")
@click.option(
    "--shutdown-timeout",
    default=30.0,
    show_default=True,
    help="Seconds in-flight handlers may finish after SIGTERM/SIGINT.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes, each with its own connection and prefetch, under a supervisor that"
    " starts a crashed one again and drains all on SIGTERM/SIGINT (handlers that hold the CPU).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (/metrics; OpenMetrics when asked).",
)
@log_options("text")
def run(
    target: str,
    url: str | None,
    node_order: str | None,
    prefetch: int,
    concurrency: int,
    blocking: bool,
    shutdown_timeout: float,
    processes: int,
    metrics_port: int | None,
    log_level: str,
    log_format: str,
) -> None:
    """Consume the queues of MODULE:APP (a rabbitry.consumer.App) until SIGTERM or SIGINT.

    MODULE is a module name (package.module) or a file (path/to/app.py); APP defaults to app.
    A spec that did not change since it was last validated is read from its cached worker view
    (docs/worker.md, Memory). With --processes N a supervisor runs N such workers
    (docs/worker.md, Processes).
    """
    verbose = Invocation.verbose
    setup_logging(log_level, log_format)
    if metrics_port is not None:  # refused before the app loads when the metrics extra is missing
        from rabbitry.metrics import serve as serve_metrics
    app = load_app(target)
    if processes > 1:
        if metrics_port is not None:
            raise click.UsageError(_METRICS_IN_A_POOL)
        child = _child_arguments(
            target, prefetch, concurrency, shutdown_timeout, blocking, node_order,
            "debug" if verbose else log_level, log_format,
        )  # fmt: skip
        raise click.exceptions.Exit(
            run_pool(app, child, url, processes=processes, shutdown_timeout=shutdown_timeout)
        )
    address = url_for_app(url or app.url or "amqp://guest:guest@localhost:5672/", app)
    log = logging.getLogger("rabbitry.worker")
    if app.periodic_jobs:
        jobs = ", ".join(f"{j.name} ({j.schedule.text})" for j in app.periodic_jobs.values())
        log.info("periodic jobs: %s", jobs)

    def starting(worker: Worker | AsyncWorker, which: str) -> None:
        """What a worker of either kind does before it runs: serve its metrics (when asked),
        tell a supervisor it is ready, say what it consumes."""
        if metrics_port is not None:
            serve_metrics(metrics_port)
        announce_ready([w.core for w in worker.workers] or [worker.core])
        log.info("starting the %s of %s", which, ", ".join(app.queues))

    _run_one(
        app,
        address,
        starting,
        blocking=blocking,
        prefetch=prefetch,
        concurrency=concurrency,
        shutdown_timeout=shutdown_timeout,
        node_order=node_order,
    )


def _run_one(
    app: App,
    address: str,
    starting: Callable[[Worker | AsyncWorker, str], None],
    *,
    blocking: bool,
    prefetch: int,
    concurrency: int,
    shutdown_timeout: float,
    node_order: str | None,
) -> None:
    """Run one worker of ``app`` in this process, blocking or asyncio, until it stops;
    ``starting(worker, what it is called)`` just before it runs."""
    if blocking:
        from rabbitry.consumer.sync import Worker

        sync_worker = Worker(
            app,
            address,
            prefetch=prefetch,
            shutdown_timeout=shutdown_timeout,
            node_order=node_order,
        )
        starting(sync_worker, "blocking worker")
        with refusal_exit_code():
            sync_worker.run(handle_signals=True)
    else:
        import asyncio

        from rabbitry.consumer.aio import AsyncWorker

        async_worker = AsyncWorker(
            app,
            address,
            prefetch=prefetch,
            concurrency=concurrency,
            shutdown_timeout=shutdown_timeout,
            node_order=node_order,
        )
        starting(async_worker, "worker")
        started = time.monotonic()
        with refusal_exit_code():
            asyncio.run(async_worker.run(handle_signals=True))
        logging.getLogger("rabbitry.worker").debug("ran for %.1f s", time.monotonic() - started)


_METRICS_IN_A_POOL = (
    "--metrics-port serves one process's metrics: give it without --processes,"
    " or run one `rabbitry worker run --metrics-port` per process"
)


def _child_arguments(
    target: str,
    prefetch: int,
    concurrency: int,
    shutdown_timeout: float,
    blocking: bool,
    node_order: str | None,
    log_level: str,
    log_format: str,
) -> list[str]:
    """The command line of each process of a pool: ``worker run``'s own options, but one process."""
    child = [target, "--prefetch", str(prefetch), "--concurrency", str(concurrency)]
    child += ["--shutdown-timeout", f"{shutdown_timeout:g}"]
    child += ["--log-level", log_level, "--log-format", log_format]
    child += ["--sync"] if blocking else []
    child += ["--node-order", node_order] if node_order else []
    return child


def run_pool(
    app: App, child: list[str], url: str | None, *, processes: int, shutdown_timeout: float
) -> int:
    """Supervise ``processes`` children of ``rabbitry worker run`` with the options ``child``;
    the supervisor's exit code. The URL reaches them through the environment, not their
    command line, where other users of the machine could read its password."""
    from rabbitry.consumer.supervisor import Supervisor

    env = dict(os.environ)
    if url is not None:
        env["RABBITRY_URL"] = url
    command = [sys.executable, "-c", "from rabbitry.cli import main; main()", "worker", "run"]
    spec = app.spec_file or "SPEC"
    supervisor = Supervisor(
        [*command, *child],
        processes=processes,
        env=env,
        drain_timeout=shutdown_timeout + _DRAIN_MARGIN,
        refusal_hint=f"run `rabbitry apply {spec}` to make what the handlers need, then start"
        " the workers again",
    )
    logging.getLogger("rabbitry.worker").info(
        "starting %d worker processes of %s", processes, ", ".join(app.queues)
    )
    return supervisor.run()


_DRAIN_MARGIN = 15.0
"""Seconds a child may take past its --shutdown-timeout to close its connection and exit."""


@contextmanager
def refusal_exit_code() -> Iterator[None]:
    """In a child of the process pool, a refused start (``TopologyMissing``) is said as
    always and exits with ``EXIT_REFUSED``, so the supervisor does not start it again."""
    from rabbitry.consumer.supervisor import READY_FD_ENV
    from rabbitry.errors import TopologyMissing

    try:
        yield
    except TopologyMissing as exc:
        if READY_FD_ENV not in os.environ:
            raise
        from rabbitry.consumer.restarts import EXIT_REFUSED

        fail(exc)
        raise click.exceptions.Exit(EXIT_REFUSED) from None
