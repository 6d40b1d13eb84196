"""A picture of a topology: exchanges, queues, bindings, dead-letter and retry paths.

``topology_graph`` builds a small graph model (pure); ``to_dot`` and ``to_mermaid`` render it.
The levels of a delay are folded into one box by default (28 exchanges and 28 queues say less
than "delay: 1s x 2^0..27"), and so is a super stream (its exchange and partition streams);
the paths a worker takes (retry tiers, parking) are drawn dotted, since the broker does not
route them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from rabbitry.policies.delay import BinaryDelays
from rabbitry.topology.patterns.delays import delay_scheme
from rabbitry.topology.patterns.retries import queue_retry
from rabbitry.topology.patterns.retry_setup import duration_label
from rabbitry.topology.primitives import DestinationType, Topology, Vhost
from rabbitry.topology.spec.model import Spec, VhostSpec


@dataclass(frozen=True)
class Node:
    id: str
    label: str
    kind: str
    """``exchange``, ``queue``, ``delay`` (folded levels) or ``super-stream`` (its exchange and
    partitions, folded)."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    label: str = ""
    style: str = "binding"
    """``binding``, ``dead-letter``, ``alternate`` or ``worker``."""


@dataclass
class Graph:
    """One vhost's picture."""

    vhost: str
    nodes: dict[str, Node] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)

    def add_edge(self, edge: Edge) -> None:
        if edge.source != edge.target and edge not in self.edges:
            self.edges.append(edge)


def _short_key(key: str, limit: int = 24) -> str:
    # Binary delay keys are long runs of "*." : show them as counts.
    key = re.sub(r"(\*\.){3,}", lambda m: f"*x{len(m.group(0)) // 2}.", key)
    return key if len(key) <= limit else key[: limit - 1] + "…"


def _folds(spec: VhostSpec) -> dict[str, tuple[str, str, str]]:
    """Object name -> (box id, box label, box kind) for every delay level and every part of a
    super stream (its exchange and partition streams)."""
    out: dict[str, tuple[str, str, str]] = {}
    for delay in spec.delays:
        scheme = delay_scheme(delay)
        box = f"delay:{delay.name}"
        if isinstance(scheme, BinaryDelays):
            label = f"{delay.name}: {scheme.levels} levels, {scheme.unit_ms} ms x 2^k"
            names = [q for k in range(scheme.levels) for q in scheme.level_queues(k)]
        else:
            label = f"{delay.name}: {len(scheme.levels_ms)} fixed levels"
            names = [scheme.level_queue(i) for i in range(len(scheme.levels_ms))]
            names.append(scheme.entry_exchange)
        names.append(scheme.layout_exchange)  # a binary delay's entry: part of the box
        for name in names:
            out[name] = (box, label, "delay")
    for stream in spec.super_streams:
        keys = stream.keys()
        box = f"super-stream:{stream.name}"
        label = f"{stream.name}: super stream, {len(keys)} partitions"
        for name in [stream.name, *(f"{stream.name}-{key}" for key in keys)]:
            out[name] = (box, label, "super-stream")
    return out


def vhost_graph(vhost: Vhost, spec: VhostSpec | None = None, fold: bool = True) -> Graph:
    graph = Graph(vhost.name)
    folds = _folds(spec) if spec is not None and fold else {}

    def node_id(kind: str, name: str) -> str:
        if name in folds:
            return folds[name][0]
        return f"{kind}:{name}"

    def add_node(kind: str, name: str) -> str:
        ident = node_id(kind, name)
        if ident not in graph.nodes:
            if name in folds:
                _, label, box_kind = folds[name]
                graph.nodes[ident] = Node(ident, label, box_kind)
            else:
                graph.nodes[ident] = Node(ident, name or "(default exchange)", kind)
        return ident

    for exchange in vhost.exchanges:
        add_node("exchange", exchange.name)
    for queue in vhost.queues:
        add_node("queue", queue.name)
    for exchange in vhost.exchanges:
        alternate = exchange.arguments.get("alternate-exchange")
        if isinstance(alternate, str):
            graph.add_edge(
                Edge(
                    add_node("exchange", exchange.name),
                    add_node("exchange", alternate),
                    "unroutable",
                    "alternate",
                )
            )
    for binding in vhost.bindings:
        kind = "queue" if binding.destination_type is DestinationType.QUEUE else "exchange"
        source = add_node("exchange", binding.source)
        target = add_node(kind, binding.destination)
        # Inside a folded delay the binding keys are bit patterns: not worth a label.
        label = "" if source.startswith("delay:") else _short_key(binding.routing_key)
        graph.add_edge(Edge(source, target, label))
    for queue in vhost.queues:
        dlx = queue.arguments.get("x-dead-letter-exchange")
        if not isinstance(dlx, str):
            continue
        dl_key = queue.arguments.get("x-dead-letter-routing-key")
        source = add_node("queue", queue.name)
        if dlx == "" and isinstance(dl_key, str):
            # Through the default exchange: straight to the queue of that name.
            target = add_node("queue", dl_key)
        else:
            target = add_node("exchange", dlx)
        label = "expired" if "x-message-ttl" in queue.arguments else "dead-letter"
        graph.add_edge(
            Edge(source, target, "" if source.startswith("delay:") else label, "dead-letter")
        )

    if spec is not None:
        for queue_spec in spec.queues:
            retry = queue_retry(spec, queue_spec)
            if retry is None:
                continue
            work = add_node("queue", queue_spec.name)
            for delay_ms, tier in retry.tier_queues.items():
                graph.add_edge(
                    Edge(
                        work, add_node("queue", tier), f"retry {duration_label(delay_ms)}", "worker"
                    )
                )
            if retry.delay is not None:
                entry = (
                    retry.delay.level_exchange(0)
                    if isinstance(retry.delay, BinaryDelays)
                    else retry.delay.entry_exchange
                )
                graph.add_edge(Edge(work, add_node("exchange", entry), "retry", "worker"))
            graph.add_edge(Edge(work, add_node("queue", retry.parking_queue), "park", "worker"))
    return graph


