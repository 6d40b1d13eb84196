"""What ``rabbitry.plan`` and ``rabbitry.apply`` tell as they go, for their caller to show.

A ``Reporter`` is handed to them as ``report=``; this one shows nothing (spec warnings go to
the topology logger, as everywhere) and approves every apply. A caller overrides what it
shows: the CLI draws the plan, asks before applying, and shows spinners and bars on a
terminal. Light on purpose: nothing here loads the spec model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rabbitry.errors import SpecProblem
    from rabbitry.provisioner.plans import Plan


class Reporter:
    """Hooks a plan or an apply calls as it goes; each does nothing here."""

    def warning(self, problem: SpecProblem) -> None:
        """A warning of the spec (its file, line and spec path): nothing stops for it."""
        from rabbitry.topology import log_warning

        log_warning(problem)

    def note(self, text: str) -> None:
        """Something the caller should know of this run (``targets``: the rest of the spec is
        left as it is)."""

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A step of unknown length runs for the ``with`` block (reading the broker)."""
        yield

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Counted work (``counted``) goes on in the ``with`` block (an apply's changes)."""
        yield

    def planned(self, plan: Plan, broker: str) -> None:
        """The plan, made against ``broker`` (its management URL, password masked): for an
        apply, the one it runs, made under the stack's lock, before anything is refused."""

    def confirm(self, plan: Plan) -> bool:
        """Whether to apply ``plan``, asked once the options allow it and before anything
        changes (never for a saved plan: it was reviewed when it was made). False: nothing
        is applied."""
        return True

    def progress(self, line: str) -> None:
        """A line per step of an apply as it is done (``deleted exchange shop/old``)."""

    def counted(self, what: str, done: int, total: int) -> None:
        """Counted work: ``done`` of ``total`` of ``what`` (objects created in a vhost)."""


__all__ = ["Reporter"]
