"""JSON input read as the broker reads it: numbers JSON cannot carry, keys written twice and
nesting past the limit are errors naming where, never a silent reading."""

from __future__ import annotations

import json

import pytest

from rabbitry.errors import SpecError
from rabbitry.provisioner.strict_json import loads
from rabbitry.topology.spec.limits import SpecLimits


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1.5e999"])
def test_a_number_json_cannot_carry_is_an_error_naming_its_path(literal: str) -> None:
    text = '{"queues": [{"name": "q", "arguments": {"x-message-ttl": LITERAL}}]}'
    text = text.replace("LITERAL", literal)
    with pytest.raises(SpecError) as caught:
        loads(text, "defs.json")
    text = str(caught.value)
    assert f"defs.json: queues[0].arguments.x-message-ttl: {literal} " in text, text
    assert "finite number" in text


def test_a_key_written_twice_is_an_error_naming_the_key_and_its_place() -> None:
    text = (
        '{"queues": [{"name": "a"}, {"name": "q", "arguments":'
        ' {"x-queue-type": "quorum", "x-queue-type": "classic"}}], "vhosts": [], "vhosts": []}'
    )
    with pytest.raises(SpecError) as caught:
        loads(text, "defs.json")
    problems = [str(p) for p in caught.value.problems]
    assert any(
        p.startswith("defs.json: queues[1].arguments.x-queue-type: the key 'x-queue-type' is")
        for p in problems
    ), problems
    assert any(
        p.startswith("defs.json: vhosts: the key 'vhosts' is written twice") for p in problems
    )


def test_every_place_is_named_at_once() -> None:
    text = '{"a": NaN, "b": [Infinity, {"c": 1, "c": 2}]}'
    with pytest.raises(SpecError) as caught:
        loads(text)
    assert sorted(p.path for p in caught.value.problems) == ["a", "b[0]", "b[1].c"]


@pytest.mark.parametrize("depth", [101, 5000])
def test_nesting_past_the_limit_is_a_clear_error_not_a_recursion_error(depth: int) -> None:
    text = '{"x": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(SpecError) as caught:
        loads(text, "deep.json")
    text = str(caught.value)
    assert "deep.json: the document is nested deeper than 100 levels" in text
    assert "RABBITRY_SPEC_MAX_DEPTH" in text


def test_the_depth_limit_is_the_specs_and_can_be_raised() -> None:
    text = '{"x": ' + "[" * 150 + "]" * 150 + "}"
    assert isinstance(loads(text, limits=SpecLimits(max_depth=200))["x"], list)
    with pytest.raises(SpecError):
        loads(text, limits=SpecLimits(max_depth=150))


def test_plain_json_reads_as_json_does() -> None:
    document = {
        "vhosts": [{"name": "/", "limits": {"max-queues": 10}}],
        "queues": [{"name": "q", "arguments": {"x-message-ttl": 1.5, "big": 10**30}}],
        "flags": [True, False, None, "NaN"],
    }
    assert loads(json.dumps(document)) == document


def test_text_that_is_not_json_raises_the_parsers_own_error() -> None:
    with pytest.raises(ValueError):
        loads("version: 1\nname: s\n")
