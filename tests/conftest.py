"""Settings every test gets: the Hypothesis profile (tests/profiles.py), worker views (``rabbitry.consumer.view``) are cached in a directory
of the test session, never in the user's cache, and ``App.views`` (which ``worker run``'s
``load_app`` turns on) is put back after each test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.profiles import load_profile
from tests.xdist_groups import add_group_suffixes

HYPOTHESIS_PROFILE = load_profile()


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own, which pytest 9 ignores
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    add_group_suffixes(config, items)


def pytest_report_header() -> str:
    return f"hypothesis profile: {HYPOTHESIS_PROFILE} (HYPOTHESIS_PROFILE, or ci when CI is set)"


@pytest.fixture(scope="session")
def worker_view_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rabbitry-cache")


@pytest.fixture(autouse=True)
def _isolated_worker_views(
    worker_view_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    monkeypatch.setenv("RABBITRY_CACHE_DIR", str(worker_view_cache))
    app = sys.modules.get("rabbitry.consumer.app")  # not imported here: tests count imports
    views = app.App.views if app is not None else False
    yield
    app = sys.modules.get("rabbitry.consumer.app")
    if app is not None:
        app.App.views = views
