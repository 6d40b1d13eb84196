"""What a worker needs of its spec, as plain data, and the cache that lets ``worker run`` start
without the spec model.

Loading a spec validates it with pydantic, and the models, pydantic and pydantic-core stay
resident in every worker for its whole life (about 12 MiB, most of a worker's own footprint),
although a worker reads a handful of facts: the vhosts, the broker URLs, and per queue its
origin, whether it is a stream, whether it is consumed in order, and its retry set-up.
``WorkerView.of(spec)`` resolves those once, with the same functions the ``App`` uses
(``targets``), and ``remember`` stores them as JSON in the cache directory. A later load of the
same spec (``App`` with ``WorkerView`` caching on, as ``rabbitry worker run`` has it) reads them
back instead of validating again.

An entry is found by a keyed digest (BLAKE2b under a random key of the user's, kept 0600 next
to the entries) of what the result depends on: the rendered spec text (never stored itself: a
rendered spec may hold passwords from the environment), the spec limits in force, the entry
format, and the size and mtime of the modules that validate and resolve (so an upgrade of
rabbitry or pydantic misses). Without the key no one can name the entry of a spec, however
well they know its text, and an entry whose content does not carry its digest is not read.
The directory and its entries are used only when they are the user's own and no one else may
write them (``rabbitry.files``); otherwise the cache is left alone with one warning and the
spec is loaded in full. An entry holds no broker URL and no secret: the worker reads the URL and
node order off the spec's text each time (``spec_broker``), and a spec whose ``broker:`` that
reading does not follow is not stored. A spec that does not load is never stored, so its errors
come from the full loader as always.
Anything the view does not answer (a queue it does not list, ``shards=``, periodic jobs, the
``spec`` attribute) loads the full spec from the same text.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rabbitry.policies.delay import BinaryDelays, DelayScheme, FixedDelays
from rabbitry.policies.retry import Backoff, ImmediateRetry, RetryPolicy
from rabbitry.topology.patterns.retry_setup import BrokerRetry, QueueRetry
from rabbitry.topology.spec.limits import SpecLimits

if TYPE_CHECKING:
    from rabbitry.topology.spec.model import Spec

__all__ = [
    "QueueView",
    "WorkerView",
    "cache_dir",
    "cached",
    "remember",
    "rendered",
    "spec_text",
]

FORMAT = 3
"""Bumped when the entry's shape or meaning changes."""
KEY_FILE = "key"
"""The user's random key in the cache directory: entries are named and signed with it."""
KEY_BYTES = 32
logger = logging.getLogger("rabbitry.worker")
TEMPLATE_MARKERS = ("{{", "{%", "{#")
"""As ``spec.template``: text without them renders to itself."""
CODE = {
    "rabbitry": (
        "consumer/spec_broker.py",
        "consumer/targets.py",
        "consumer/view.py",
        "policies/delay.py",
        "policies/retry.py",
        "topology/patterns/delays.py",
        "topology/patterns/retries.py",
        "topology/patterns/retry_setup.py",
        "topology/patterns/sharding.py",
        "topology/spec/arguments.py",
        "topology/spec/base.py",
        "topology/spec/delays.py",
        "topology/spec/federation.py",
        "topology/spec/loader.py",
        "topology/spec/model.py",
        "topology/spec/quantities.py",
        "topology/spec/retry.py",
        "topology/spec/sharding.py",
        "topology/spec/shovels.py",
    ),
    "pydantic": ("version.py",),
    "pydantic_core": ("__init__.py",),
}
"""The files whose code decides what a spec validates into, by package: an entry records
their sizes and mtimes (found without importing them)."""


@dataclass(frozen=True)
class QueueView:
    """One queue a handler may name, as ``targets.declared_queues`` resolves it."""

    declared_by: str
    stream: bool
    ordered: bool
    """The queue asks for single-active-consumer (ordered consumption)."""
    retry: QueueRetry | None
    retry_error: str | None = None
    """Why the spec's retry set-up cannot be resolved (raised if a handler relies on it)."""


