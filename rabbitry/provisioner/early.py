"""What a command starts before its spec loads: the broker reads a plan needs.

Loading a spec of 50,000 objects takes about a second, and the broker takes about as long to
list the objects of its vhost; started together, they overlap. The stack and the vhosts a plain
spec declares are read off its text (``guess_stack``, ``guess_vhosts``) before the heavy
modules are even imported, and the reads start then (``read_ahead.ReadAhead``). Guesses, never
checks: the loaded spec is what counts, and what was read for a wrong guess is simply not used.
Light on purpose: the HTTP client is imported only by ``early_client``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rabbitry.provisioner.names import stack_name

if TYPE_CHECKING:
    from rabbitry.management.client import ManagementClient

PLAN_READS = (
    "/overview",
    "/nodes",
    "/feature-flags",
    "/deprecated-features",
    "/vhosts",
    "/vhost-limits",
    "/user-limits",
    "/global-parameters",
)
"""What a plan reads before the vhosts' objects (the broker's capabilities, its vhosts, every
stack's ownership record)."""

# Lines are found by the line break before them, on the text with one put first: a pattern
# that starts with `^` is tried at every position of a 2.5 MB spec, one that starts with `\n`
# only after each line break (five to eight times faster).
_TOP_NAME = re.compile(
    r"\nname:[ \t]*(['\"]?)([A-Za-z0-9][A-Za-z0-9_.-]*)\1[ \t]*(?:#.*)?$", re.MULTILINE
)
_TOP_KEY = re.compile(r"\n(?:(name|broker)\b|---|\.\.\.)")
_TEMPLATE_MARKS = ("{{", "{%", "{#")
_VHOSTS_KEY = re.compile(r"\nvhosts:[ \t]*(?:#.*)?$", re.MULTILINE)
_NEXT_TOP_KEY = re.compile(r"\n[^\s#-]")
_FIRST_ITEM = re.compile(r"\n(?:[ \t]*(?:#.*)?\n)*( *)- ")


def _lines(text: str) -> str:
    """``text`` with a line break first, so that every line starts after one."""
    return "\n" + text


def guess_stack(text: str) -> str | None:
    """The stack a plain spec names on its top-level ``name:`` line, read off the text before
    it is parsed: a guess, never a check (the loaded spec is what counts). None for a
    templated spec, one naming its own broker, one without such a line, or any doubt."""
    if any(mark in text for mark in _TEMPLATE_MARKS):
        return None
    lines = _lines(text)
    keys = [m[1] for m in _TOP_KEY.finditer(lines)]
    if keys != ["name"]:  # no name, two, a broker of its own, or document markers
        return None
    found = _TOP_NAME.search(lines)
    return found[2] if found else None


def guess_vhosts(text: str) -> list[str]:
    """The names of the vhosts a plain spec lists under its top-level ``vhosts:``, read off
    the text: the ``name:`` keys in the list's items' own column (nested objects' names are
    further right). Empty when there is no such list or any doubt."""
    lines = _lines(text)
    key = _VHOSTS_KEY.search(lines)
    if key is None:
        return []
    first = _FIRST_ITEM.match(lines, key.end())
    if first is None:
        return []
    indent = first[1]
    after = _NEXT_TOP_KEY.search(lines, key.end())
    end = after.start() + 1 if after else len(lines)
    names = re.compile(
        rf"\n{indent}(?:- |  )name:[ \t]*(['\"]?)([^'\"\n#]+?)\1[ \t]*(?:#.*)?$", re.MULTILINE
    )
    # the search starts at the vhosts key's line break, which the first item's may be
    return [m[2] for m in names.finditer(lines, key.end(), end)]


DEFINITIONS_SECTIONS = (
    "users",
    "vhosts",
    "permissions",
    "topic_permissions",
    "parameters",
    "global_parameters",
    "policies",
    "queues",
    "exchanges",
    "bindings",
)
"""The lists of objects a RabbitMQ definitions file holds."""

DEFINITIONS_KEYS = frozenset(
    {"rabbit_version", "rabbitmq_version", "product_version", *DEFINITIONS_SECTIONS}
)
"""Top-level keys of a RabbitMQ definitions file; a spec has ``version:`` instead."""

_definitions: tuple[tuple[str, int, int], dict[str, Any]] | None = None
"""The last definitions file read (path, mtime, size) and its document: the early claim of an
apply and the spec's load read the same file once."""


def definitions_in(path: Path) -> dict[str, Any] | None:
    """The document of ``path`` when it is a RabbitMQ definitions file (a ``.json`` file with
    the keys of one and no spec ``version``), else None: then it is read as a spec."""
    global _definitions
    if path.suffix.lower() != ".json" or not path.is_file():
        return None
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if _definitions is not None and _definitions[0] == key:
        return _definitions[1]
    from rabbitry.provisioner.strict_json import loads
    from rabbitry.topology.spec.loader import read_spec  # its size limit and errors

    try:
        # strict for a spec written as JSON too: what JSON cannot carry, a key written twice
        # and nesting past the limit are SpecErrors here, before anything reads the broker
        data = loads(read_spec(path), str(path))
    except ValueError:
        return None  # not JSON: the spec loader says what is wrong with it
    if isinstance(data, dict) and "version" not in data and DEFINITIONS_KEYS.intersection(data):
        from rabbitry.provisioner.definitions_check import check_definitions

        # every entry checked before an apply claims its lock: a refused file changes nothing
        check_definitions(data, str(path))
        _definitions = (key, data)
        return data
    return None


def guess(path: Path) -> tuple[str, list[str]] | None:
    """The stack and vhosts of the spec at ``path``, before it loads: read off a plain spec's
    text, or a definitions file's (the stack named after the file, as its spec is); None for
    anything else, or an unreadable file (the loader says what is wrong)."""
    try:
        data = definitions_in(path)
        if data is not None:
            vhosts = data.get("vhosts") or []
            names = [str(v["name"]) for v in vhosts if isinstance(v, dict) and "name" in v]
            return stack_name(path.stem, "imported"), names
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeError, TypeError):
        return None
    stack = guess_stack(text)
    return None if stack is None else (stack, guess_vhosts(text))


def early_client(
    path: Path,
    *,
    url: str | None = None,
    management_url: str | None = None,
    ca_file: str | None = None,
    insecure: bool | None = None,
) -> tuple[ManagementClient, str, list[str]] | None:
    """A management client for the spec at ``path``, with the stack and vhosts ``guess`` reads
    off it; None when nothing can be guessed, or no broker can be named yet (a bad URL is
    said once the spec is loaded)."""
    guessed = guess(Path(path))
    if guessed is None:
        return None
    from rabbitry.errors import BrokerError
    from rabbitry.management.endpoints import resolve_endpoints

    try:
        endpoints = resolve_endpoints(url, management_url, ca_file=ca_file, insecure=insecure)
    except BrokerError:
        return None
    return endpoints.management(), *guessed


__all__ = [
    "PLAN_READS",
    "definitions_in",
    "early_client",
    "guess",
    "guess_stack",
    "guess_vhosts",
    "stack_name",
]
