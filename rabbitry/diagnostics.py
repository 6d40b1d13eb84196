"""Diagnostics: one thing rabbitry refuses or warns about, as data a program can read.

A refused plan or apply raises ``PlanError`` or ``CapabilityError`` whose text lists every
refusal, one a line; the same refusals are on the error's ``diagnostics``, each with a
severity, a short summary, the detail (that line: what is wrong and what to do), the object it
is about (``Address``) and, where known, the place in the spec (``SourceRange``). ``--json``
prints them as a list, so a reader never splits the text. Pure: no rabbitry imports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Address:
    """The broker object a diagnostic is about: ``kind`` (``queue``, ``exchange``, ``binding``,
    ``user``, ``delay``, ...), its ``vhost`` (None for users, vhosts and global objects) and
    its ``name`` within them (a binding's is ``source -> destination_type destination [key]``)."""

    kind: str
    vhost: str | None
    name: str

    @classmethod
    def of_key(cls, key: Sequence[str]) -> Address:
        """The address of a resource key (``("queue", "orders", "work")``)."""
        kind, vhost, *rest = key
        if kind == "vhost":
            return cls(kind, None, vhost)
        if kind == "binding" and len(rest) >= 4:
            source, dtype, dest, routing_key = rest[:4]
            return cls(kind, vhost or None, f"{source} -> {dtype} {dest} [{routing_key}]")
        return cls(kind, vhost or None, "/".join(rest))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "vhost": self.vhost, "name": self.name}


@dataclass(frozen=True)
class SourceRange:
    """Where in the spec: a file, and the line and column when known (1-based)."""

    file: str | None = None
    line: int | None = None
    column: int | None = None
    path: str = ""
    """The spec path (``vhosts[0].queues[3].retry.attempts``)."""

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column, "path": self.path}


@dataclass(frozen=True)
class Diagnostic:
    """One refusal or warning: ``summary`` names its kind in a few words, ``detail`` says what
    is wrong and what to do (the line ``str(error)`` shows), ``address`` and ``source`` where
    it is when known. A spec problem's (``SpecProblem.diagnostic()``) has its message as the
    summary and its place as the source."""

    summary: str
    detail: str = ""
    severity: Severity = "error"
    address: Address | None = None
    source: SourceRange | None = None

    def __str__(self) -> str:
        return self.detail or self.summary

    def __contains__(self, text: str) -> bool:
        """Whether its text (``str(diagnostic)``) holds ``text``: a refusal still reads as the
        line it was before it had an address."""
        return text in str(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "summary": self.summary,
            "detail": self.detail,
            "address": self.address.to_json() if self.address else None,
            "source": self.source.to_json() if self.source else None,
        }


def listed(head: str, diagnostics: Sequence[Diagnostic]) -> str:
    """``head`` and one diagnostic a line below it, indented: how refusals read as text."""
    return head + "\n  " + "\n  ".join(str(d) for d in diagnostics)


__all__ = ["Address", "Diagnostic", "Severity", "SourceRange", "listed"]
