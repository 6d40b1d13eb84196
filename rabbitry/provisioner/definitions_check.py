"""A definitions file checked before anything reads it or the broker (pure): every entry an
object holding what the broker's own import needs, queue types a broker declares, limits that
are whole numbers, and users whose credentials the broker could ever match. Every problem is
said at once, with the entry's path (``users[2].password_hash``)."""

from __future__ import annotations

from typing import Any

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.topology.plugin_objects import MQTT_QOS0_QUEUE_TYPE
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.passwords import ALGORITHMS, DEFAULT_ALGORITHM, hash_problem

JSONDict = dict[str, Any]


REQUIRED = {
    "vhosts": ("name",),
    "users": ("name",),
    "permissions": ("user", "vhost"),
    "topic_permissions": ("user", "vhost", "exchange"),
    "parameters": ("component", "name", "vhost"),
    "global_parameters": ("name",),
    "policies": ("name", "vhost", "pattern", "definition"),
    "queues": ("name", "vhost"),
    "exchanges": ("name", "vhost"),
    "bindings": ("source", "vhost", "destination", "destination_type"),
}
"""What each entry of a definitions file must hold (the broker's own import needs it too: an
entry without its vhost belongs to a one-vhost file, ``POST /api/definitions/VHOST``)."""


def _limit_problems(entry: JSONDict) -> list[tuple[str, str]]:
    """Limits (of a user or a vhost) that are not whole numbers: the broker's import refuses
    them, where rabbitry would read them as no limit."""
    limits = entry.get("limits")
    problems = []
    for item in limits if isinstance(limits, list) else [limits]:
        if not isinstance(item, dict):
            continue
        for key, value in item.items():
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append((f".limits.{key}", f"a limit is a whole number, not {value!r}"))
    return problems


QUEUE_TYPES = frozenset({*QueueType, MQTT_QOS0_QUEUE_TYPE})
"""The queue types a definitions file may name (the MQTT plugin's is left out by name)."""


def _queue_type_problem(entry: JSONDict) -> str | None:
    """Why a queue entry's type is not one a broker declares, or None."""
    arguments = entry.get("arguments")
    for value in (
        arguments.get("x-queue-type") if isinstance(arguments, dict) else None,
        entry.get("type"),
    ):
        if value is not None and (not isinstance(value, str) or value not in QUEUE_TYPES):
            return (
                f"unknown queue type {value!r}: a queue is classic, quorum or stream (the"
                " broker's import refuses the file)"
            )
    return None


PASSWORDLESS = "passwordless"
"""The key of a user entry that says the user has no password on purpose (it logs in by an x509
certificate or another backend): the broker's own import ignores it."""


def _credential_problems(entry: JSONDict) -> list[tuple[str, str]]:
    """What is wrong with a user entry's credentials, as (path below the entry, why): a hash
    the broker could never match, or no password where the entry does not say it means that."""
    passwordless = entry.get(PASSWORDLESS, False)
    if not isinstance(passwordless, bool):
        return [(f".{PASSWORDLESS}", f"`{PASSWORDLESS}` is true or false, not {passwordless!r}")]
    password_hash = entry.get("password_hash")
    algorithm = entry.get("hashing_algorithm") or DEFAULT_ALGORITHM
    if not isinstance(algorithm, str):
        return [(".hashing_algorithm", "hashing_algorithm is a string")]
    if "password" in entry:
        return _plain_password_problems(entry, password_hash, algorithm, passwordless)
    if password_hash is None or password_hash == "":
        if passwordless:
            return []
        return [
            (
                ".password_hash",
                "the user has no password hash, so it would have no password: it could log in"
                " only by an x509 certificate (EXTERNAL) or another backend. If that is meant,"
                f' add `"{PASSWORDLESS}": true` to the entry; else give its password_hash',
            )
        ]
    if passwordless:
        return [
            (
                f".{PASSWORDLESS}",
                f"the entry says `{PASSWORDLESS}` and gives a password_hash: keep one",
            )
        ]
    if not isinstance(password_hash, str):
        return [(".password_hash", "password_hash is a base64 string")]
    why = hash_problem(password_hash, algorithm)
    if why is None:
        return []
    where = ".hashing_algorithm" if why.startswith("unknown") else ".password_hash"
    return [(where, why)]


def _plain_password_problems(
    entry: JSONDict, password_hash: object, algorithm: str, passwordless: bool
) -> list[tuple[str, str]]:
    """What is wrong with a user entry that gives a plain ``password``. The broker's import
    hashes it (rabbit_auth_backend_internal:put_user) and refuses an entry with both a password
    and a hash; rabbitry hashes it the same way (``plain_password``). An empty password is no
    password: the entry must say ``passwordless`` for that."""
    password = entry["password"]
    if not isinstance(password, str):
        return [(".password", "password is a string")]
    if password_hash not in (None, ""):
        return [(".password", "the entry gives both `password` and `password_hash`: keep one")]
    if passwordless:
        return [(f".{PASSWORDLESS}", f"the entry says `{PASSWORDLESS}` and gives a password")]
    if password == "":
        return [
            (
                ".password",
                "the password is empty, so the user would have no password: if that is meant,"
                f' drop it and add `"{PASSWORDLESS}": true`; else give the password',
            )
        ]
    if algorithm not in ALGORITHMS:
        return [
            (
                ".hashing_algorithm",
                f"unknown hashing_algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}",
            )
        ]
    return []


def check_definitions(data: JSONDict, file: str | None = None) -> None:
    """A SpecError naming every entry that is not an object or lacks what it must hold, and
    every user whose credentials the broker could never match (``_credential_problems``)."""
    problems = []
    for kind, needed in REQUIRED.items():
        entries = data.get(kind) or []
        if not isinstance(entries, list):
            problems.append(SpecProblem(f"`{kind}` is not a list", path=kind, file=file))
            continue
        for index, entry in enumerate(entries):
            missing = [key for key in needed if not isinstance(entry, dict) or key not in entry]
            if missing:
                problems.append(
                    SpecProblem(
                        f"the entry has no {', '.join(f'`{key}`' for key in missing)}: a"
                        " definitions file as the broker exports it holds them",
                        path=f"{kind}[{index}]",
                        file=file,
                    )
                )
            elif kind == "queues" and (why := _queue_type_problem(entry)):
                problems.append(SpecProblem(why, path=f"queues[{index}]", file=file))
            elif kind in ("users", "vhosts"):
                found = _limit_problems(entry)
                if kind == "users":
                    found += _credential_problems(entry)
                problems.extend(
                    SpecProblem(why, path=f"{kind}[{index}]{where}", file=file)
                    for where, why in found
                )
    if problems:
        raise SpecError(problems)


__all__ = ["PASSWORDLESS", "QUEUE_TYPES", "REQUIRED", "check_definitions"]
