"""The collector pause around large bounded work restores the collector whatever happens."""

from __future__ import annotations

import gc

import pytest

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
