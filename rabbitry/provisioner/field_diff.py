"""What differs between an object the spec wants and the one the broker has, as short lines
for the plan (pure); secrets masked, argument maps compared key by key."""

from __future__ import annotations

from typing import Any

from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import Primitive, User, Vhost, canonical_json, same_json
from rabbitry.topology.spec.passwords import password_matches
from rabbitry.uri import mask_text


def _same_json_types(a: Any, b: Any) -> bool:
    """For values Python found equal: whether JSON finds them equal too (``True == 1`` in
    Python, not on the wire; 1 and 1.0 are one JSON number)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b)
    if isinstance(a, dict):
        for key, value in a.items():
            # a string equals only a string (most values: names, keys, enum members)
            if not isinstance(value, str) and not _same_json_types(value, b[key]):
                return False
        return True
    if isinstance(a, list | tuple):
        return all(_same_json_types(x, y) for x, y in zip(a, b, strict=True))
    return True


def field_differences(desired: Primitive, observed: Primitive) -> list[str]:
    """Short human lines naming what differs; argument maps are compared key by key."""
    # Most objects match: equal fields (of a kind whose settings are its fields) say so
    # without writing either out.
    if (
        type(desired).settings is Primitive.settings
        and desired == observed
        and _same_json_types(desired.__dict__, observed.__dict__)
    ):
        return []
    want = desired.settings()
    have = observed.settings()
    lines: list[str] = []
    for name in sorted(set(want) | set(have)):
        a, b = have.get(name), want.get(name)
        if same_json(a, b):
            continue
        if (isinstance(a, dict) and b is None) or (a is None and isinstance(b, dict)):
            a, b = a or {}, b or {}  # a map set on one side only: say which of its keys
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if not same_json(a.get(sub), b.get(sub)):
                    lines.append(f"{name}.{sub}: {_short(a.get(sub))} -> {_short(b.get(sub))}")
        else:
            lines.append(f"{name}: {_short(a)} -> {_short(b)}")
    return lines


def _short(value: Any) -> str:
    if value is None:
        return "(unset)"
    text = mask_text(canonical_json(value))  # parameter values can hold URIs with passwords
    return text if len(text) <= 60 else text[:57] + "..."


def user_differences(desired: User, observed: User, state: BrokerState) -> list[str]:
    lines = field_differences(desired, observed)
    stored_hash, algorithm = state.password_hashes.get(desired.name, ("", ""))
    if desired.password is not None:
        if not password_matches(desired.password.get_secret_value(), stored_hash, algorithm):
            lines.append("password differs")
    elif desired.password_hash is not None and desired.password_hash != stored_hash:
        lines.append("password_hash differs")
    return lines


__all__ = ["field_differences", "user_differences"]


def vhost_differences(desired: Vhost, observed: Vhost) -> list[str]:
    """A broker that keeps no deletion protection (before 4.0.6: the version table warns of
    it) is not asked for it again at every plan."""
    if observed.protected_from_deletion is None:
        desired = desired.model_copy(update={"protected_from_deletion": None})
    return field_differences(desired, observed)


def comparable(observed: Primitive, desired: Primitive) -> Primitive:
    """``observed`` as its recorded digest was made: a setting the broker does not keep
    (a vhost's deletion protection before 4.0.6) counts as what was asked, not as drift."""
    if (
        isinstance(observed, Vhost)
        and isinstance(desired, Vhost)
        and observed.protected_from_deletion is None
    ):
        protected = desired.protected_from_deletion
        return observed.model_copy(update={"protected_from_deletion": protected})
    return observed
