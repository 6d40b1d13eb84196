"""Definitions files of every RabbitMQ era (3.6 to 4.2 shapes, tests/data/definitions: rabbitry's
own files, one shape or a few each; its README.md says what each shows), taken under rabbitry both
ways on a real broker:

- the broker imports the file (copy A): its own export of A is what is expected;
- `import-definitions` of the same file, applied (copy B), must give the same export;
- `export` of A, applied again under other names (copy C), must give the same export.

Each file is renamed first (every vhost, user and global parameter gets the test's own name),
so that the shared broker's `/`, its users and its cluster name are never touched. Compared
kind by kind, except what rabbitry names as left out (plugin-internal objects, what the broker's
own import skips) and what a direction cannot carry: an export holds no global parameters,
and its users are those with a permission in the exported vhosts. A user given a plain
password must log in with it: its hash is checked against the password, not compared. A file
named `refused-...` is one every broker refuses: rabbitry must refuse it too, before any change.

The public files (tests/data/definitions/PUBLIC.md: other projects' files, not in this
repository) are taken the same way, from .rabbitry/definitions-corpus where scripts/setup.sh puts
them.

Marked `versions`: what a broker takes of a file differs by release (3.10, 4.0, 4.3), and
rabbitry must take the same on each."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.topology.spec.passwords import DEFAULT_ALGORITHM, password_matches

from .conftest import Broker
from .test_import_definitions import KINDS, each_string

CORPUS = Path(__file__).parents[1] / "data" / "definitions"
FILES = sorted(path.name for path in CORPUS.glob("*.json"))
BROKER_REFUSES = {name for name in FILES if name.startswith("refused-")}
"""Files every broker refuses to import (named `refused-...`): rabbitry must refuse them too."""

ROOT = Path(__file__).parents[2]
PUBLIC_CORPUS = ROOT / ".rabbitry" / "definitions-corpus"
"""Where scripts/setup.sh puts the public files (tests/data/definitions/PUBLIC.md)."""


def _public_files() -> list[str]:
    spec = importlib.util.spec_from_file_location(
        "definitions_corpus", ROOT / "scripts" / "definitions_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return [variant.name for variant in module.VARIANTS]


PUBLIC_FILES = _public_files()

VHOST_KINDS = KINDS[2:5] + KINDS[6:]
RACE = "the broker's import declares these concurrently and may keep either"
NO_SUCH_EXCHANGE = "a binding of the plan uses it, and the broker has no such exchange"
FIXED_HASH = "tXIGvUG8jt1C4y1YsvO8U7JeBJbR2EVx2EoPKYSQnIwcCMDy"
"""A users' hash (of no password anyone uses) for the users a file counts on existing."""
BROKER_GLOBALS = ("internal_cluster_id",)
"""Never imported into the shared broker: it would change the broker's own identity."""

pytestmark = pytest.mark.versions


def run(broker: Broker, *args: str) -> Any:
    verb, *rest = args
    argv = [verb, *rest]
    if verb in ("plan", "apply", "export"):
        argv += ["--management-url", broker.management_url, "--url", broker.amqp_url]
    return CliRunner().invoke(cli, argv, catch_exceptions=False)


