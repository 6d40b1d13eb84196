"""Loading: templates, YAML, the model, and every problem pointing at the right file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rabbitry.errors import SpecError
from rabbitry.topology import load_spec, load_spec_text, render_template
from rabbitry.topology.spec.source_map import format_path, parse_path

from .conftest import load, load_problems, one_problem

TYPO_ON_LINE_7 = """\
version: 1
name: shop
vhosts:
  - name: shop
    queues:
      - name: orders
        durabel: true
"""


def test_unknown_key_reports_path_line_column_and_suggestion() -> None:
    problem = one_problem(TYPO_ON_LINE_7)
    assert problem.path == "vhosts[0].queues[0].durabel"
    assert (problem.file, problem.line, problem.column) == ("spec.yaml", 7, 9)
    assert problem.message == "unknown key 'durabel' (did you mean 'durable'?)"
    assert str(problem) == (
        "spec.yaml:7:9: vhosts[0].queues[0].durabel: unknown key 'durabel' (did you mean "
        "'durable'?)"
    )


def test_unknown_key_without_close_match_lists_valid_keys() -> None:
    problem = one_problem("version: 1\nzzz: 1\n")
    assert "expected one of: version, name, broker, users" in problem.message


# A vhost whose first queue is ``a`` (lines 1-5); each case below goes on from line 6.
QUEUE_A = "version: 1\nvhosts:\n  - name: v\n    queues:\n      - name: a\n"


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        pytest.param(
            "        type: quorom\n"
            "      - name: b\n"
            "        auto_delete: maybe\n"
            "    exchanges:\n"
            "      - name: e\n"
            "        type: topik\n",
            [
                (6, "vhosts[0].queues[0].type", "did you mean 'quorum'"),
                (8, "vhosts[0].queues[1].auto_delete", "expected true or false, got 'maybe'"),
                (11, "vhosts[0].exchanges[0].type", "did you mean 'topic'"),
            ],
            id="all model errors, in file order",
        ),
        pytest.param(
            "        durable: true\n        durable: false\n        name: b\n",
            [
                (
                    7,
                    "vhosts[0].queues[0].durable",
                    "duplicate key 'durable' (first defined on line 6)",
                ),
                (8, "vhosts[0].queues[0].name", "duplicate key 'name'"),
            ],
            id="duplicate YAML keys are errors with both lines",
        ),
    ],
)
def test_every_problem_is_reported_at_its_line(
    rest: str, expected: list[tuple[int, str, str]]
) -> None:
    problems = load_problems(QUEUE_A + rest)
    assert [(p.line, p.path) for p in problems] == [(line, path) for line, path, _ in expected]
    for problem, (_, _, message) in zip(problems, expected, strict=True):
        assert message in problem.message


# (a spec, and its one problem: path, line, what the message says)
ONE_PROBLEM = [
    pytest.param(
        "version: 1\nvhost: []\n", "vhost", 2, "did you mean 'vhosts'", id="unknown top key"
    ),
    pytest.param(
        "version: 1\nvhosts:\n  - name: v\n    bindings:\n      - source: x\n",
        "vhosts[0].bindings[0]",
        5,
        "missing required key 'destination'",
        id="a missing key points at the mapping that lacks it",
    ),
    pytest.param("name: x\n", "", 1, "missing required key 'version'", id="no version"),
    pytest.param("version: 2\n", "version", 1, "expected 1, got 2", id="wrong version"),
    pytest.param(
        "version: 1\nvhosts:\n",
        "vhosts",
        2,
        "expected a list (write [] for none), got nothing (null)",
        id="list expected, null found",
    ),
    pytest.param(
        "version: 1\nvhosts:\n  - shop\n",
        "vhosts[0]",
        3,
        "expected a mapping of keys to values, got 'shop'",
        id="mapping expected",
    ),
    pytest.param(
        "version: 1\nname: my stack\n", "name", 2, "does not match", id="invalid stack name"
    ),
]


@pytest.mark.parametrize(("text", "path", "line", "says"), ONE_PROBLEM)
def test_a_spec_with_one_problem_names_its_path_and_line(
    text: str, path: str, line: int, says: str
) -> None:
    problem = one_problem(text)
    assert (problem.path, problem.line) == (path, line)
    assert says in problem.message


def test_yaml_merge_keys_are_not_duplicates() -> None:
    spec = load(
        """\
        version: 1
        vhosts:
          - name: v
            queues:
              - &defaults
                name: a
                durable: false
              - <<: *defaults
                name: b
        """
    )
    assert [(q.name, q.durable) for q in spec.vhosts[0].queues] == [("a", False), ("b", False)]


def test_yaml_syntax_error_has_line() -> None:
    problem = one_problem("version: 1\nvhosts:\n  - name: [unclosed\n")
    assert problem.message.startswith("invalid YAML:")
    assert problem.file == "spec.yaml"
    assert problem.line is not None and problem.line >= 3


def test_empty_and_non_mapping_documents() -> None:
    assert one_problem("").message.startswith("the spec is empty")
    assert one_problem("- a\n").message.startswith("a spec is a mapping")


def test_jinja_strict_undefined_names_the_variable_and_line() -> None:
    problem = one_problem("version: 1\nname: shop\nvhosts:\n  - name: '{{ vhost_name }}'\n")
    assert problem.line == 4
    assert problem.file == "spec.yaml"
    assert "'vhost_name' is undefined" in problem.message


def test_missing_environment_variable_is_named() -> None:
    problem = one_problem(
        "version: 1\nusers:\n  - name: app\n    password: '{{ env.APP_PASSWORD }}'\n"
    )
    assert problem.line == 4
    assert problem.message.startswith("environment variable 'APP_PASSWORD' is not set")
    assert "default(" in problem.message


def test_missing_template_variable_is_named() -> None:
    problem = one_problem("version: 1\nname: '{{ vars.stack }}'\n")
    assert problem.message.startswith("template variable 'stack' is not defined")
    assert "--var stack=" in problem.message


def test_environment_and_default() -> None:
    text = "version: 1\nusers:\n  - name: app\n    password: \"{{ env.PW | default('x') }}\"\n"
    assert load(text, environ={"PW": "s3cret"}).users[0].password is not None
    user = load(text).users[0]
    assert user.password is not None and user.password.get_secret_value() == "x"
    secret = load(text, environ={"PW": "s3cret"}).users[0]
    assert "s3cret" not in repr(secret)


def test_template_syntax_error_has_line() -> None:
    problem = one_problem("version: 1\n\n{% if %}\n")
    assert problem.message.startswith("template syntax error")
    assert problem.line == 3


def test_template_runtime_error_has_line() -> None:
    problem = one_problem("version: 1\n\nname: '{{ 1 + \"a\" }}'\n")
    assert problem.message.startswith("template error")
    assert problem.line == 3


def test_vars_from_files_then_pairs(tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    first.write_text("vhost: from-a\nstack: a\n")
    second = tmp_path / "b.yaml"
    second.write_text("stack: b\n")
    text = "version: 1\nname: '{{ stack }}'\nvhosts:\n  - name: '{{ vars.vhost }}'\n"
    spec = load(text, var_files=[first, second])
    assert (spec.name, spec.vhosts[0].name) == ("b", "from-a")
    spec = load(text, var_files=[first, second], variables={"vhost": "cli"})
    assert spec.vhosts[0].name == "cli"


def test_bad_var_file(tmp_path: Path) -> None:
    bad = tmp_path / "vars.yaml"
    bad.write_text("a: [\n")
    problem = one_problem("version: 1\n", var_files=[bad])
    assert problem.file == str(bad)
    assert problem.message.startswith("invalid YAML in var file")
    bad.write_text("- a\n")
    assert one_problem("version: 1\n", var_files=[bad]).message.startswith("a var file must")


def test_loops_map_errors_to_the_template_line() -> None:
    text = (
        "version: 1\n"
        "vhosts:\n"
        "  - name: v\n"
        "    queues:\n"
        "{% for n in ['a', 'b', 'c'] %}\n"
        "      - name: q-{{ n }}\n"
        "        arguments: {x-message-ttl: 1s}\n"
        "{% endfor %}\n"
        "      - name: last\n"
        "        durabel: true\n"
    )
    problem = one_problem(text)
    assert problem.path == "vhosts[0].queues[3].durabel"
    assert (problem.line, problem.column) == (10, 9)
    typo_in_loop = text.replace("x-message-ttl", "x-message-tll")
    problems = load_problems(typo_in_loop)
    assert [p.line for p in problems] == [7, 7, 7, 10]
    assert problems[0].path == "vhosts[0].queues[0].arguments.x-message-tll"


def test_substitution_keeps_columns() -> None:
    problem = one_problem(
        "version: 1\nvhosts:\n  - name: '{{ vars.v | default(\"v\") }}'\n    x: 1\n"
    )
    assert (problem.line, problem.column) == (4, 5)


def test_load_spec_from_file_and_include(tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text("      - name: included\n")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "version: 1\nvhosts:\n  - name: v\n    queues:\n{% include 'queues.yaml' %}\n"
    )
    spec = load_spec(spec_file, environ={})
    assert spec.vhosts[0].queues[0].name == "included"
    assert spec.source is not None and spec.source.file == str(spec_file)


def test_unreadable_spec(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "missing.yaml")
    assert info.value.problems[0].message.startswith("cannot read spec")


def test_render_template_is_exposed() -> None:
    assert render_template("a: {{ x }}\n", variables={"x": "1"}, environ={}) == "a: 1\n"
    assert render_template("{% if true %}\nb: 2\n{% endif %}\n", environ={}) == "b: 2\n"


def test_numbers_are_accepted_as_names() -> None:
    spec = load("version: 1\nvhosts:\n  - name: 2024\n    queues: [{name: 7}]\n")
    assert spec.vhosts[0].name == "2024"
    assert spec.vhosts[0].queues[0].name == "7"


def test_secret_values_are_not_echoed() -> None:
    problem = one_problem("version: 1\nbroker: {url: {node: amqp://u:pw@h}}\n")
    assert "pw" not in problem.message


def test_broker_url_may_list_the_nodes_of_a_cluster() -> None:
    spec = load_spec_text(
        "version: 1\nbroker:\n  url: [amqp://u:pw@a, amqp://u:pw@b]\n  node_order: in-order\n",
        environ={},
    )
    assert spec.broker is not None
    assert spec.broker.urls == "amqp://u:pw@a,amqp://u:pw@b"
    assert spec.broker.node_order == "in-order"
    assert "pw" not in repr(spec.broker)


def test_an_empty_list_of_broker_urls_is_a_problem() -> None:
    problem = one_problem("version: 1\nbroker: {url: []}\n")
    assert "empty list of URLs" in problem.message


def test_load_spec_text_without_template_variables() -> None:
    spec = load_spec_text("version: 1\n", environ={})
    assert spec.name == "default"


@pytest.mark.parametrize(
    "loc",
    [
        ("vhosts", 0, "queues", 3, "arguments", "x-message-ttl"),
        ("users", 1, "name"),
        ("vhosts", 0, "queues", 0, "unchecked_arguments", "weird key.with dots"),
        ("vhosts", 0, "queues", 0, "unchecked_arguments", 'quote"d'),
    ],
)
def test_paths_format_and_parse_back(loc: tuple[str | int, ...]) -> None:
    assert parse_path(format_path(loc)) == loc


def test_path_format() -> None:
    loc = ("vhosts", 0, "queues", 3, "arguments", "x-message-ttl")
    assert format_path(loc) == "vhosts[0].queues[3].arguments.x-message-ttl"


def test_problems_in_included_files_name_that_file(tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text("      - name: a\n      - name: b\n        durabel: 1\n")
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(
        "version: 1\nvhosts:\n  - name: v\n    queues:\n{% include 'queues.yaml' %}\n"
        "    exchanges: [{name: e, typo: 1}]\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec_file, environ={})
    included, main = info.value.problems
    assert (included.file, included.line, included.column) == (
        str(tmp_path / "queues.yaml"),
        3,
        9,
    )
    assert included.path == "vhosts[0].queues[1].durabel"
    assert (main.file, main.line) == (str(spec_file), 6)


def test_missing_include_is_reported() -> None:
    problem = one_problem("version: 1\n{% include 'nope.yaml' %}\n")
    assert problem.message == "template not found: nope.yaml"


def test_lines_map_by_similarity_when_output_depends_on_its_own_text() -> None:
    # A captured block measured with |length differs once marked, so the map falls back to
    # comparing texts; the typo is still found on its own line.
    text = (
        "{% set block %}abc{% endset %}\n"
        "version: {{ block | length - 2 }}\n"
        "vhosts:\n"
        "  - name: v\n"
        "    typo: 1\n"
    )
    problem = one_problem(text)
    assert (problem.path, problem.line) == ("vhosts[0].typo", 5)


def test_line_map_from_diff_handles_loops() -> None:
    from rabbitry.topology.spec.line_map import LineMap

    source = "a: 1\n{% for i in x %}\n- item: {{ i }}\n  other: {{ i }}\n{% endfor %}\nz: 2\n"
    rendered = "a: 1\n- item: 1\n  other: 1\n- item: 2\n  other: 2\nz: 2\n"
    lines = LineMap.from_diff("f", source, rendered)
    assert [lines.translate(i, 0).line for i in range(6)] == [1, 3, 4, 3, 4, 6]
