"""Hypothesis profiles: ``dev`` (the default: few examples, so plain ``pytest`` stays fast) and
``ci`` (Hypothesis's 100 examples, and each test's own larger count), chosen by
``HYPOTHESIS_PROFILE``, else ``ci`` when ``CI`` is set. tests/conftest.py loads the profile.

A test that asks for a count of its own writes ``max_examples=examples(400)``: 400 in CI, the
same share of the dev profile's count locally.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hypothesis import settings

CI = "ci"
DEV = "dev"
CI_EXAMPLES = 100
DEV_EXAMPLES = 10

# No deadline in either: tests share two cores with pytest-xdist workers and brokers, and a
# slow example there says nothing about the code.
settings.register_profile(CI, max_examples=CI_EXAMPLES, deadline=None, print_blob=True)
settings.register_profile(DEV, max_examples=DEV_EXAMPLES, deadline=None)


def chosen_profile(environ: Mapping[str, str]) -> str:
    named = environ.get("HYPOTHESIS_PROFILE", "").strip()
    if named:
        return named
    return CI if environ.get("CI", "").strip() else DEV


def load_profile(environ: Mapping[str, str] = os.environ) -> str:
    name = chosen_profile(environ)
    settings.load_profile(name)
    return name


def examples(ci_count: int) -> int:
    """``ci_count`` scaled to the loaded profile (``ci_count`` itself under ``ci``)."""
    return max(1, ci_count * settings().max_examples // CI_EXAMPLES)
