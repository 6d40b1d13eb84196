"""The stack name an apply claims the lock of before its spec loads: a guess that never guesses
wrong for a plain spec, and gives up on anything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rabbitry.provisioner.early import definitions_in, guess, guess_stack, guess_vhosts


@pytest.mark.parametrize(
    ("text", "stack"),
    [
        ("version: 1\nname: shop\nvhosts:\n  - name: orders\n", "shop"),
        ("name: 'a.b-c_1'  # the stack\nversion: 1\n", "a.b-c_1"),
        ('name: "orders"\n', "orders"),
        ("vhosts:\n- name: v\nname: late\n", "late"),  # nested names are indented
    ],
)
def test_a_plain_spec_names_its_stack(text: str, stack: str) -> None:
    assert guess_stack(text) == stack


@pytest.mark.parametrize(
    "text",
    [
        "version: 1\nvhosts: []\n",  # the default stack: claimed once loaded
        'name: "{{ vars.stack }}"\n',  # templated
        "name: shop\n{% if x %}\n{% endif %}\n",
        "name: shop\nbroker: {url: 'amqp://elsewhere'}\n",  # its own broker
        "---\nname: shop\n",  # document markers
        "name: one\nname: two\n",
        "name: two words\n",
        "name: a}\n",
        '{"version": 1, "name": "shop"}\n',  # flow style
    ],
)
def test_anything_else_is_not_guessed(text: str) -> None:
    assert guess_stack(text) is None


@pytest.mark.parametrize(
    ("text", "vhosts"),
    [
        (
            "name: s\nvhosts:\n  - name: a\n    queues:\n      - name: q\n  - name: 'b'\n",
            ["a", "b"],
        ),
        # lists in their key's column; the vhost's name after its other keys; users after
        (
            'name: s\nvhosts:\n- queues:\n  - name: q\n  name: a  # the shop\n- name: "b c"\n'
            "users:\n- name: app\n",
            ["a", "b c"],
        ),
        ("name: s\nvhosts:  # none yet\n\n  # one day\n  - name: later\n", ["later"]),
        ("name: s\nvhosts: []\n", []),
        ("name: s\n", []),
    ],
)
def test_the_vhosts_of_a_plain_spec_are_read_off_its_text(text: str, vhosts: list[str]) -> None:
    assert guess_vhosts(text) == vhosts


def test_a_definitions_file_names_its_stack_after_the_file(tmp_path: Path) -> None:
    definitions = tmp_path / "prod defs.json"
    definitions.write_text(json.dumps({"rabbit_version": "3.13.7", "vhosts": [{"name": "shop"}]}))
    assert guess(definitions) == ("prod-defs", ["shop"])
    assert definitions_in(definitions) is definitions_in(definitions), "read once"
    spec = tmp_path / "spec.json"  # a spec written as JSON is a spec
    spec.write_text(json.dumps({"version": 1, "name": "s", "vhosts": [{"name": "v"}]}))
    assert definitions_in(spec) is None
    assert guess(tmp_path / "missing.json") is None
