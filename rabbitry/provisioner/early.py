"""What a command starts before its spec loads: the broker reads a plan needs.

Loading a spec of 50,000 objects takes about a second, and the broker takes about as long to
list the objects of its vhost; started together, they overlap. The stack and the vhosts a plain
spec declares are read off its text (``guess_stack``, ``guess_vhosts``) before the heavy
modules are even imported, and the reads start then (``read_early``). Guesses, never checks:
the loaded spec is what counts, and what was read for a wrong guess is simply not used. Light
on purpose: the HTTP client is imported only by ``read_early``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rabbitry.provisioner.management import ManagementClient

PLAN_READS = (
    "/overview",
    "/nodes",
    "/feature-flags",
    "/vhosts",
    "/vhost-limits",
    "/user-limits",
    "/global-parameters",
)
"""What a plan reads before the vhosts' objects (the broker's capabilities, its vhosts, every
stack's ownership record)."""

_TOP_NAME = re.compile(
    r"^name:[ \t]*(['\"]?)([A-Za-z0-9][A-Za-z0-9_.-]*)\1[ \t]*(?:#.*)?$", re.MULTILINE
)
_TOP_KEY = re.compile(r"^(?:(name|broker)\b|---|\.\.\.)", re.MULTILINE)
_TEMPLATE = re.compile(r"\{[{%#]")
_VHOSTS_KEY = re.compile(r"^vhosts:[ \t]*(?:#.*)?$", re.MULTILINE)
_NEXT_TOP_KEY = re.compile(r"^[^\s#-]", re.MULTILINE)
_FIRST_ITEM = re.compile(r"\n(?:[ \t]*(?:#.*)?\n)*( *)- ")


def guess_stack(text: str) -> str | None:
    """The stack a plain spec names on its top-level ``name:`` line, read off the text before
    it is parsed: a guess, never a check (the loaded spec is what counts). None for a
    templated spec, one naming its own broker, one without such a line, or any doubt."""
    if _TEMPLATE.search(text):
        return None
    keys = [m[1] for m in _TOP_KEY.finditer(text)]
    if keys != ["name"]:  # no name, two, a broker of its own, or document markers
        return None
    found = _TOP_NAME.search(text)
    return found[2] if found else None


def guess_vhosts(text: str) -> list[str]:
    """The names of the vhosts a plain spec lists under its top-level ``vhosts:``, read off
    the text: the ``name:`` keys in the list's items' own column (nested objects' names are
    further right). Empty when there is no such list or any doubt."""
    key = _VHOSTS_KEY.search(text)
    if key is None:
        return []
    first = _FIRST_ITEM.match(text, key.end())
    if first is None:
        return []
    indent = first[1]
    after = _NEXT_TOP_KEY.search(text, key.end())
    end = after.start() if after else len(text)
    names = re.compile(
        rf"^{indent}(?:- |  )name:[ \t]*(['\"]?)([^'\"\n#]+?)\1[ \t]*(?:#.*)?$", re.MULTILINE
    )
    return [m[2] for m in names.finditer(text, key.end(), end)]


def read_early(
    path: Path,
    *,
    url: str | None = None,
    management_url: str | None = None,
    ca_file: str | None = None,
    insecure: bool | None = None,
) -> ManagementClient | None:
    """A management client already reading what a plan of the plain spec at ``path`` needs
    (``PLAN_READS`` and the guessed vhosts' objects), for ``target_of(reader=)``; None when
    the spec is not plain enough to guess from, or no broker can be named yet."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        return None  # the loader says what is wrong with it
    if guess_stack(text) is None:
        return None
    from rabbitry.errors import BrokerError
    from rabbitry.provisioner.endpoints import resolve_endpoints

    try:
        endpoints = resolve_endpoints(url, management_url, ca_file=ca_file, insecure=insecure)
    except BrokerError:
        return None  # a bad URL: said once the spec is loaded
    client = endpoints.management()
    client.read_ahead(guess_vhosts(text), paths=PLAN_READS)
    return client


__all__ = ["PLAN_READS", "guess_stack", "guess_vhosts", "read_early"]
