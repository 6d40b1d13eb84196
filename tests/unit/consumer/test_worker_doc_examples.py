"""The examples of docs/worker.md's "When a handler fails" run as they are written: each is a
whole program over the handler harness, so a change that breaks one fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "worker.md"


def examples() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## When a handler fails\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.DOTALL)


def test_each_failure_feature_has_its_example() -> None:
    assert len(examples()) == 4


@pytest.mark.parametrize("index", range(4))
def test_the_example_runs(index: int) -> None:
    source = examples()[index]
    exec(compile(source, f"docs/worker.md example {index + 1}", "exec"), {"__name__": "example"})