class Names:
    """The file's names (vhosts, users, global parameters) and a copy's names for them."""

    def __init__(self, data: dict[str, Any], stem: str) -> None:
        vhosts = [str(v["name"]) for v in data.get("vhosts") or []]
        for kind in VHOST_KINDS:
            for entry in data.get(kind) or []:
                if str(entry.get("vhost", "/")) not in vhosts:
                    vhosts.append(str(entry.get("vhost", "/")))
        users = [str(u["name"]) for u in data.get("users") or []]
        self.existing = [
            str(p["user"])
            for kind in ("permissions", "topic_permissions")
            for p in data.get(kind) or []
            if str(p["user"]) not in users
        ]
        users += list(dict.fromkeys(self.existing))
        globals_ = [str(g["name"]) for g in data.get("global_parameters") or []]
        self.stem = stem
        self.vhosts = {name: f"{stem}v{i}" for i, name in enumerate(vhosts)}
        self.users = {name: f"{stem}u{i}" for i, name in enumerate(users)}
        self.globals = {name: f"{stem}g{i}" for i, name in enumerate(globals_)}

    def copy(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` under these names; a vhost its entries use but it does not list is listed
        (the file relied on the broker's `/`)."""
        out: dict[str, Any] = {k: v for k, v in data.items() if k not in KINDS}
        listed = {str(v["name"]) for v in data.get("vhosts") or []}
        out["vhosts"] = [
            {**v, "name": self.vhosts[str(v["name"])]} for v in data.get("vhosts") or []
        ] + [{"name": new} for old, new in self.vhosts.items() if old not in listed]
        out["users"] = [{**u, "name": self.users[str(u["name"])]} for u in data.get("users") or []]
        out["global_parameters"] = [
            {**g, "name": self.globals[str(g["name"])]}
            for g in data.get("global_parameters") or []
            if g["name"] not in BROKER_GLOBALS
        ]
        for kind in VHOST_KINDS:
            entries = []
            for entry in data.get(kind) or []:
                if "vhost" in entry:  # (one without is the file's fault: kept so)
                    entry = {**entry, "vhost": self.vhosts[str(entry["vhost"])]}
                if "user" in entry:
                    entry["user"] = self.users.get(str(entry["user"]), entry["user"])
                if kind == "parameters":
                    entry["value"] = uris_renamed(entry.get("value"), self._to_copy)
                entries.append(entry)
            out[kind] = entries
        return out

    @property
    def _to_copy(self) -> list[tuple[str, str]]:
        """A URI naming a vhost of the file, as written (escaped or not), names the copy's."""
        return [
            (written, quote(new, safe=""))
            for old, new in self.vhosts.items()
            for written in dict.fromkeys((quote(old, safe=""), old))
        ]

    @property
    def _to_file(self) -> list[tuple[str, str]]:
        """A URI naming a vhost of the copy names the file's again."""
        return [(quote(new, safe=""), old) for old, new in self.vhosts.items()]

    def held(self, definitions: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """What the broker holds of this copy, under the file's own names."""
        vhosts = {new: old for old, new in self.vhosts.items()}
        users = {new: old for old, new in self.users.items()}
        globals_ = {new: old for old, new in self.globals.items()}
        out: dict[str, list[dict[str, Any]]] = {}
        for kind in KINDS:
            items = []
            for item in definitions.get(kind) or []:
                if kind == "vhosts":
                    if item["name"] in vhosts:
                        items.append({**item, "name": vhosts[item["name"]]})
                elif kind == "users":
                    if item["name"] in users:
                        items.append({**item, "name": users[item["name"]]})
                elif kind == "global_parameters":
                    if item["name"] in globals_:
                        items.append({**item, "name": globals_[item["name"]]})
                elif item.get("vhost") in vhosts:
                    item = {**item, "vhost": vhosts[item["vhost"]]}
                    if "user" in item:
                        item["user"] = users.get(item["user"], item["user"])
                    if kind == "parameters":
                        item["value"] = uris_renamed(item.get("value"), self._to_file)
                    items.append(item)
            out[kind] = items
        return out

    def make_existing(self, broker: Broker) -> None:
        """The users the file grants permissions to without listing them: it counted on them
        existing (the broker's `guest`), so they are made first, with one fixed hash."""
        for old in dict.fromkeys(self.existing):
            broker.http.put(
                f"/users/{quote(self.users[old], safe='')}",
                json={"password_hash": FIXED_HASH, "tags": ""},
            ).raise_for_status()

    def drop_grants_to(self, broker: Broker, user: str) -> None:
        """The permissions the broker gave ``user`` (the one applying) in the vhosts it made:
        never the file's (its users are all renamed)."""
        for vhost in self.vhosts.values():
            broker.http.delete(f"/permissions/{quote(vhost, safe='')}/{quote(user, safe='')}")

    def remove(self, broker: Broker, stack: str) -> None:
        for vhost in self.vhosts.values():
            broker.http.delete(f"/vhosts/{quote(vhost, safe='')}")
        for user in self.users.values():
            broker.http.delete(f"/users/{quote(user, safe='')}")
        for name in [*self.globals.values(), f"rabbitry.stack.{stack}"]:
            broker.http.delete(f"/global-parameters/{quote(name, safe='')}")


def uris_renamed(value: Any, renames: list[tuple[str, str]]) -> Any:
    """``value`` with a URI in it ending in ``/<written>`` ending in ``/<replacement>``
    instead, for the first ``(written, replacement)`` that fits."""

    def rename(text: str) -> str:
        if "://" not in text:
            return text
        for written, replacement in renames:
            if text.endswith("/" + written):
                return text[: -len(written)] + replacement
        return text

    return each_string(value, rename)


def named_left_out(kind: str, item: dict[str, Any], output: str, names: Names) -> bool:
    """Whether rabbitry's output names ``item`` (under the file's names) as left out."""
    vhost = names.vhosts.get(str(item.get("vhost")), "")
    if kind in ("queues", "exchanges"):
        phrase = f"{kind[:-1]} {vhost}/{item['name']}: "
    elif kind == "parameters":
        phrase = f"parameter {vhost}/{item['component']}/{item['name']}: "
    elif kind == "bindings":
        phrase = f"binding {vhost}/{item['source']} -> {item['destination']}: "
    elif kind == "global_parameters":
        phrase = f"global parameter {names.globals.get(item['name'])}: "
    else:
        return False
    if kind in ("queues", "exchanges"):
        twice = f"{kind}[", f"({vhost}/{item['name']}): ", RACE
        if any(all(part in line for part in twice) for line in output.splitlines()):
            return True  # written twice, differently: the broker may keep either
    return f"left out: {phrase}" in output


def canonical(kind: str, items: list[dict[str, Any]], plain: dict[str, str]) -> list[str]:
    """Items as comparable text. A classic queue's `x-queue-type: classic` counts as unset
    (apply names every queue's type; brokers differ in keeping it). A user given a plain
    password has its hash checked against it instead (the salt is random)."""
    out = []
    for item in items:
        arguments = item.get("arguments")
        if isinstance(arguments, dict) and arguments.get("x-queue-type") == "classic":
            arguments = {k: v for k, v in arguments.items() if k != "x-queue-type"}
            item = {**item, "arguments": arguments}
        if kind == "users" and item["name"] in plain:
            algorithm = item.get("hashing_algorithm") or DEFAULT_ALGORITHM
            assert password_matches(plain[item["name"]], item["password_hash"], algorithm), item
            item = {
                k: v for k, v in item.items() if k not in ("password_hash", "hashing_algorithm")
            }
        out.append(json.dumps(item, sort_keys=True))
    return sorted(out)


def compare(
    expected: dict[str, list[dict[str, Any]]],
    got: dict[str, list[dict[str, Any]]],
    output: str,
    names: Names,
    plain: dict[str, str],
    kinds: tuple[str, ...] = KINDS,
) -> None:
    """Kind by kind, what the broker holds of a copy equals what it holds of the file, but for
    what rabbitry's ``output`` named as left out (under the copy's ``names``)."""
    for kind in kinds:
        wanted = [i for i in expected[kind] if not named_left_out(kind, i, output, names)]
        made = [i for i in got[kind] if not named_left_out(kind, i, output, names)]
        assert canonical(kind, made, plain) == canonical(kind, wanted, plain), kind


@pytest.mark.parametrize("name", FILES)
def test_a_definitions_file_comes_back_kind_by_kind(broker: Broker, name: str) -> None:
    comes_back(broker, CORPUS / name, refused_by_every_broker=name in BROKER_REFUSES)


@pytest.mark.versions
@pytest.mark.parametrize("name", PUBLIC_FILES)
def test_a_public_definitions_file_comes_back_kind_by_kind(broker: Broker, name: str) -> None:
    path = PUBLIC_CORPUS / f"{name}.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing: scripts/setup.sh makes it (scripts/definitions_corpus.py)")
    comes_back(broker, path, refused_by_every_broker=False)


def comes_back(broker: Broker, path: Path, *, refused_by_every_broker: bool) -> None:
    """The file at ``path`` taken both ways (the module's docstring); one every broker refuses
    must be refused by rabbitry too."""
    try:
        data = json.loads(path.read_text())
    except ValueError:
        refused = CliRunner().invoke(cli, ["validate", str(path)])
        assert refused.exit_code == 1, refused.output  # not JSON: nobody takes it
        return
    plain = {str(u["name"]): u["password"] for u in data.get("users") or [] if "password" in u}
    a, b, c = (Names(data, f"{broker.vhost}-{copy}") for copy in "abc")
    stacks = {copy: f"{broker.stack}-{copy}" for copy in "bc"}
    connected = broker.get("/whoami")["name"]
    source, spec = broker.tmp / "b.json", broker.tmp / "b.yaml"
    source.write_text(json.dumps(b.copy(data)))
    try:
        # (copy C gets them from the export: they must not exist, or apply would adopt them)
        for names in (a, b):
            names.make_existing(broker)
        imported = broker.http.post("/definitions", json=a.copy(data))
        assert (imported.status_code >= 400) >= refused_by_every_broker, imported.text
        if imported.status_code >= 400:
            # what this broker refuses (classic mirroring on 4.0 ...), rabbitry refuses before
            # any change
            planned = run(broker, "apply", str(source), "--auto-approve")
            assert planned.exit_code == 1, (imported.text, planned.output)
            made = [v for v in b.vhosts.values() if broker.get(f"/vhosts/{quote(v, safe='')}")]
            assert made == [], planned.output
            return
        a.drop_grants_to(broker, connected)
        expected = a.held(broker.get("/definitions"))

        # import-definitions -> apply
        made = run(
            broker, "import-definitions", str(source), "--users", "all", "--reveal-secrets",
            "--name", stacks["b"], "-o", str(spec),
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        applied = run(broker, "apply", str(spec), "--auto-approve")
        if NO_SUCH_EXCHANGE in applied.output:
            # RabbitMQ 3.10 imports a binding from an amq.* exchange it lacks as nothing at all
            # (4.0 refuses the file); rabbitry refuses it by name before any change
            assert not [x for x in expected["bindings"] if x["source"].startswith("amq.")]
            made = [v for v in b.vhosts.values() if broker.get(f"/vhosts/{quote(v, safe='')}")]
            assert made == [], applied.output
            return
        assert applied.exit_code == 0, applied.output
        b.drop_grants_to(broker, connected)
        compare(expected, b.held(broker.get("/definitions")), made.output, b, plain)
        if not a.vhosts:
            return  # users alone: no vhost to export

        # (the broker's import) -> export -> apply, under other names
        vhosts = [arg for v in a.vhosts.values() for arg in ("--vhost", v)]
        exported = run(
            broker, "export", *vhosts, "--users", "--reveal-secrets", "--name", stacks["c"]
        )
        assert exported.exit_code == 0, exported.output
        spec_c = broker.tmp / "c.yaml"
        spec_c.write_text(exported.stdout.replace(a.stem, c.stem))
        again = run(broker, "apply", str(spec_c), "--auto-approve")
        assert again.exit_code == 0, again.output
        c.drop_grants_to(broker, connected)
        with_access = {p["user"] for p in expected["permissions"]}
        expected["users"] = [u for u in expected["users"] if u["name"] in with_access]
        exported_kinds = tuple(k for k in KINDS if k != "global_parameters")
        held = c.held(broker.get("/definitions"))
        compare(expected, held, exported.output, a, plain, exported_kinds)
    finally:
        for names, stack in ((a, ""), (b, stacks["b"]), (c, stacks["c"])):
            names.remove(broker, stack)
