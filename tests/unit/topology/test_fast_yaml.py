"""The fast YAML path gives what the marked loader gives, or steps aside for it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.errors import SpecError
from rabbitry.topology import load_spec
from rabbitry.topology.spec import fast_yaml
from rabbitry.topology.spec.limits import SpecLimits
from rabbitry.topology.spec.source_map import YamlText, load_marked_yaml
from tests.profiles import examples

pytestmark = pytest.mark.skipif(not fast_yaml.available(), reason="needs rabbitry[fast]")


@pytest.fixture(autouse=True)
def every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_yaml, "FAST_FROM", 0)


def json_reading(text: str, limits: SpecLimits | None = None) -> Any:
    """What the JSON reading alone makes of ``text`` (None: it leaves the text to the walker)."""
    tree = fast_yaml._tree(text)
    return None if tree is None else fast_yaml._json_reading(tree, text, limits or SpecLimits())


def both(text: str) -> tuple[tuple[Any, bool], Any]:
    """The fast path's reading and the marked loader's; where the JSON reading vouches for the
    text on its own, it must agree with the marked loader too."""
    fast = fast_yaml.load_plain(text, SpecLimits())
    try:
        marked: Any = load_marked_yaml(YamlText(text, None)).data
    except (yaml.YAMLError, SpecError) as exc:
        marked = exc
    vouched = json_reading(text)
    if vouched is not None:
        assert not isinstance(marked, Exception), (text, vouched, marked)
        assert same(vouched, marked), (text, vouched, marked)
    return fast, marked


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to itself and types compared (1 is not True)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


TRICKY = [
    "yes", "No", "on", "OFF", "y", "n", "~", "null", "Null", "true", "False", "1", "-1", "+2",
    "010", "0o7", "0x1f", "0b101", "1_000", "1e3", "1.5e-3", ".5", "-.inf", ".NaN", "1:30",
    "12:30:45", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "1.2.3", "a b", "a#b", "x-y",
    "-c", "?x", ":x", "a:b", "é", "日本", "q.0", "ex.#", "amq.topic", "#/", "0", "00", "-0",
    "1_0.5", "+.inf", "0.", "=x", "<<x",
]  # fmt: skip


@pytest.mark.parametrize("scalar", TRICKY)
def test_plain_scalars_read_as_pyyaml_reads_them(scalar: str) -> None:
    text = f"k: {scalar}\nlist:\n  - {scalar}\nflow: [{scalar}, {{n: {scalar}}}]\n"
    (data, plain), marked = both(text)
    if isinstance(marked, Exception):
        assert not plain
    else:
        assert plain, text
        assert same(data, marked), (data, marked)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), names,
    st.sampled_from(TRICKY),
)  # fmt: skip
documents = st.dictionaries(
    names,
    st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(names, inner, max_size=4),
        max_leaves=20,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=examples(300), deadline=None)
@given(documents, st.sampled_from([False, True, None]), st.integers(20, 120))
def test_dumped_documents_read_the_same_on_both_paths(
    data: dict[str, Any], flow: bool | None, width: int
) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, width=width, allow_unicode=True)
    (fast, plain), marked = both(text)
    assert not isinstance(marked, Exception)
    if plain:
        assert same(fast, marked), (text, fast, marked)


def test_a_spec_as_rabbitry_writes_it_takes_the_fast_path() -> None:
    queues = "".join(f"      - {{name: q.{i}, type: quorum, durable: yes}}\n" for i in range(50))
    text = f"version: 1\nname: s\nvhosts:\n  - name: v\n    queues:\n{queues}"
    (data, plain), marked = both(text)
    assert plain
    assert same(data, marked)
    assert data["vhosts"][0]["queues"][3] == {"name": "q.3", "type": "quorum", "durable": True}


@pytest.mark.parametrize("scalar", TRICKY)
def test_a_quoted_scalar_reads_as_a_string_on_the_json_reading(scalar: str) -> None:
    text = f"k: '{scalar}'\nlist:\n  - \"{scalar}\"\nflow: ['{scalar}', {{n: '{scalar}'}}]\n"
    (data, plain), marked = both(text)
    assert plain and same(data, marked)
    assert data["k"] == scalar and data["flow"][1] == {"n": scalar}


number_like = st.text(alphabet="0123456789.+-_:eExXoObBnaNAifIFtTy ", min_size=1, max_size=8)


@pytest.mark.parametrize("scalar", ["nan", "inf", "-inf", ".NaN", ".Inf", "-.INF", ".nan"])
def test_nan_and_inf_in_any_spelling_read_as_pyyaml_reads_them(scalar: str) -> None:
    # rapidyaml's JSON writes all of them as ".nan" / ".inf": the text's spelling is lost there
    text = f"k: {scalar}\nlist: [{scalar}, x]\n"
    (data, _plain), marked = both(text)
    assert same(data, marked), (text, data, marked)


@settings(max_examples=examples(500), deadline=None)
@given(number_like, st.booleans())
def test_number_like_scalars_read_as_pyyaml_reads_them_on_every_path(
    scalar: str, quoted: bool
) -> None:
    value = f"'{scalar}'" if quoted else scalar
    text = f"k: {value}\nlist: [{value}, x]\nm:\n  - {value}\n  - {{a: {value}}}\n"
    (data, plain), marked = both(text)
    if isinstance(marked, Exception):
        assert not plain
    elif plain:
        assert same(data, marked), (text, data, marked)


def spec_like(queues: int = 300) -> str:
    """A spec as people write one: comments, quoted routing keys, numbers, flags, policies."""
    lines = [
        "# the broker of the shop",
        "version: 1",
        "name: shop",
        "vhosts:",
        "  - name: shop  # production",
        "    queues:",
    ]
    for i in range(queues):
        lines.append(f"      - {{name: q.{i}, type: quorum, durable: true, delivery_limit: 10}}")
        lines.append(f"      - name: audit.{i}")
        lines.append("        arguments: {x-message-ttl: 60000, x-max-length: 1000}")
    lines.append("    bindings:")
    for i in range(queues):
        lines.append(f"      - {{source: ex, destination: q.{i}, routing_key: '#'}}")
        lines.append(f'      - {{source: ex, destination: audit.{i}, routing_key: "a.*.#"}}')
    lines += [
        "    policies:",
        "      - name: cap",
        "        pattern: '^audit\\.'",
        "        definition: {max-length: 100000, ha-mode: exactly, ha-params: 2}",
        "    retry: {jitter: 0.1, multiplier: 2.0}",
    ]
    return "\n".join(lines) + "\n"


def test_a_spec_as_people_write_it_is_read_from_json_and_the_same() -> None:
    text = spec_like()
    vouched = json_reading(text)
    assert vouched is not None, "the faster reading must take a spec with nothing odd in it"
    assert same(vouched, load_marked_yaml(YamlText(text, None)).data)
    assert vouched["vhosts"][0]["bindings"][0]["routing_key"] == "#"
    assert vouched["vhosts"][0]["retry"] == {"jitter": 0.1, "multiplier": 2.0}


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (("durable: true", "durable: yes"), "a plain yes is true, a quoted one a string"),
        (("routing_key: '#'", "routing_key: 'yes'", 1), "the same text both quoted and plain"),
        (("x-message-ttl: 60000", "x-message-ttl: 60_000"), "1_000 is a number to PyYAML"),
        (("jitter: 0.1", "jitter: -.1"), "-.1 is a string to PyYAML, -0.1 in JSON"),
        (("jitter: 0.1", "jitter: 1e-3"), "1e-3 is a string to PyYAML"),
        (("jitter: 0.1", "jitter: .NaN"), "JSON writes .NaN as .nan"),
        (("max-length: 100000", "max-length: 100000, max-length: 5"), "a duplicate key"),
        (("name: cap", "name: &n cap"), "an anchor"),
    ],
)
def test_what_json_cannot_tell_apart_is_left_to_the_walker(edit: tuple[Any, ...], why: str) -> None:
    text = spec_like(20).replace(*edit)
    if "yes" in text and "'yes'" in text:
        text = text.replace("durable: true", "durable: yes", 1)
    assert json_reading(text) is None, why
    (data, plain), marked = both(text)  # the walker's reading, or the marked loader's
    if isinstance(marked, Exception):
        assert not plain
    elif plain:
        assert same(data, marked)


@pytest.mark.parametrize(
    "value", ["yes", "010", "~", "*x", "&x b", "!!str 1", "#x", "'#'", '"yes"', "1.5", "a"]
)
def test_a_value_right_after_a_quoted_keys_colon_reads_as_pyyaml_reads_it(value: str) -> None:
    # in a flow mapping, a JSON-like key's colon needs no space after it
    for text in (f"b: 'yes'\nc: '#'\na: {{\"k\":{value}}}\n", f'a: ["x",{value}]\n'):
        (data, plain), marked = both(text)
        if isinstance(marked, Exception):
            assert not plain
        elif plain:
            assert same(data, marked), (text, data, marked)


def test_the_json_reading_holds_the_limits() -> None:
    text = spec_like(20)
    assert json_reading(text) is not None
    assert json_reading(text, SpecLimits(max_values=50)) is None
    assert json_reading(text, SpecLimits(max_depth=3)) is None


@pytest.mark.parametrize(
    "text",
    [
        "a: &x {b: 1}\nc: *x\n",  # anchors and aliases
        "base: &b {x: 1}\nc:\n  <<: *b\n",  # merge keys
        "a: !!str 5\n",  # tags
        "a: !!python/object [1]\n",
        "a: 1\na: 2\n",  # a duplicate key: a problem with its line
        "1: a\n",  # a key that is not a string
        "yes: a\n",
        "a: b\x1b\n",  # a character YAML does not allow
        "---\na: 1\n---\nb: 2\n",  # two documents
        "a: [1, 2\n",  # syntax errors
        "a: @x\n",
        "a: `x\n",
        "}: 1\n",
        "a:\n\t- b\n",  # tabs
        "a: |\n  text\n",  # block scalars
        "a: 1",  # no final newline
        "- a\n",  # not a mapping
        "%YAML 1.1\n---\na: 1\n",
        "a: b\r\nc: d\r\n",
    ],
)
def test_anything_beyond_plain_yaml_goes_to_the_marked_loader(text: str) -> None:
    assert fast_yaml.load_plain(text, SpecLimits()) == (None, False)


def test_past_the_limits_goes_to_the_marked_loader_which_says_so() -> None:
    text = "a:\n" + "".join(f"  - {i}\n" for i in range(100))
    assert fast_yaml.load_plain(text, SpecLimits(max_values=50)) == (None, False)
    deep = "a: " + "[" * 20 + "]" * 20 + "\n"
    assert fast_yaml.load_plain(deep, SpecLimits(max_depth=10)) == (None, False)


def test_a_syntax_error_prints_nothing_of_the_parser_and_is_reported_with_its_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nname: s\nvhosts:\n  - name: v\n    queues: [a, b\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    assert ":6:" in str(caught.value) or ":5:" in str(caught.value)
    assert capfd.readouterr().err == ""


def big_spec(bad_line_queue: int | None = None, queues: int = 3000) -> str:
    lines = ["version: 1", "name: big", "vhosts:", "  - name: v", "    queues:"]
    for i in range(queues):
        kind = "quorm" if i == bad_line_queue else "quorum"
        lines.append(f"      - {{name: q.{i}, type: {kind}}}")
    lines += ["    bindings:", "      - {source: nowhere, destination: q.1}"]
    return "\n".join(lines) + "\n"


def test_problems_of_a_spec_read_on_the_fast_path_point_at_their_lines(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(big_spec(bad_line_queue=2000))
    with pytest.raises(SpecError) as shape:
        load_spec(spec)
    assert f"{spec}:2006:" in str(shape.value)  # the queue's line, found after the fact

    from rabbitry.topology import check_spec

    spec.write_text(big_spec())
    loaded = load_spec(spec)
    assert loaded.source is not None and loaded.source.fill is not None, "fast path, no marks"
    with pytest.raises(SpecError) as meaning:
        check_spec(loaded)
    assert f"{spec}:3007:" in str(meaning.value)  # the binding to an undeclared exchange


def test_problems_of_a_large_rendered_template_on_the_fast_path_point_at_its_template_lines(
    tmp_path: Path,
) -> None:
    """The loop renders 3,000 lines from one: a problem after it is on the template's line 12,
    not on the rendered text's line 3009."""
    spec = tmp_path / "big.yaml"
    spec.write_text(
        'version: 1\nname: big\nvhosts:\n  - name: "/"\n    queues:\n'
        "{% for i in range(3000) %}\n"
        "      - {name: q.{{ i }}, type: classic}\n"
        "{% endfor %}\n"
        "    exchanges:\n      - {name: x, type: topic}\n"
        "    bindings:\n      - {source: nowhere, destination: q.1}\n"
    )
    from rabbitry.topology import check_spec

    loaded = load_spec(spec, environ={})
    assert loaded.source is not None and loaded.source.fill is not None, "fast path, no marks"
    with pytest.raises(SpecError) as meaning:
        check_spec(loaded)
    assert f"{spec}:12:" in str(meaning.value)  # the binding to an undeclared exchange


