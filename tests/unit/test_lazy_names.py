"""Package names loaded on first use: the one loader every lazy package uses."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rabbitry
import rabbitry.topology


def test_a_name_is_imported_when_first_asked_for_and_kept() -> None:
    code = (
        "import sys, rabbitry.topology as t\n"
        "assert 'rabbitry.topology.patterns.expand' not in sys.modules\n"
        "f = t.expand\n"
        "assert 'rabbitry.topology.patterns.expand' in sys.modules\n"
        "assert vars(t)['expand'] is f\n"
        "assert t.primitives is sys.modules['rabbitry.topology.primitives']\n"
        "assert callable(t.validate)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_unknown_name_is_an_attribute_error_naming_the_package() -> None:
    with pytest.raises(
        AttributeError, match=r"module 'rabbitry\.topology' has no attribute 'nope'"
    ):
        _ = rabbitry.topology.nope  # type: ignore[attr-defined]


def test_dir_lists_the_names_not_yet_loaded() -> None:
    assert set(rabbitry.__all__) <= set(dir(rabbitry))