@dataclass(frozen=True)
class WorkerView:
    """The facts of a spec a worker reads, in the spec's vhost order."""

    vhosts: tuple[str, ...]
    url: str | None
    """The spec's broker URL(s): never stored in the cache, read off the spec each time."""
    node_order: str | None
    queues: Mapping[str, Mapping[str, QueueView]]
    """vhost -> queue name -> its view (the spec's work queues, shard queues, partitions)."""

    @classmethod
    def of(cls, spec: Spec) -> WorkerView:
        from rabbitry.consumer.targets import declared_queues
        from rabbitry.errors import SpecError
        from rabbitry.topology.patterns.retries import queue_retry  # as retry_of, imported once

        queues: dict[str, dict[str, QueueView]] = {}
        for vhost in spec.vhosts:
            found = queues[vhost.name] = {}
            for name, target in declared_queues(vhost).items():
                retry, error = None, None
                try:
                    retry = None if target.spec is None else queue_retry(vhost, target.spec)
                except SpecError as exc:
                    error = str(exc)
                ordered = target.spec is not None and bool(
                    target.spec.arguments.single_active_consumer
                )
                found[name] = QueueView(target.declared_by, target.stream, ordered, retry, error)
        broker = spec.broker
        return cls(
            tuple(v.name for v in spec.vhosts),
            broker.urls if broker is not None else None,
            broker.node_order if broker is not None else None,
            queues,
        )

    def to_json(self) -> dict[str, Any]:
        """The stored form: everything but the broker's URL and node order."""
        return {
            "vhosts": list(self.vhosts),
            "queues": {
                vhost: {
                    name: {
                        "declared_by": q.declared_by,
                        "stream": q.stream,
                        "ordered": q.ordered,
                        "retry": _retry_json(q.retry),
                        "retry_error": q.retry_error,
                    }
                    for name, q in queues.items()
                }
                for vhost, queues in self.queues.items()
            },
        }

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], url: str | None, node_order: str | None
    ) -> WorkerView:
        """The view stored as ``data``, with the URL and node order read off the spec."""
        return cls(
            tuple(data["vhosts"]),
            url,
            node_order,
            {
                vhost: {
                    name: QueueView(
                        q["declared_by"],
                        q["stream"],
                        q["ordered"],
                        _retry_of_json(q["retry"]),
                        q["retry_error"],
                    )
                    for name, q in queues.items()
                }
                for vhost, queues in data["queues"].items()
            },
        )


def _retry_json(retry: QueueRetry | None) -> dict[str, Any] | None:
    if retry is None:
        return None
    delay = retry.delay
    return {
        "queue": retry.queue,
        "policy": asdict(retry.policy),
        "parking_queue": retry.parking_queue,
        "tier_queues": [[ms, queue] for ms, queue in retry.tier_queues.items()],
        "delay": None
        if delay is None
        else {"binary" if isinstance(delay, BinaryDelays) else "fixed": asdict(delay)},
        "broker": asdict(retry.broker) if retry.broker is not None else None,
        "fault_exchange": retry.fault_exchange,
    }


def _retry_of_json(data: Mapping[str, Any] | None) -> QueueRetry | None:
    if data is None:
        return None
    policy = data["policy"]
    backoff = dict(policy["backoff"], tiers_ms=tuple(policy["backoff"]["tiers_ms"]))
    delay: DelayScheme | None = None
    if data["delay"] is not None:
        ((kind, fields),) = data["delay"].items()
        if kind == "binary":
            delay = BinaryDelays(**fields)
        else:
            delay = FixedDelays(**dict(fields, levels_ms=tuple(fields["levels_ms"])))
    return QueueRetry(
        data["queue"],
        RetryPolicy(
            attempts=policy["attempts"],
            backoff=Backoff(**backoff),
            never_retry=tuple(policy["never_retry"]),
            retry_on=tuple(policy["retry_on"]),
            immediate=ImmediateRetry(**policy["immediate"]) if policy["immediate"] else None,
        ),
        data["parking_queue"],
        {int(ms): queue for ms, queue in data["tier_queues"]},
        delay,
        BrokerRetry(**data["broker"]) if data["broker"] is not None else None,
        data["fault_exchange"],
    )


