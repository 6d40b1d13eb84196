"""``xdist_group`` made to work again under pytest 9.

pytest-xdist's ``--dist loadgroup`` sends a group's tests to one worker by the node id each
worker reports: ``path::test@group``. pytest-xdist 3.8 writes that suffix into
``item._nodeid``, which pytest 9 no longer reads (a node id is ``item._id`` now), so no group
reached the controller and every group's tests were spread over the workers: a Spark session,
the TLS brokers and a three-node cluster on each worker that ran one of their tests, and the
modules that keep their tests together in file order (``test_testing_plugin``) split.
"""

from __future__ import annotations

import pytest
from _pytest.nodeid import coerce_node_id


def add_group_suffixes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker under ``--dist loadgroup``: ``@<group>`` after the node id of each
    test marked ``xdist_group`` (as pytest-xdist does), where pytest-xdist's own did not take."""
    if not getattr(config.option, "loadgroup", False):  # set on workers under loadgroup only
        return
    for item in items:
        groups = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if not groups or item.nodeid.rfind("@") > item.nodeid.rfind("]"):
            continue
        item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(sorted(groups))}")  # type: ignore[attr-defined]


__all__ = ["add_group_suffixes"]
