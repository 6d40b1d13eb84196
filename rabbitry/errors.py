"""The exceptions rabbitry raises; catch ``RabbitryError`` to catch them all."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rabbitry.diagnostics import Diagnostic, Severity, SourceRange


class RabbitryError(Exception):
    """Base of every error rabbitry raises on purpose."""


class MissingExtra(RabbitryError):
    """A feature needs a package of one of rabbitry's extras that is not installed."""

    def __init__(self, feature: str, package: str, extra: str) -> None:
        super().__init__(
            f"{feature} needs {package}, which comes with rabbitry's {extra} extra:"
            f" pip install 'rabbitry[{extra}]'"
        )
        self.package = package
        self.extra = extra


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec: where (file:line:column, spec path) and what to do."""

    message: str
    path: str = ""
    file: str | None = None
    line: int | None = None
    column: int | None = None
    severity: str = "error"

    def location(self) -> str:
        parts = []
        if self.file is not None:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            parts.append(where)
        if self.path:
            parts.append(self.path)
        return ": ".join(parts)

    def __str__(self) -> str:
        location = self.location()
        return f"{location}: {self.message}" if location else self.message

    def source(self) -> SourceRange:
        """Its place in the spec."""
        return SourceRange(self.file, self.line, self.column, self.path)

    def diagnostic(self) -> Diagnostic:
        """This problem as a ``Diagnostic``, its place in the spec as the source range."""
        severity: Severity = "warning" if self.severity == "warning" else "error"
        return Diagnostic(summary=self.message, severity=severity, source=self.source())


class SpecError(RabbitryError):
    """The spec cannot be loaded: bad template, YAML, shape or meaning."""

    def __init__(self, problems: list[SpecProblem] | SpecProblem | str) -> None:
        if isinstance(problems, str):
            problems = [SpecProblem(problems)]
        elif isinstance(problems, SpecProblem):
            problems = [problems]
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class BrokerError(RabbitryError):
    """The broker (or its management API) could not be reached or refused a request."""


class NoAnswer(BrokerError):
    """A request got no answer in time; the broker may still be working on it."""


class Refusal(RabbitryError):
    """What refusing errors share: ``diagnostics``, one per refusal (a tuple of
    ``Diagnostic``); one made of the message when the raiser gave none."""

    def __init__(self, message: str, diagnostics: Iterable[Diagnostic] = ()) -> None:
        super().__init__(message)
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics) or (
            Diagnostic(summary=message),
        )


class CapabilityError(Refusal, BrokerError):
    """The broker lacks a plugin, feature flag or version the spec needs."""


class TLSHandshakeError(BrokerError):
    """The TLS handshake failed on a certificate (the broker's or ours): retrying cannot help."""


class PlanError(Refusal):
    """The plan cannot be applied as asked (a replace or prune the flags do not allow)."""


class ApplyError(RabbitryError):
    """Applying stopped half-way; ``done`` says what was changed before the failure."""

    def __init__(self, message: str, done: list[str] | None = None) -> None:
        self.done = done or []
        super().__init__(message)


class PublishError(RabbitryError):
    """A message was not confirmed by the broker."""


class Nacked(PublishError):
    """The broker refused the message (basic.nack)."""


class Unroutable(PublishError):
    """A mandatory message reached no queue (basic.return)."""


class ConfirmTimeout(PublishError):
    """No confirm arrived in time; the message may or may not have been stored."""