def test_without_the_fast_extra_every_spec_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fast_yaml, "ryml", None)
    spec = tmp_path / "big.yaml"
    spec.write_text(big_spec())
    loaded = load_spec(spec)
    assert loaded.source is not None and loaded.source.fill is None, "the marked loader"
    assert len(loaded.vhosts[0].queues) == 3000


def test_a_large_specs_names_are_read_before_it_is_built_and_parsed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = big_spec().replace(
        "  - name: v\n", "  - name: v\n    exchanges: []\n  - name: 'w 2'\n", 1
    )
    assert fast_yaml.peek_names(text) == ("big", ["v", "w 2"])
    parses = []
    parse = fast_yaml.ryml.parse_in_arena
    monkeypatch.setattr(
        fast_yaml.ryml, "parse_in_arena", lambda data: parses.append(1) or parse(data)
    )
    spec = tmp_path / "big.yaml"
    spec.write_text(text)
    seen: list[tuple[str, list[str]] | None] = []
    loaded = load_spec(
        spec, on_rendered=lambda rendered: seen.append(fast_yaml.peek_names(rendered))
    )
    assert seen == [("big", ["v", "w 2"])] and [v.name for v in loaded.vhosts] == ["v", "w 2"]
    assert parses == [1], "the tree the names were read from is the one loaded"
    assert fast_yaml._parsed is None, "nothing kept once loaded"

    # a spec that names its broker is read ahead only once loaded; text that is not plain
    # YAML, or not a mapping, gives no guess
    assert fast_yaml.peek_names("broker: {url: 'amqp://h'}\n" + text) is None
    assert fast_yaml.peek_names("- a\n- b\n") is None
    assert fast_yaml.peek_names("a: &x s\nname: *x\n") is None
    assert fast_yaml.peek_names("version: 1\n") == ("default", [])
