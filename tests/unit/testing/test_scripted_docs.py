"""The example of docs/testing.md's "Testing your code with the scripted broker" runs as shown."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).parents[3] / "docs" / "testing.md"


def example() -> str:
    text = DOC.read_text()
    section = text.split("## Testing your code with the scripted broker", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "the section has its example"
    return found.group(1)


def test_the_documented_example_passes() -> None:
    names: dict[str, Any] = {}
    exec(compile(example(), str(DOC), "exec"), names)
    tests = [value for name, value in names.items() if name.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        test()
