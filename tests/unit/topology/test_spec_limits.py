"""Hostile specs end quickly with an error that names the limit: YAML bombs, deep nesting,
template loops and string bombs, oversized files, characters and tags a spec cannot hold, names
the broker or its management API cannot serve."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.errors import SpecError
from rabbitry.topology import load_spec
from rabbitry.topology.spec.limits import SpecLimits
from tests.profiles import examples

HEAD = "version: 1\nname: hostile\n"


def alias_bomb(levels: int = 9) -> str:
    text = HEAD + 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for level in range(1, levels + 1):
        text += f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]\n"
    return text


def refused(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> tuple[str, float]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    started = time.perf_counter()
    with pytest.raises(SpecError) as caught:
        load_spec(spec, environ=environ)
    return str(caught.value), time.perf_counter() - started


def test_a_yaml_alias_bomb_stops_at_the_values_limit(tmp_path: Path) -> None:
    message, took = refused(tmp_path, alias_bomb())
    assert "number of YAML values" in message and "RABBITRY_SPEC_MAX_VALUES" in message
    assert took < 10


def test_the_values_limit_is_raised_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RABBITRY_SPEC_MAX_VALUES", "50")
    many = HEAD + "vhosts:\n" + "".join(f"  - name: v{i}\n" for i in range(30))
    message, _ = refused(tmp_path, many)
    assert "past the limit of 50" in message
    monkeypatch.setenv("RABBITRY_SPEC_MAX_VALUES", "500")
    (tmp_path / "ok.yaml").write_text(many)
    assert len(load_spec(tmp_path / "ok.yaml").vhosts) == 30


@pytest.mark.parametrize("depth", [150, 600, 5000])
def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path, depth: int) -> None:
    flow = HEAD + "x: " + "[" * depth + "]" * depth + "\n"
    message, took = refused(tmp_path, flow)
    assert "nesting" in message and took < 10
    if depth < 1000:  # deeper still, libyaml's own limit stops it first, as a YAML error
        assert "RABBITRY_SPEC_MAX_DEPTH" in message
    block = HEAD + "x:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, min(depth, 600)))
    assert "nesting" in refused(tmp_path, block)[0]


def test_an_oversized_spec_is_refused_before_it_is_read(tmp_path: Path) -> None:
    message, _ = refused(
        tmp_path, HEAD + "# " + "x" * 2000 + "\n", {"RABBITRY_SPEC_MAX_BYTES": "1000"}
    )
    assert "spec's size would be 2," in message and "RABBITRY_SPEC_MAX_BYTES" in message


def test_a_template_that_renders_too_much_text_is_refused(tmp_path: Path) -> None:
    loop = HEAD + "{% for i in range(100000) %}# {{ 'x' * 80 }}\n{% endfor %}"
    message, _ = refused(tmp_path, loop, {"RABBITRY_SPEC_MAX_BYTES": "100000"})
    assert "rendered spec's size" in message


@pytest.mark.parametrize(
    "expression",
    [
        "'a' * 10**10",
        "[1] * 10**9",
        "'a' | center(10**9)",
        "'a'.ljust(10**9)",
        "('a' * 1000000) | replace('', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb')",
        "2 ** 10000000",
    ],
)
def test_a_template_expression_that_would_build_a_huge_value_is_refused(
    tmp_path: Path, expression: str
) -> None:
    message, took = refused(tmp_path, HEAD + "# {{ " + expression + " }}\n")
    assert "RABBITRY_SPEC_MAX_STRING" in message and ":3:" in message, message
    assert took < 2


def test_a_template_loop_that_runs_too_long_is_stopped(tmp_path: Path) -> None:
    nested = (
        HEAD + "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}\n"
    )
    message, took = refused(tmp_path, nested, {"RABBITRY_SPEC_MAX_RENDER_SECONDS": "1"})
    assert "did not finish rendering within 1 s" in message
    assert "RABBITRY_SPEC_MAX_RENDER_SECONDS" in message and took < 5


def test_a_bad_limit_setting_is_an_error_naming_it() -> None:
    with pytest.raises(SpecError, match="RABBITRY_SPEC_MAX_DEPTH='deep' is not a number"):
        SpecLimits.from_environment({"RABBITRY_SPEC_MAX_DEPTH": "deep"})
    with pytest.raises(SpecError, match="must be above 0"):
        SpecLimits.from_environment({"RABBITRY_SPEC_MAX_RENDER_SECONDS": "0"})


@pytest.mark.parametrize(
    ("character", "name"), [("\x0c", "form feed"), ("\x1b", "escape"), ("\x00", "NUL")]
)
def test_a_control_character_in_the_text_is_a_yaml_error_with_its_position(
    tmp_path: Path, character: str, name: str
) -> None:
    message, _ = refused(tmp_path, HEAD.replace("hostile", f"host{character}ile"))
    assert f"({name}) is not allowed" in message and "spec.yaml:2:" in message


@pytest.mark.parametrize(
    "tagged",
    [
        "vhosts: !!python/object:os.system [a]",
        "vhosts: !!python/tuple []",
        "x: !!python/object/apply:os.system {args: [id]}",
        "x: !!set {a: null}",
    ],
)
def test_tags_beyond_plain_yaml_are_refused(tmp_path: Path, tagged: str) -> None:
    message, _ = refused(tmp_path, HEAD + tagged + "\n")
    assert "is not allowed" in message or "could not determine a constructor" in message


def test_names_are_counted_in_bytes_and_must_be_printable(tmp_path: Path) -> None:
    spec = HEAD + (
        "vhosts:\n"
        "  - name: v\n"
        "    queues:\n"
        f"      - name: {'é' * 128}\n"  # 128 characters, 256 bytes
        f"      - name: {'é' * 127}\n"  # 254 bytes: fine
        '      - name: "tab\\there"\n'
    )
    message, _ = refused(tmp_path, spec)
    assert "vhosts[0].queues[0].name: a name is at most 255 bytes in UTF-8" in message
    assert "this one is 256" in message
    assert "queues[1]" not in message
    assert "vhosts[0].queues[2].name: control character U+0009" in message


def test_a_vhost_name_the_management_api_cannot_export_is_refused(tmp_path: Path) -> None:
    message, _ = refused(tmp_path, HEAD + "vhosts:\n  - name: café\n")
    assert "vhost name must be ASCII" in message


def test_generated_names_past_255_bytes_are_refused(tmp_path: Path) -> None:
    long = "q" * 250
    spec = HEAD + (
        f"vhosts:\n  - name: v\n    queues:\n      - name: {long}\n"
        "        retry: {attempts: 2, backoff: [1s]}\n"
    )
    from rabbitry.topology import check_spec

    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    with pytest.raises(SpecError, match=r"the patterns name a queue .* of 2[56][0-9] bytes"):
        check_spec(load_spec(path))


def test_repr_of_a_loaded_spec_and_its_topology_shows_no_password(tmp_path: Path) -> None:
    from rabbitry.topology import expand

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        HEAD
        + "broker: {url: 'amqp://admin:Br0ker-pw@h/'}\n"
        + "users: [{name: app, password: Us3r-pw}]\n"
        + "vhosts:\n  - name: v\n    parameters:\n"
        + "      - {component: shovel, name: s, value: {src-uri: 'amqp://u:Sh0vel-pw@h',"
        + " src-queue: a, dest-uri: 'amqp://u:Sh0vel-pw@h', dest-queue: b}}\n"
        + "    federation:\n      upstreams: [{name: dc1, uri: 'amqp://f:Fed-pw@dc1'}]\n"
    )
    loaded = load_spec(spec)
    shown = repr(loaded) + str(loaded) + repr(expand(loaded))
    for secret in ("Br0ker-pw", "Us3r-pw", "Sh0vel-pw", "Fed-pw"):
        assert secret not in shown
    assert "amqp://admin:***@h/" in shown


@given(
    st.text(st.characters(codec="ascii", categories=("L", "N", "P", "S")), min_size=1, max_size=12)
)
@settings(max_examples=examples(400), deadline=None)
def test_scalars_read_as_plain_yaml_reads_them(scalar: str) -> None:
    import yaml

    from rabbitry.topology.spec.source_map import YamlText, load_marked_yaml

    if scalar[0] in "!&*|>%@`#{[\"'?:-,]}":
        return  # a YAML indicator: not a plain scalar
    text = f"value: {scalar}\n"
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        return  # not a plain scalar at all
    assert load_marked_yaml(YamlText(text, None)).data == expected


def test_plain_yaml_is_not_compiled_as_a_template_and_still_has_its_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rabbitry.topology.spec import sandbox

    compiled: list[str] = []
    original = sandbox._LimitedEnvironment.get_template

    def counting(self: object, name: str, *args: object, **kwargs: object) -> object:
        compiled.append(name)
        return original(self, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sandbox._LimitedEnvironment, "get_template", counting)
    plain = tmp_path / "plain.yaml"
    plain.write_text(HEAD + "vhosts: []\n")
    load_spec(plain)
    assert compiled == []
    templated = tmp_path / "templated.yaml"
    templated.write_text(HEAD + "vhosts: {{ [] }}\n")
    load_spec(templated)
    assert compiled, "a template is rendered"
    # the size limit holds for text that renders to itself too (a spec given as text)
    from rabbitry.topology.spec.loader import load_spec_text

    with pytest.raises(SpecError, match="RABBITRY_SPEC_MAX_BYTES"):
        load_spec_text(HEAD + "# " + "x" * 2000 + "\n", environ={"RABBITRY_SPEC_MAX_BYTES": "1000"})
