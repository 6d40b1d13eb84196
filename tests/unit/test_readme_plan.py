"""The README's example says what ``rabbitry plan`` prints for its spec on a fresh broker."""

from __future__ import annotations

import re
from pathlib import Path

from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.patterns.expand import expand
from rabbitry.topology.primitives import Topology
from rabbitry.topology.spec.loader import load_spec_text

README = Path(__file__).parents[2] / "README.md"


def test_the_readme_plan_summary_is_what_its_spec_plans_on_a_fresh_broker() -> None:
    text = README.read_text()
    spec_text = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert spec_text is not None
    spec = load_spec_text(spec_text[1], "README.md")
    fresh = BrokerState(
        topology=Topology(name=spec.name, vhosts=()), record=OwnershipRecord(spec.name, {})
    )
    summary = plan(expand(spec), fresh).summary()
    shown = re.search(r"^Plan: .*$", text, re.M)
    assert shown is not None
    assert shown[0] == summary, "the README's plan summary differs from what the spec plans"
