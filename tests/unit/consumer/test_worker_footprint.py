"""A worker process carries what it runs and no more: each module it loads is resident in
every worker for its whole life (peak RSS is one of the figures bench/peers.py compares).

These run what ``rabbitry worker run MODULE:APP`` does before it connects, in a fresh
interpreter: the command's module, the handler module and its ``App`` (which loads and
validates the spec, or reads its cached worker view), then the worker class; and list what got
imported.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from rabbitry.consumer.app import App
from rabbitry.consumer.decision import HandlerTimeout
from rabbitry.consumer.message import IncomingMessage
from rabbitry.consumer.sync import call_handler

EXAMPLE = Path(__file__).parents[3] / "examples" / "shop.yaml"

PLAIN_SPEC = """\
version: 1
name: jobs
vhosts:
  - name: jobs
    queues:
      - name: jobs
        type: quorum
        retry: {attempts: 2, backoff: [1s]}
    delays:
      - {name: delay, unit: 1s, max: 20s, targets: [{queue: jobs}]}
"""

HANDLERS = """\
from rabbitry.consumer import App, IncomingMessage
from rabbitry.publisher import Publisher

app = App({spec!r}, vhost={vhost!r})


@app.handler({queue!r})
def job(message: IncomingMessage) -> None:
    pass
"""

NOT_FOR_A_WORKER = [
    "httpx",
    "rich",
    "ryml",
    "pyspark",
    "rabbitry.provisioner",
    "rabbitry.topology.checks",
    "rabbitry.topology.document",
    "rabbitry.topology.versions",
    "rabbitry.topology.spec.schema",
    "rabbitry.publisher.aio",
]
"""The management client, tables and progress bars, rapidyaml (for specs of 64 KiB and more),
Spark, the planner, the spec's cross-object checks, the exporter, the version tables and the
JSON Schema: what `validate`, `plan` and `export` use. The handler module imports the blocking
``Publisher``, so the asyncio one has no reason to load."""

MODEL = ["pydantic", "pydantic_core", "yaml", "rabbitry.topology.spec.model"]
"""What validating a spec loads: a worker whose spec's view is cached loads none of it."""
NOT_FOR_A_WARM_WORKER = [
    *MODEL,
    "rabbitry.topology.primitives",
    "rabbitry.topology.patterns.retries",
    "importlib.metadata",
    "email",
    "zipfile",
]
"""A worker started on a spec it (or ``rabbitry validate``) loaded before: no spec model, no
topology primitives, and no ``importlib.metadata`` (the client properties' version is read
from the distribution's METADATA)."""
NOT_FOR_A_BLOCKING_WORKER = ["asyncio", "ssl", "hashlib", "_hashlib", "hmac", "secrets"]
"""OpenSSL (ssl, hashlib) is mapped for amqps URLs and periodic jobs only."""


def loaded_by_worker(
    tmp_path: Path, spec: Path, vhost: str, queue: str, worker: str
) -> dict[str, object]:
    (tmp_path / "handlers.py").write_text(HANDLERS.format(spec=str(spec), vhost=vhost, queue=queue))
    code = (
        "import json, sys\n"
        "import rabbitry.cli.worker as command\n"
        "app = command.load_app('handlers:app')\n"
        f"import {worker}\n"
        "from rabbitry.consumer.decision import after_failure\n"
        "r = app.routes[app.queues[0]].retry\n"
        "after_failure(r, 'q', None, ValueError('x'), now_ms=0).tier_label  # a failed job\n"
        "retry = r and {'attempts': r.policy.attempts, 'tiers': r.tier_queues}\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'queues': list(app.queues),"
        " 'vhost': app.vhost_names[0], 'retry': retry}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    loaded: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def heavy(modules: object, names: list[str]) -> list[str]:
    assert isinstance(modules, list)
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in modules)]