def topology_graph(topology: Topology, spec: Spec | None = None, fold: bool = True) -> list[Graph]:
    specs = {v.name: v for v in spec.vhosts} if spec is not None else {}
    return [vhost_graph(v, specs.get(v.name), fold) for v in topology.vhosts]


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


DOT_NODE = {
    "exchange": 'shape=box, style="rounded,filled", fillcolor="#e8f0fe"',
    "queue": 'shape=cylinder, style=filled, fillcolor="#fef7e0"',
    "delay": 'shape=box3d, style=filled, fillcolor="#e6f4ea"',
    "super-stream": 'shape=cylinder, peripheries=2, style=filled, fillcolor="#fce8e6"',
}
DOT_EDGE = {
    "binding": "",
    "dead-letter": 'style=dashed, color="#c5221f"',
    "alternate": 'style=dotted, color="#5f6368"',
    "worker": 'style=dotted, color="#1a73e8"',
}


def to_dot(graphs: Iterable[Graph]) -> str:
    lines = [
        "digraph rabbitry {",
        "  rankdir=LR;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for index, graph in enumerate(graphs):
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f"    label={_dot_id('vhost ' + graph.vhost)};")
        for node in graph.nodes.values():
            ident = _dot_id(f"{index}/{node.id}")
            lines.append(f"    {ident} [label={_dot_id(node.label)}, {DOT_NODE[node.kind]}];")
        for edge in graph.edges:
            attrs = [f"label={_dot_id(edge.label)}"] if edge.label else []
            if DOT_EDGE[edge.style]:
                attrs.append(DOT_EDGE[edge.style])
            lines.append(
                f"    {_dot_id(f'{index}/{edge.source}')} -> {_dot_id(f'{index}/{edge.target}')}"
                + (f" [{', '.join(attrs)}]" if attrs else "")
                + ";"
            )
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_label(text: str) -> str:
    return text.replace('"', "#quot;")


MERMAID_ARROW = {"binding": "-->", "dead-letter": "-.->", "alternate": "-.->", "worker": "-.->"}


def to_mermaid(graphs: Iterable[Graph]) -> str:
    lines = ["flowchart LR"]
    ids: dict[tuple[int, str], str] = {}
    for index, graph in enumerate(graphs):
        lines.append(f'  subgraph v{index}["vhost {_mermaid_label(graph.vhost)}"]')
        for node in graph.nodes.values():
            ident = ids.setdefault((index, node.id), f"n{len(ids)}")
            label = _mermaid_label(node.label)
            shape = {
                "exchange": f'(["{label}"])',
                "queue": f'[("{label}")]',
                "delay": f'[["{label}"]]',
                "super-stream": f'{{{{"{label}"}}}}',
            }
            lines.append(f"    {ident}{shape[node.kind]}")
        for edge in graph.edges:
            arrow = MERMAID_ARROW[edge.style]
            label = f"|{_mermaid_label(edge.label)}|" if edge.label else ""
            lines.append(
                f"    {ids[(index, edge.source)]} {arrow}{label} {ids[(index, edge.target)]}"
            )
        lines.append("  end")
    return "\n".join(lines) + "\n"
