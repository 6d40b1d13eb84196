"""A Target hands its expanded topology to a command and lets the spec model go, so a plan of
50,000 objects does not hold the models and the broker's answers at once."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from rabbitry.provisioner.target import target_of

SHOP = Path(__file__).parents[3] / "examples" / "shop.yaml"


def test_topology_alone_keeps_the_topology_and_frees_the_spec_model() -> None:
    gc.disable()  # plan and apply run with the collector paused: references alone must free it
    try:
        _check_release()
    finally:
        gc.enable()


def _check_release() -> None:
    target = target_of(SHOP, management_url="http://127.0.0.1:1")
    spec = weakref.ref(target.spec)
    expected = target.topology
    topology = target.topology_alone()
    assert topology is expected and topology.vhosts
    assert spec() is None, "the spec model is still referenced after topology_alone()"
    with pytest.raises(RuntimeError, match="released"):
        _ = target.spec
    assert target.topology is topology
    assert "127.0.0.1:1" in repr(target)
