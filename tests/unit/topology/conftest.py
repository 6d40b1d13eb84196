"""Helpers for the topology tests: load spec text and collect the problems it produces."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

import pytest

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology import load_spec_text, validate
from rabbitry.topology.spec.model import Spec


def load(text: str, environ: Mapping[str, str] | None = None, **kwargs: object) -> Spec:
    """Load dedented spec text as ``spec.yaml`` with an empty environment by default."""
    return load_spec_text(
        textwrap.dedent(text),
        "spec.yaml",
        environ=environ or {},
        **kwargs,  # type: ignore[arg-type]
    )


def load_problems(text: str, **kwargs: object) -> list[SpecProblem]:
    """The problems loading ``text`` raises (fails the test if it loads)."""
    with pytest.raises(SpecError) as info:
        load(text, **kwargs)  # type: ignore[arg-type]
    return info.value.problems


def one_problem(text: str, **kwargs: object) -> SpecProblem:
    problems = load_problems(text, **kwargs)
    assert len(problems) == 1, "\n".join(map(str, problems))
    return problems[0]


def check(text: str) -> list[SpecProblem]:
    """The semantic problems of a spec that loads."""
    return validate(load(text))


def assert_reported(problems: list[SpecProblem], message: str) -> None:
    """One of ``problems`` says ``message`` (the test's failure lists them all)."""
    assert any(message in str(p) for p in problems), "\n".join(map(str, problems))


def vhost_spec(body: str) -> str:
    """A spec with one vhost ``v`` whose content is ``body`` (indented under the vhost)."""
    indented = textwrap.indent(textwrap.dedent(body), "    ")
    return f"version: 1\nvhosts:\n  - name: v\n{indented}"
