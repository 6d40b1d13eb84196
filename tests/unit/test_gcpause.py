"""The collector pause around large bounded work restores the collector whatever happens."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.gcpause import collector_paused, pauses_collector


def test_the_collector_is_paused_inside_and_back_after_even_on_error() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "an inner block leaves the outer pause alone"
    assert gc.isenabled()

    @pauses_collector
    def fails() -> None:
        assert not gc.isenabled()
        raise ValueError("boom")

    with pytest.raises(ValueError):
        fails()
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_validate_stores_the_worker_view_with_the_collector_paused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, json_flag: list[str]
) -> None:
    # at 50,000 objects the view's allocations set the collector walking the loaded spec
    import rabbitry.consumer.view

    seen: list[bool] = []
    monkeypatch.setattr(rabbitry.consumer.view, "remember", lambda *_: seen.append(gc.isenabled()))
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nname: s\nvhosts:\n  - name: v\n    queues: [{name: q}]\n")
    result = CliRunner().invoke(cli, ["validate", str(spec), *json_flag])
    assert result.exit_code == 0, result.output
    assert seen == [False]
    assert gc.isenabled()
