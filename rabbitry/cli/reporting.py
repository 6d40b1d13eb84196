"""How ``plan`` and ``apply`` show what the library tells as it goes: the plan drawn (or as
JSON), warnings on stderr (``show_warning``, which every command uses: text, or with ``--json``
one JSON object a line), a spinner and bars on a terminal, the question before applying."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from rabbitry.cli.common import Activity, Invocation, color_enabled, diagnostic_json, err
from rabbitry.diagnostics import Diagnostic
from rabbitry.errors import SpecProblem
from rabbitry.provisioner.reporter import Reporter

if TYPE_CHECKING:
    from rabbitry.provisioner.plans import Plan


def show_warning(warning: SpecProblem | Diagnostic, *, as_json: bool | None = None) -> None:
    """A warning on stderr: a ``warning: ...`` line, or with ``--json`` (``as_json``, the
    command line's by default) one JSON object on a line of its own, ``{"warning": {...}}``,
    the diagnostic as an error's ``diagnostics`` hold it (severity ``warning``, summary, detail,
    address, source), so a reader of stderr parses every line and never splits text."""
    if not (Invocation.json if as_json is None else as_json):
        err(f"warning: {warning}")
        return
    diagnostic = warning.diagnostic() if isinstance(warning, SpecProblem) else warning
    err(json.dumps({"warning": diagnostic_json(diagnostic)}))


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
        show_warning(problem, as_json=self.as_json)

    def note(self, text: str) -> None:
        show_warning(Diagnostic(summary=text, severity="warning"), as_json=self.as_json)

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


__all__ = ["CommandReporter", "show_warning"]