# -- the cache ------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """``$RABBITRY_CACHE_DIR``, else ``$XDG_CACHE_HOME/rabbitry``, else ``~/.cache/rabbitry``;
    entries go to its ``worker-views`` directory."""
    base = os.environ.get("RABBITRY_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "rabbitry")
    return Path(base) / "worker-views"


def spec_text(path: Path) -> str | None:
    """The spec file's text, None when it cannot be read or is over the size limit (the full
    loader then says what is wrong)."""
    try:
        if path.stat().st_size > SpecLimits.from_environment().max_bytes:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def rendered(path: Path, text: str, variables: Mapping[str, str] | None) -> str | None:
    """``text`` as the loader renders it (itself without template syntax, so no template
    engine loads); None when rendering fails (the full loader reports it)."""
    if not any(marker in text for marker in TEMPLATE_MARKERS):
        return text
    from rabbitry.errors import RabbitryError
    from rabbitry.topology.spec.template import render_template

    try:
        return render_template(text, str(path), variables, search_path=path.parent)
    except RabbitryError:
        return None


def _code_stamp() -> list[list[object]]:
    import importlib.util

    stamp: list[list[object]] = []
    for package, files in CODE.items():
        try:
            found = importlib.util.find_spec(package)  # a top-level name: nothing is imported
        except (ImportError, ValueError):
            found = None
        where = os.path.dirname(found.origin) if found is not None and found.origin else ""
        for name in files:
            try:
                st = os.stat(os.path.join(where, name))
                stamp.append([package, name, st.st_size, st.st_mtime_ns])
            except OSError:
                stamp.append([package, name, None, None])
    return stamp


def _digest(secret: bytes, *parts: bytes) -> str:
    # BLAKE2b comes with CPython without OpenSSL (hashlib and hmac would map it into every
    # worker, which loads it only for amqps URLs); its key makes it a MAC as HMAC would
    try:
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - an interpreter built without it
        from hashlib import blake2b
    mac = blake2b(key=secret, digest_size=32)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


def _entry_name(secret: bytes, text: str) -> str:
    stamp = {
        "format": FORMAT,
        "code": _code_stamp(),
        "limits": asdict(SpecLimits.from_environment()),
    }
    return _digest(secret, json.dumps(stamp, sort_keys=True).encode(), text.encode()) + ".json"


def _seal(secret: bytes, name: str, body: str) -> str:
    """The digest an entry named ``name`` carries of its ``body``: a file put there by another
    hand, even under the right name, does not carry it."""
    return _digest(secret, name.encode(), body.encode())


_warned = False


def _warn_once(problem: Exception) -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "not using the worker view cache: %s; the spec is loaded in full (set"
            " RABBITRY_CACHE_DIR to a directory of your own)",
            problem,
        )


def _read_key(directory: int, where: Path) -> bytes | None:
    from rabbitry.files import read_private

    try:
        key = bytes.fromhex(read_private(directory, KEY_FILE, where).strip())
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    return key if len(key) == KEY_BYTES else None


def cached(text: str) -> WorkerView | None:
    """The view stored for the rendered spec ``text``, if this user's rabbitry stored one for
    the same text in a directory of the user's own (else None: the spec is loaded in full)."""
    from rabbitry.consumer.spec_broker import broker_settings
    from rabbitry.errors import UnsafeFileError
    from rabbitry.files import private_directory, read_private

    where = cache_dir()
    try:
        directory = private_directory(where, make=False)
    except FileNotFoundError:
        return None  # nothing was ever stored
    except UnsafeFileError as exc:
        _warn_once(exc)
        return None
    except OSError:
        return None
    try:
        secret = _read_key(directory, where)
        broker = broker_settings(text)
        if secret is None or broker is None:
            return None
        name = _entry_name(secret, text)
        entry = json.loads(read_private(directory, name, where))
        body = entry["view"]
        # a local forgery cannot know the key: == is as good as a constant-time compare here
        if entry.get("format") != FORMAT or entry.get("seal") != _seal(secret, name, body):
            return None
        return WorkerView.from_json(json.loads(body), *broker)
    except UnsafeFileError as exc:
        _warn_once(exc)
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    finally:
        os.close(directory)


def remember(text: str, spec: Spec) -> None:
    """Store the view of ``spec`` (loaded from the rendered ``text``) for the next worker; a
    cache that cannot be written, or is not the user's own (one warning), is skipped (the
    worker then loads the spec)."""
    from rabbitry.consumer.spec_broker import broker_settings
    from rabbitry.errors import RabbitryError, UnsafeFileError
    from rabbitry.files import private_directory, write_private_in

    try:
        view = WorkerView.of(spec)
        if broker_settings(text) != (view.url, view.node_order):
            return  # a reader of the text would not find the spec's broker: never cached
        where = cache_dir()
        directory = private_directory(where)
        try:
            secret = _read_key(directory, where)
            if secret is None:
                write_private_in(directory, KEY_FILE, os.urandom(KEY_BYTES).hex())
                secret = _read_key(directory, where)  # another writer's, if it renamed last
            if secret is None:
                return
            name = _entry_name(secret, text)
            body = json.dumps(view.to_json())
            entry = {"format": FORMAT, "seal": _seal(secret, name, body), "view": body}
            write_private_in(directory, name, json.dumps(entry))
        finally:
            os.close(directory)
    except UnsafeFileError as exc:
        _warn_once(exc)
    except (OSError, RabbitryError):
        pass
