"""The worker view of a spec (``rabbitry.consumer.view``) says what the spec says: read back
from its JSON it resolves every queue as the full spec does, and the cache hands it out only
for the same rendered text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rabbitry.consumer.app import App
from rabbitry.consumer.view import WorkerView, cache_dir, cached, remember
from rabbitry.topology import load_spec
from rabbitry.topology.spec.loader import load_spec_text

EXAMPLES = Path(__file__).parents[3] / "examples"

EVERY_KIND = """\
version: 1
name: kinds
broker: {url: "amqp://a:1,amqp://b:2", node_order: in-order}
vhosts:
  - name: one
    queues:
      - {name: tiers, retry: {attempts: 4, backoff: [1s, 5s]}}
      - {name: jitter, retry: {attempts: 3, backoff: {initial: 2s, jitter: 0.2}, via: binary}}
      - {name: levels, retry: {attempts: 2, backoff: [5s], via: fixed}}
      - {name: broker, type: quorum, retry: {attempts: 3, backoff: [1s, 2s], via: broker}}
      - {name: plain, arguments: {x-single-active-consumer: true}}
      - {name: log, type: stream}
    delays:
      - {name: binary, unit: 1s, max: 1m, targets: [{queue: jitter}]}
      - {name: fixed, levels: fixed, targets: [{queue: levels}]}
  - name: two
    queues:
      - {name: tiers, retry: {attempts: 2, backoff: [3s], never_retry: [ValueError]}}
      - name: failures
        retry:
          retry_on: [ConnectionError]
          immediate: {attempts: 2, pause: 20ms}
          faults: {exchange: two.faults}
"""


def test_the_view_read_back_resolves_every_queue_as_the_spec_does(tmp_path: Path) -> None:
    spec = load_spec_text(EVERY_KIND, "kinds.yaml", environ={})
    view = WorkerView.of(spec)
    again = WorkerView.from_json(json.loads(json.dumps(view.to_json())), view.url, view.node_order)
    assert again == view
    assert view.url == "amqp://a:1,amqp://b:2" and view.node_order == "in-order"
    for vhost in ("one", "two"):
        app = App(spec, vhost=vhost)
        for name, queue in again.queues[vhost].items():
            place = app._place(*app._find(name, None))
            assert (place.retry, place.retry_error) == (queue.retry, queue.retry_error), name
            assert (place.ordered, place.target.stream) == (queue.ordered, queue.stream), name
    one = again.queues["one"]
    assert one["broker"].retry is not None and one["broker"].retry.broker is not None
    assert one["levels"].retry is not None and one["levels"].retry.delay is not None
    assert one["plain"].ordered and one["log"].stream and one["log"].retry is None
    failures = again.queues["two"]["failures"].retry
    assert failures is not None and failures.fault_exchange == "two.faults"
    assert failures.policy.retry_on == ("ConnectionError",)
    assert failures.policy.immediate is not None and failures.policy.immediate.pause_ms == 20


def test_a_templated_example_is_cached_by_its_rendered_text(tmp_path: Path) -> None:
    rendered: list[str] = []
    spec = load_spec(EXAMPLES / "delays.yaml", on_rendered=rendered.append)
    remember(rendered[0], spec)
    assert cached(rendered[0]) == WorkerView.of(spec)
    assert cached(rendered[0] + "\n# a comment\n") is None
    assert cached((EXAMPLES / "delays.yaml").read_text()) is None, "the template is not the key"


def test_an_entry_whose_content_was_changed_under_its_name_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RABBITRY_CACHE_DIR", str(tmp_path / "cache"))
    spec = load_spec_text(EVERY_KIND, "kinds.yaml", environ={})
    remember(EVERY_KIND, spec)
    assert cached(EVERY_KIND) is not None
    (entry,) = [p for p in cache_dir().iterdir() if p.name.endswith(".json")]
    data = json.loads(entry.read_text())
    data["view"] = data["view"].replace('"attempts": 4', '"attempts": 40')  # same name
    entry.write_text(json.dumps(data))
    assert cached(EVERY_KIND) is None
    entry.write_text("{not json")
    assert cached(EVERY_KIND) is None


def test_no_secret_of_the_rendered_spec_reaches_the_cache(tmp_path: Path) -> None:
    with_password = EVERY_KIND + "users:\n  - {name: app, password: s3cret-pw}\n"
    remember(with_password, load_spec_text(with_password, "kinds.yaml", environ={}))
    assert cached(with_password) is not None
    stored = "".join(p.read_text() for p in cache_dir().iterdir())
    assert "s3cret-pw" not in stored and "attempts: 4" not in stored

    # a broker URL is never stored: the worker reads it off the spec's text each time
    in_url = with_password.replace("amqp://a:1", "amqp://u:url-s3cret@a:1")
    remember(in_url, load_spec_text(in_url, "kinds.yaml", environ={}))
    found = cached(in_url)
    assert found is not None and found.url == "amqp://u:url-s3cret@a:1,amqp://b:2"
    assert "url-s3cret" not in "".join(p.read_text() for p in cache_dir().iterdir())
    assert "amqp://" not in "".join(p.read_text() for p in cache_dir().iterdir())
