"""One container broker for every pytest-xdist worker of a test run.

Each xdist worker is a pytest session of its own, so a session-scoped container broker would be
one container per worker: minutes of start-up and a broker's memory each. Instead the first
worker that needs the broker starts it under a file lock in a folder the controller made for
the run, and writes where it listens there; the other workers read that. The container outlives
the worker that started it: its owner label names the controller, which removes it when the run
ends (and whose exit, should it die, makes the container an orphan that the next
``start_broker`` reaps). Workers only learn the URLs, so the shared broker has no stop/start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rabbitry.errors import BrokerError
from rabbitry.testing.broker import Broker, broker_from_urls, wait_until_ready
from rabbitry.testing.containers import start_broker
from rabbitry.testing.host import docker_client, owner_label, require_engine

# Keys of the xdist ``workerinput`` the controller hands each worker.
FOLDER_KEY = "rabbitry_shared_broker_folder"
OWNER_KEY = "rabbitry_shared_broker_owner"
RECORD = "broker.json"
LOCK = "lock"


@dataclass(frozen=True)
class SharedBrokerPlace:
    """Where the workers of one run meet: the run's folder and the controller's owner label."""

    folder: Path
    owner: str

    @classmethod
    def create(cls) -> SharedBrokerPlace:
        """A new, private folder for this run, owned by the calling process (the controller)."""
        return cls(Path(tempfile.mkdtemp(prefix="rabbitry-shared-broker-")), owner_label())

    @classmethod
    def from_workerinput(cls, workerinput: Mapping[str, object]) -> SharedBrokerPlace | None:
        folder, owner = workerinput.get(FOLDER_KEY), workerinput.get(OWNER_KEY)
        if not isinstance(folder, str) or not isinstance(owner, str):
            return None
        return cls(Path(folder), owner)

    def as_workerinput(self) -> dict[str, str]:
        return {FOLDER_KEY: str(self.folder), OWNER_KEY: self.owner}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.folder / LOCK).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def broker(self, environ: Mapping[str, str], timeout: float) -> Broker:
        """The run's broker: started by the first caller, read from the record by the rest.

        Raises what ``start_broker`` raises when the first start fails (a later caller tries
        again: nothing was recorded)."""
        record = self.folder / RECORD
        with self._locked():
            if record.exists():
                seen = json.loads(record.read_text())
                return wait_until_ready(_recorded(seen), timeout)
            handle = start_broker(
                environ=environ,
                startup_timeout=timeout,
                owner=self.owner,
                password=secrets.token_urlsafe(16),
            )
            started = handle.broker
            seen = {
                "amqp_url": started.amqp_url(),
                "management_url": started.management_url,
                "container_id": handle.container_id,
                "stream_port": started.stream_port,
            }
            # The record holds the broker's password: readable by this user only.
            fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(seen, out)
            handle.detach()
            return _recorded(seen)

    def remove(self, environ: Mapping[str, str]) -> None:
        """Remove the run's container (if a worker started one) and the folder."""
        record = self.folder / RECORD
        try:
            if record.exists():
                container_id = json.loads(record.read_text())["container_id"]
                client = docker_client(require_engine(environ))
                try:
                    client.containers.get(container_id).remove(force=True)
                except Exception as exc:
                    raise BrokerError(
                        f"could not remove the shared test broker container {container_id}: "
                        f"{exc}; remove it with your container engine"
                    ) from exc
                finally:
                    client.close()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _recorded(seen: Mapping[str, Any]) -> Broker:
    """The broker of a record: its URLs, and its stream port, so that every worker knows the
    stream protocol is there as the one that started it does."""
    broker = broker_from_urls(seen["amqp_url"], seen["management_url"])
    return dataclasses.replace(broker, stream_port=seen.get("stream_port"))
