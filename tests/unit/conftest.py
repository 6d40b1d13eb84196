"""Fixtures unit tests in several folders share."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    """A CLI runner in an empty folder and home, with no broker named by the environment."""
    for name in ("RABBITRY_URL", "RABBITRY_MANAGEMENT_URL", "RABBITMQ_URL", "RABBITRY_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no dev broker record to find
    monkeypatch.setenv("HOME", str(tmp_path))
    return CliRunner()
