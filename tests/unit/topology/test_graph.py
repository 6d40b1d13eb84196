"""The topology picture: folded delay levels, dead-letter and worker paths, valid renderings."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.topology import expand, load_spec
from rabbitry.topology.graph import to_dot, to_mermaid, topology_graph

EXAMPLE = Path(__file__).parents[3] / "examples" / "delays.yaml"


def graph(fold: bool = True):  # type: ignore[no-untyped-def]
    spec = load_spec(EXAMPLE)
    return topology_graph(expand(spec), spec, fold=fold)[0]


def test_delay_levels_fold_into_one_box_each() -> None:
    folded, unfolded = graph(), graph(fold=False)
    boxes = [n.label for n in folded.nodes.values() if n.kind == "delay"]
    assert sorted(boxes) == ["delay: 22 levels, 1000 ms x 2^k", "fixed: 18 fixed levels"]
    # 22 binary levels (exchange + queue each) and 18 fixed queues + their entry exchange,
    # and each delay's layout mark, become 2 boxes.
    assert len(unfolded.nodes) - len(folded.nodes) == 22 * 2 + 18 + 1 + 2 - 2
    assert not any(n.kind == "delay" for n in unfolded.nodes.values())


def test_dead_letter_retry_and_parking_paths_are_drawn() -> None:
    edges = {(e.source, e.target, e.label, e.style) for e in graph().edges}
    assert ("queue:orders.work", "queue:orders.work.retry.1s", "retry 1s", "worker") in edges
    assert ("queue:orders.work.retry.1s", "queue:orders.work", "expired", "dead-letter") in edges
    assert ("queue:orders.work", "queue:orders.work.parking", "dead-letter", "dead-letter") in edges
    assert ("queue:orders.work", "queue:orders.work.parking", "park", "worker") in edges
    assert (
        "exchange:delay.deliver",
        "exchange:delay.unroutable",
        "unroutable",
        "alternate",
    ) in edges
    assert ("delay:delay", "exchange:delay.deliver", "", "dead-letter") in edges
    assert ("queue:emails.send", "delay:delay", "retry", "worker") in edges


def test_renderings_name_every_node() -> None:
    g = graph()
    dot, mermaid = to_dot([g]), to_mermaid([g])
    for node in g.nodes.values():
        assert node.label in dot and node.label in mermaid
    assert mermaid.startswith("flowchart LR") and dot.startswith("digraph rabbitry {")


def test_cli_svg_uses_graphviz_or_says_how_to_get_it(tmp_path: Path) -> None:
    out = tmp_path / "g.svg"
    result = CliRunner().invoke(cli, ["graph", str(EXAMPLE), "--format", "svg", "-o", str(out)])
    if shutil.which("dot"):
        assert result.exit_code == 0, result.output
        assert "<svg" in out.read_text()
        check = subprocess.run(
            ["dot", "-Tcanon"], input=to_dot([graph()]), text=True, capture_output=True, check=False
        )
        assert check.returncode == 0, check.stderr
    else:
        assert result.exit_code == 1 and "apt-get install graphviz" in result.output


def test_a_super_stream_is_one_box_until_unfolded() -> None:
    spec = load_spec(Path(__file__).parents[3] / "examples" / "broker.yaml")
    folded, unfolded = (topology_graph(expand(spec), spec, fold=f)[0] for f in (True, False))
    boxes = [n for n in folded.nodes.values() if n.kind == "super-stream"]
    assert [n.label for n in boxes] == ["events: super stream, 3 partitions"]
    names = {n.label for n in folded.nodes.values()}
    assert not names & {"events", "events-0", "events-1", "events-2"}
    assert not any(e.source == e.target for e in folded.edges), "its own bindings fold away"
    assert {"events", "events-0", "events-1", "events-2"} <= {
        n.label for n in unfolded.nodes.values()
    }
    assert not any(n.kind == "super-stream" for n in unfolded.nodes.values())
    dot, mermaid = to_dot([folded]), to_mermaid([folded])
    assert "events: super stream, 3 partitions" in dot and "peripheries=2" in dot
    assert '{{"events: super stream, 3 partitions"}}' in mermaid
