"""Sizes a newcomer can read: no function in rabbitry/ over 80 lines unless a ``# long:``
comment says why, and no module over 500 lines.

A function's lines run from its ``def`` to its last line (its decorators, such as a click
command's options, are declarations, not the function's logic). The reason goes on the ``def``
line or on the line above it (above the decorators, for a decorated function).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rabbitry"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500
REASON = "# long:"


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of each function in ``source`` over ``limit`` lines without a
    ``# long:`` reason on its ``def`` line or the line above it or above its decorators."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= limit:
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        # line numbers count from 1: lines[n - 1] is line n, lines[n - 2] the one above it
        places = {node.lineno - 1, node.lineno - 2, first - 2}
        if not any(REASON in lines[i] for i in places if 0 <= i < len(lines)):
            found.append((node.name, node.lineno, length))
    return found


def test_a_long_function_without_a_reason_is_found_and_one_with_a_reason_is_not() -> None:
    body = "".join(f"    x = {i}\n" for i in range(5))
    source = (
        f"def bare():\n{body}\n"
        f"# long: one table, read top to bottom\ndef above():\n{body}\n"
        f"def on_the_line():  # long: the same\n{body}\n"
        f"# long: decorated\n@decorator\n@decorator\ndef decorated():\n{body}\n"
        f"def short():\n    return 1\n"
    )
    assert long_functions(source, limit=5) == [("bare", 1, 6)]


def test_no_function_in_rabbitry_is_over_80_lines_without_a_stated_reason() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {name} ({length} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name, line, length in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them into named steps, or say why"
        f" they are one in a `{REASON} ...` comment on the def line or the line above:\n"
        + "\n".join(offenders)
    )


def test_no_module_in_rabbitry_is_over_500_lines() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)} ({count} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not offenders, (
        f"modules over {MAX_MODULE_LINES} lines: give their parts modules of their own:\n"
        + "\n".join(offenders)
    )
