"""``rabbitry validate``, ``render``, ``schema`` and ``graph``: the verbs that need no broker.

What only one verb uses (the YAML writer, the graph, the JSON Schema, Graphviz) is imported by
that verb: ``validate`` is the one run most, from editors and pre-commit hooks."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from rabbitry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    command,
    diagnostic_json,
    json_option,
    parse_vars,
    problem_json,
    spec_options,
)
from rabbitry.cli.document_options import (
    checked_spec,
    checked_spec_options,
    format_option,
    output_option,
    print_warning,
    write_document,
)
from rabbitry.errors import RabbitryError, SpecError, SpecProblem
from rabbitry.gcpause import collector_paused
from rabbitry.provisioner.target import load_spec_or_definitions
from rabbitry.topology import check_spec, expand
from rabbitry.topology.primitives import Topology
from rabbitry.topology.spec.loader import render_spec_file
from rabbitry.topology.spec.model import Spec
from rabbitry.uri import mask_text

_PASSWORD_VALUE = re.compile(r"""(\bpassword\s*:[ \t]*)("[^"\n]*"|'[^'\n]*'|[^\s,}#][^,}#\n]*)""")


def mask_passwords(text: str) -> str:
    """``password: s3cret`` -> ``password: "***"`` in rendered YAML (block and flow style)."""
    return _PASSWORD_VALUE.sub(lambda m: f'{m[1]}"***"', text)


def _plural(count: int, noun: str) -> str:
    if count == 1:
        return f"1 {noun}"
    return f"{count} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"


def counted(topology: Topology) -> dict[str, int]:
    """What the spec declares after expansion, by kind (``{"vhost": 1, "exchange": 3, ...}``)."""
    return dict((noun, n) for n, noun in _counts(topology))


def _counts(topology: Topology) -> list[tuple[int, str]]:
    return [
        (len(topology.vhosts), "vhost"),
        (sum(len(v.exchanges) for v in topology.vhosts), "exchange"),
        (sum(len(v.queues) for v in topology.vhosts), "queue"),
        (sum(len(v.bindings) for v in topology.vhosts), "binding"),
        (sum(len(v.policies) + len(v.operator_policies) for v in topology.vhosts), "policy"),
        (len(topology.users), "user"),
        (
            sum(len(v.parameters) for v in topology.vhosts) + len(topology.global_parameters),
            "parameter",
        ),
    ]


def summary(topology: Topology) -> str:
    """``1 vhost, 3 exchanges, 4 queues, ...``: what the spec declares, after expansion."""
    return ", ".join(_plural(n, noun) for n, noun in _counts(topology) if n or noun == "vhost")


def _validated(
    spec: Path,
    variables: tuple[str, ...],
    var_files: Sequence[Path],
    on_warning: Callable[[SpecProblem], None],
) -> Topology:
    """SPEC (or a definitions file) loaded, checked and expanded, its warnings to
    ``on_warning``; a spec's worker view is cached on the way (``consumer.view``)."""
    from rabbitry.consumer.view import remember

    # The worker view is stored inside the collector's pause too: at 50,000 objects its
    # allocations made the collector walk the whole loaded spec again and again (0.2 s).
    rendered: list[str] = []
    with collector_paused():
        loaded = load_spec_or_definitions(
            spec,
            parse_vars(variables),
            var_files,
            on_rendered=rendered.append,
            on_warning=on_warning,
        )
        check_spec(loaded, on_warning=on_warning)
        topology = expand(loaded)
        if rendered:  # a definitions file has no rendered text: no worker runs on it
            remember(rendered[0], loaded)
    return topology


