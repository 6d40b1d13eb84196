"""What differs between an object the spec wants and the one the broker has, as short lines
for the plan (pure); secrets masked, argument maps compared key by key. The algorithm is here;
what a kind compares beside its fields is its module's (``rabbitry.topology.kinds``)."""

from __future__ import annotations

from typing import Any

from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.kinds import kind_of_resource
from rabbitry.topology.primitives import Primitive, canonical_json, same_json
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


def differences(desired: Primitive, observed: Primitive, state: BrokerState) -> list[str]:
    """What differs between the object the spec wants and the broker's, as its kind compares
    them: its fields (``field_differences``), then what its kind checks beside them."""
    kind = kind_of_resource(desired)
    if not kind.compares_fields:
        return []  # its key is all of it: found is equal
    if kind.fields_only:
        return field_differences(desired, observed)
    lines = field_differences(kind.compared(desired, observed), observed)
    return lines + kind.more_differences(desired, observed, state.password_hashes)


def comparable(observed: Primitive, desired: Primitive) -> Primitive:
    """``observed`` as its recorded digest was made (``Kind.comparable``)."""
    made: Primitive = kind_of_resource(observed).comparable(observed, desired)
    return made


__all__ = ["comparable", "differences", "field_differences"]
