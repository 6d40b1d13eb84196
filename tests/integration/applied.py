"""A module's spec applied once into a vhost of the module's own, handed to each test empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Broker


def applied_vhost_fixtures(spec: str) -> tuple[Any, Any]:
    """The fixtures ``applied_once`` (module scope: ``spec`` applied into ``module_vhost``) and
    ``applied`` (that vhost for one test), for a module to bind under those names."""

    @pytest.fixture(scope="module")
    def applied_once(module_vhost: Any, tmp_path_factory: pytest.TempPathFactory) -> Broker:
        return Broker(module_vhost, tmp_path_factory.mktemp("applied")).apply(spec)

    @pytest.fixture
    def applied(applied_once: Broker, tmp_path: Path) -> Broker:
        """The module's applied vhost, every queue empty and unconsumed: no test of a module
        using this changes an object, so one ``apply`` serves them all."""
        return applied_once.for_next_test(tmp_path)

    return applied_once, applied
