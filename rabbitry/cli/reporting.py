"""How ``plan`` and ``apply`` show what the library tells as it goes: the plan drawn (or as
JSON), warnings on stderr, a spinner and bars on a terminal, the question before applying."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from rabbitry.cli.common import Activity, color_enabled, err
from rabbitry.provisioner.reporter import Reporter

if TYPE_CHECKING:
    from rabbitry.errors import SpecProblem
    from rabbitry.provisioner.plans import Plan


class CommandReporter(Reporter):
    """What a person at the command line sees. ``as_json``: the plan is not drawn (``plan``
    prints it as JSON: ``plan_json``); ``prune``: whether deletions are drawn as done or as
    left for ``--prune``; ``auto_approve``: apply without asking."""

    def __init__(
        self,
        *,
        as_json: bool,
        plan_json: bool = False,
        prune: bool = True,
        auto_approve: bool = True,
    ) -> None:
        self.as_json = as_json
        self.plan_json = plan_json
        self.prune = prune
        self.auto_approve = auto_approve
        self._activity: Activity | None = None

    def warning(self, problem: SpecProblem) -> None:
        err(f"warning: {problem}")

    def note(self, text: str) -> None:
        err(f"warning: {text}")

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        with Activity() as activity, activity.step(description):
            yield

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        with Activity() as activity:
            self._activity = activity
            try:
                yield
            finally:
                self._activity = None

    def counted(self, what: str, done: int, total: int) -> None:
        if self._activity is not None:
            self._activity.count(what, done, total)

    def planned(self, plan: Plan, broker: str) -> None:
        if self.plan_json:
            click.echo(json.dumps(plan.to_json(), indent=2))
        elif not self.as_json:
            from rabbitry.provisioner.display import render_plan

            click.echo(
                f"Broker: {broker}  stack: {plan.stack}\n"
                + render_plan(plan, color=color_enabled(), prune=self.prune)
            )

    def confirm(self, plan: Plan) -> bool:
        if self.auto_approve:
            return True
        if not sys.stdin.isatty():
            raise click.UsageError(
                "apply needs confirmation: run it in a terminal or pass --auto-approve"
            )
        click.confirm("Apply these changes?", abort=True)
        return True

    def progress(self, line: str) -> None:
        if not self.as_json:
            click.echo(f"  {line}")


__all__ = ["CommandReporter"]