def test_a_first_worker_on_a_plain_spec_loads_the_model_but_no_template_engine_or_checks(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "jobs.yaml"
    spec.write_text(PLAIN_SPEC.replace("name: jobs\n", "name: cold\n", 1))
    loaded = loaded_by_worker(tmp_path, spec, "jobs", "jobs", "rabbitry.consumer.aio")
    assert loaded["vhost"] == "jobs" and loaded["queues"] == ["jobs"]
    assert heavy(loaded["modules"], ["pydantic", "yaml"]) == ["pydantic", "yaml"], "validated"
    assert heavy(loaded["modules"], [*NOT_FOR_A_WORKER, "jinja2", "rabbitry.consumer.sync"]) == []


def test_a_worker_on_a_templated_spec_adds_only_the_template_engine(tmp_path: Path) -> None:
    loaded = loaded_by_worker(tmp_path, EXAMPLE, "shop", "orders.work", "rabbitry.consumer.aio")
    assert loaded["vhost"] == "shop"
    assert heavy(loaded["modules"], ["jinja2", "rabbitry.topology.spec.sandbox"]) == [
        "jinja2",
        "rabbitry.topology.spec.sandbox",
    ]
    assert heavy(loaded["modules"], [*NOT_FOR_A_WORKER, "rabbitry.consumer.sync"]) == []


def test_the_blocking_worker_loads_neither_the_asyncio_worker_nor_asyncio(tmp_path: Path) -> None:
    spec = tmp_path / "jobs.yaml"
    spec.write_text(PLAIN_SPEC)
    loaded = loaded_by_worker(tmp_path, spec, "jobs", "jobs", "rabbitry.consumer.sync")
    assert heavy(loaded["modules"], ["rabbitry.consumer.sync"]) == ["rabbitry.consumer.sync"]
    assert heavy(loaded["modules"], [*NOT_FOR_A_WORKER, "jinja2", "rabbitry.consumer.aio"]) == []
    assert "asyncio" not in loaded["modules"], "its handlers are plain functions"


def test_the_blocking_worker_still_runs_coroutine_handlers_and_their_time_to_run() -> None:
    """It imports asyncio when a coroutine handler first runs, not before."""
    app = App()
    done: list[str] = []

    @app.handler("quick", timeout=5)
    async def quick(message: IncomingMessage) -> None:
        await asyncio.sleep(0)
        done.append(message.body.decode())

    @app.handler("slow", timeout=0.05)
    async def slow(message: IncomingMessage) -> None:
        await asyncio.sleep(5)

    loop = asyncio.new_event_loop()
    try:
        message = IncomingMessage(1, 0, False, "", "quick", 0, b"", b"hi", "quick")
        assert call_handler(app.routes["quick"], message, lambda: loop) == (None, None)
        assert done == ["hi"]
        late, _ = call_handler(app.routes["slow"], message, lambda: loop)
        assert isinstance(late, HandlerTimeout), late
    finally:
        loop.close()


def test_a_worker_on_an_unchanged_spec_reads_its_view_and_loads_no_model(tmp_path: Path) -> None:
    spec = tmp_path / "jobs.yaml"
    spec.write_text(PLAIN_SPEC.replace("name: jobs\n", "name: warm\n", 1))
    first = loaded_by_worker(tmp_path, spec, "jobs", "jobs", "rabbitry.consumer.sync")
    assert heavy(first["modules"], MODEL) == MODEL, "the first start validates"
    for worker in ("rabbitry.consumer.sync", "rabbitry.consumer.aio"):
        again = loaded_by_worker(tmp_path, spec, "jobs", "jobs", worker)
        assert again["vhost"] == "jobs" and again["queues"] == ["jobs"]
        assert again["retry"] == first["retry"]
        assert heavy(again["modules"], [*NOT_FOR_A_WORKER, *NOT_FOR_A_WARM_WORKER]) == []
        if worker == "rabbitry.consumer.sync":
            assert heavy(again["modules"], NOT_FOR_A_BLOCKING_WORKER) == []


def test_validate_caches_the_view_the_first_worker_reads(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rabbitry.cli import cli

    spec = tmp_path / "jobs.yaml"
    spec.write_text(PLAIN_SPEC.replace("name: jobs\n", "name: validated\n", 1))
    result = CliRunner().invoke(cli, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    loaded = loaded_by_worker(tmp_path, spec, "jobs", "jobs", "rabbitry.consumer.sync")
    assert heavy(loaded["modules"], MODEL) == []


def test_a_changed_spec_is_loaded_again_and_its_errors_reported_as_ever(tmp_path: Path) -> None:
    spec = tmp_path / "jobs.yaml"
    text = PLAIN_SPEC.replace("name: jobs\n", "name: changing\n", 1)
    spec.write_text(text)
    App.views = True  # as `worker run` does: the view of this text is stored
    App(spec, vhost="jobs")
    spec.write_text(text.replace("attempts: 2, backoff: [1s]", "attempts: 3, backoff: [2s]"))
    changed = loaded_by_worker(tmp_path, spec, "jobs", "jobs", "rabbitry.consumer.sync")
    assert heavy(changed["modules"], MODEL) == MODEL, "a new text is validated"
    assert changed["retry"] == {"attempts": 3, "tiers": {"2000": "jobs.retry.2s"}}
    spec.write_text(text.replace("type: quorum", "type: quorom"))
    (tmp_path / "handlers.py").write_text(
        HANDLERS.format(spec=str(spec), vhost="jobs", queue="jobs")
    )
    out = subprocess.run(
        [sys.executable, "-c", "import rabbitry.cli.worker as c; c.load_app('handlers:app')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "jobs.yaml:7" in out.stderr and "quorom" in out.stderr, out.stderr[-2000:]


def test_the_view_stands_for_the_spec_until_the_spec_is_asked_for(tmp_path: Path) -> None:
    """Anything the view does not answer loads the spec from the same text: the ``spec``
    attribute, a queue it does not list (the error is the spec's), ``shards=``."""
    from rabbitry.consumer.app import App as ViewApp
    from rabbitry.consumer.app import AppError

    spec = tmp_path / "jobs.yaml"
    spec.write_text(PLAIN_SPEC.replace("name: jobs\n", "name: standing\n", 1))
    ViewApp.views = True
    ViewApp(spec)  # stores the view
    app = ViewApp(spec)
    assert app._view is not None and app.vhost_names == ("jobs",)
    route = app.add("jobs", lambda message: None)
    assert route.retry is not None and route.retry.tier_queues == {1000: "jobs.retry.1s"}
    assert route.vhost == "jobs" and not route.ordered
    try:
        app.add("nope", lambda message: None)
    except AppError as exc:
        assert "queue 'nope' is not declared in vhost 'jobs'" in str(exc)
    else:
        raise AssertionError("an undeclared queue was accepted")
    assert app._view is None and app.spec is not None and app.vhost is not None
    assert app.spec.name == "standing" and list(app.routes) == ["jobs"]
