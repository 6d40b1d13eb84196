"""block_yaml: libyaml's output with lists moved under their keys is the Python emitter's text."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rabbitry.topology import emit
from rabbitry.topology.emit import block_yaml
from tests.profiles import examples


def python_emitter(data: Any) -> str:
    return yaml.dump(data, Dumper=emit._IndentedDumper, **emit._options())


def documents(text: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    special = ["yes", "no", "null", "~", "*", "- a", "a: b", "#x", "0o7", "1e3", "", " ", "a\nb"]
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        text,
        st.sampled_from(special),
    )
    keys = st.one_of(text, st.sampled_from(["a", "- k", "k:", "", "x" * 130]))
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=30,
    )
    return st.dictionaries(keys, values, max_size=5)


ascii_text = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=12)


@settings(max_examples=examples(400), deadline=None)
@given(documents(ascii_text))
def test_the_c_emitter_path_writes_what_the_python_emitter_writes(doc: dict[str, Any]) -> None:
    assert block_yaml(doc) == python_emitter(doc)


@settings(max_examples=examples(200), deadline=None)
@given(
    documents(
        st.text(
            st.characters(exclude_characters="\r\x85\u2028\u2029", exclude_categories=("Cs",)),
            max_size=12,
        )
    )
)
def test_any_text_reads_back_as_written(doc: dict[str, Any]) -> None:
    """Beyond ASCII the emitters may escape differently (libyaml escapes characters outside
    the BMP, for one), never with another meaning. Line breaks other than LF are left out:
    such text goes to PyYAML's own emitter, which does not read them back; so are lone
    surrogates, which no file can hold (UTF-8 cannot encode them)."""
    assert yaml.safe_load(block_yaml(doc)) == doc


def test_a_spec_shaped_document_takes_the_c_emitter_path(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {
        "version": 1,
        "name": "shop",
        "vhosts": [
            {
                "name": "/",
                "queues": [{"name": "q", "arguments": {"x": [1, [2, {"y": ["z"]}]]}}],
                "exchanges": [],
                "bindings": [{"source": "e", "destination": "q", "routing_key": "a.*"}],
            }
        ],
    }
    calls: list[str] = []
    real = emit._indent_lists
    monkeypatch.setattr(emit, "_indent_lists", lambda text: calls.append(text) or real(text))
    text = block_yaml(doc)
    assert calls, "the C emitter was not used"
    assert "queues:\n      - name: q\n" in text
    assert text == python_emitter(doc)
    assert yaml.safe_load(text) == doc


def test_line_breaks_and_long_keys_take_the_python_emitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(emit, "_indent_lists", lambda text: pytest.fail("C emitter used"))
    for doc in ({"a": ["x\ny"]}, {"k" * 128: [1]}, {"a": {"b\u2028": 1}}):
        assert block_yaml(doc) == python_emitter(doc)
