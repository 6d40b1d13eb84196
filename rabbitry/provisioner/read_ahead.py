"""The head start of a plan or an apply: the broker works while the spec loads.

Loading a spec of 50,000 objects takes about a second, and the broker takes about as long to
list the objects of its vhost; an apply's lock waits a settle time after its claim. A
``ReadAhead`` starts both before the spec is built and hands them on once it is:

- ``before_loading(path)``: the stack and vhosts a plain spec (or a definitions file) names
  are guessed off its text (``early.guess``) before the heavy modules are even imported;
- ``on_rendered(text)``: a large spec's names are peeked off its rendered text before it is
  built (``load_spec(on_rendered=)``);
- ``start(stack, vhosts)``: the loaded spec's own names, which are what counts: what was
  started for a wrong guess is let go (another stack's lock) or simply not used (reads).

For an apply (``lock=True``) the stack's lock is claimed first and the broker read only once
the claim was written: what is read then counts as read under the lock once the caller
acquires it (``stack.locked_plan``). ``target_of(ahead=)`` hands ``client`` and ``lock`` to
the ``Target``; on failure ``close`` lets both go. Light on purpose: the spec model is not
imported here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from rabbitry.provisioner.early import PLAN_READS, early_client

if TYPE_CHECKING:
    from rabbitry.management.client import ManagementClient
    from rabbitry.management.endpoints import Endpoints
    from rabbitry.provisioner.lock import StackLock


class Broker(TypedDict, total=False):
    """The broker as the caller names it, for ``resolve_endpoints`` (the spec may name its own;
    a key left out is None)."""

    url: str | None
    management_url: str | None
    ca_file: str | None
    insecure: bool | None


class ReadAhead:
    """What a plan (reads) or an apply (``lock``: the stack's lock, then reads) started
    before its spec loaded; ``url`` ... ``insecure``: the broker, as ``resolve_endpoints``
    takes it, until the spec names its own."""

    def __init__(self, *, lock: bool = False, **broker: Unpack[Broker]) -> None:
        self.locking = lock
        self.client: ManagementClient | None = None
        """The management client reading ahead, once one started."""
        self.lock: StackLock | None = None
        """The stack's lock, claimed (``locking`` only)."""
        self._broker = broker

    def __repr__(self) -> str:
        stack = self.lock.stack if self.lock is not None else None
        return f"ReadAhead(lock={self.locking}, reading={self.client is not None}, stack={stack!r})"

    @classmethod
    def before_loading(
        cls, path: Path, *, lock: bool = False, **broker: Unpack[Broker]
    ) -> ReadAhead:
        """Started from the names guessed off the spec file at ``path``: nothing starts when
        nothing can be guessed (a templated spec, a saved plan) or no broker can be named yet
        (a bad URL is said once the spec is loaded)."""
        ahead = cls(lock=lock, **broker)
        found = early_client(path, **broker)
        if found is not None:
            ahead.client, stack, vhosts = found
            ahead.start(stack, vhosts)
        return ahead

    def on_rendered(self, text: str) -> None:
        """A spec's rendered text: a large one's names are known before it is built."""
        from rabbitry.topology.spec.fast_yaml import peek_names

        peek = peek_names(text)
        if peek is not None:
            self.start(*peek)

    def start(self, stack: str, vhosts: list[str], endpoints: Endpoints | None = None) -> None:
        """The spec names ``stack`` and ``vhosts`` (``endpoints``: its broker, once known):
        claim the stack's lock (at once, not in a thread: a thread gets little time while the
        spec is built), letting one claimed under another name go, and read the vhosts, unless
        another run holds the lock (they are read once it is ours)."""
        if self.client is None:
            if endpoints is None:
                from rabbitry.management.endpoints import resolve_endpoints

                endpoints = resolve_endpoints(**self._broker)
            self.client = endpoints.management()
        if self.locking:
            if self.lock is not None and self.lock.stack != stack:
                self.lock.abandon()  # a wrong guess: the lock is the stack's, under its name
                self.client.forget_read_ahead()
                self.lock = None
            if self.lock is None:
                from rabbitry.provisioner.lock import StackLock

                self.lock = StackLock(self.client, stack)
                self.lock.claim()
            if not self.lock.claimed:
                return  # held by another run (or no answer): read once the lock is ours
        self.client.read_ahead(vhosts, paths=PLAN_READS)

    def close(self) -> None:
        """Let go what was started: the run stopped before it used it."""
        if self.lock is not None:
            self.lock.abandon()
        if self.client is not None:
            self.client.close()


__all__ = ["Broker", "ReadAhead"]