@command()
@spec_options
@json_option
def validate(
    spec: Path, variables: tuple[str, ...], var_files: Sequence[Path], as_json: bool
) -> int:
    """Check SPEC (or a definitions file, .json) without a broker: template, YAML, shape and
    meaning.

    Warnings are printed and do not fail; any error exits 1 (a broker URL that does not parse
    is one, its password masked). With --json, one object on stdout lists every problem,
    warnings too, with its file, line, column and spec path (for editors and CI), valid or not
    (as `problems`, and as `diagnostics` like those of every command's errors). A valid spec's
    worker view is cached, so `rabbitry worker run` on the same spec starts without loading
    the spec model (docs/worker.md).
    """
    if not as_json:
        topology = _validated(spec, variables, var_files, print_warning)
        click.echo(f"{spec}: valid ({summary(topology)})")
        return EXIT_OK
    warnings: list[SpecProblem] = []
    try:
        topology = _validated(spec, variables, var_files, warnings.append)
    except SpecError as exc:
        problems, counts = [*warnings, *exc.problems], None
    else:
        problems, counts = warnings, counted(topology)
    valid = all(p.severity != "error" for p in problems)
    payload = {
        "format_version": 1,
        "spec": str(spec),
        "valid": valid,
        "counts": counts,
        "problems": [problem_json(p) for p in problems],
        "diagnostics": [diagnostic_json(p.diagnostic()) for p in problems],
    }
    click.echo(json.dumps(payload, indent=2))
    return EXIT_OK if valid else EXIT_ERROR


@command()
@spec_options
@format_option("yaml", "json", help="Output format.")
@click.option(
    "--template-only",
    is_flag=True,
    help="Print the spec after Jinja2 rendering, before parsing (passwords masked).",
)
def render(
    spec: Path,
    variables: tuple[str, ...],
    var_files: Sequence[Path],
    output_format: str,
    template_only: bool,
) -> None:
    """Print the topology SPEC expands to: every exchange, queue, binding and policy.

    Passwords are shown as ***. Validation errors exit 1 (warnings are printed to stderr).
    """
    from rabbitry.topology.document import plain_yaml, topology_data

    if template_only:
        text = render_spec_file(spec, parse_vars(variables), var_files)
        click.echo(mask_text(mask_passwords(text)), nl=False)
        return
    loaded = checked_spec(spec, variables, var_files)
    data = topology_data(expand(loaded))
    if output_format == "json":
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    else:
        text = plain_yaml(data)
    click.echo(mask_text(text), nl=False)


@command()
@click.option(
    "--plan",
    "of_plan",
    is_flag=True,
    help="The schema of `plan --json` output instead (docs/plan.schema.json).",
)
def schema(of_plan: bool) -> None:
    """Print the JSON Schema of the spec (point your editor's YAML support at it)."""
    if of_plan:
        from rabbitry.provisioner.plan_schema import plan_json_schema_text

        click.echo(plan_json_schema_text(), nl=False)
        return
    from rabbitry.topology.spec.schema import json_schema_text

    click.echo(json_schema_text(), nl=False)


@command()
@checked_spec_options
@format_option(
    "dot", "svg", "mermaid", help="Graphviz DOT, SVG (needs Graphviz's `dot`), or Mermaid."
)
@click.option(
    "--unfold",
    is_flag=True,
    help="Draw every delay level and super stream partition instead of one box each.",
)
@output_option
def graph(
    loaded: Spec,
    output_format: str,
    unfold: bool,
    output: Path | None,
) -> None:
    """Draw the topology SPEC expands to: bindings, dead-letter paths, retries, delays."""
    from rabbitry.topology.graph import to_dot, to_mermaid, topology_graph

    graphs = topology_graph(expand(loaded), loaded, fold=not unfold)
    if output_format == "mermaid":
        text = to_mermaid(graphs)
    else:
        text = to_dot(graphs)
        if output_format == "svg":
            text = _svg(text)
    write_document(text, output)


def _svg(dot_text: str) -> str:
    import shutil
    import subprocess

    dot = shutil.which("dot")
    if dot is None:
        raise RabbitryError(
            "--format svg needs Graphviz's `dot` (graph): install graphviz (Debian: apt-get"
            " install graphviz), or use --format dot or mermaid, which work without it"
        )
    done = subprocess.run(
        [dot, "-Tsvg"], input=dot_text, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RabbitryError(f"Graphviz's dot failed (graph --format svg): {done.stderr.strip()}")
    return done.stdout
