"""Stored AMQP 1.0 messages decoded a field at a time into columns: what ``amqp10.decode``
reads, without an object per message. Pure: no I/O.

Reading a stream in Python costs most in the per-message objects (a ``Decoded``, a dict of
properties, a row tuple, a datetime), not in the bytes. ``MessageColumns.add`` appends one
message's fields to lists instead: the bodies as views of the chunk (joined once per batch by
the caller), the leading sections (header, annotations: the same bytes for most messages of
one publisher) as one shared ``SectionEffect`` per distinct encoding, the properties section's
fields sparsely (only those present: an index list and a value list per field), the
creation time as milliseconds. Row ``i`` of every column is the ``i``-th message added.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Any

from rabbitry.errors import StreamProtocolError
from rabbitry.stream.amqp10 import (
    AMQP_VALUE,
    DATA,
    PROPERTIES,
    PROPERTY_SLOTS,
    decode,
    properties_list,
    section_effect,
)

__all__ = ["PROPERTY_SLOTS", "MessageColumns", "SectionEffect"]

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")

_TIMESTAMP_SLOT = PROPERTY_SLOTS.index("timestamp")
_MILLISECOND_SLOTS = (_TIMESTAMP_SLOT, 8)  # 8: absolute-expiry-time, read past, not kept
_NOT_LEADING = (PROPERTIES, DATA, AMQP_VALUE)
_LEARN_AFTER = 64
"""Messages read the long way after a message without a layout (or a layout's miss) before
the next one's layout is taken."""


class SectionEffect:
    """What the sections other than properties and body give a message: properties (header,
    annotations), a routing key, headers (application properties; None: none given). Shared
    by every message whose sections are the same bytes: read it, never change it."""

    __slots__ = ("headers", "properties", "routing_key")

    def __init__(
        self,
        properties: dict[str, Any],
        routing_key: str | None,
        headers: dict[Any, Any] | None,
    ) -> None:
        self.properties = properties
        self.routing_key = routing_key
        self.headers = headers


NO_EFFECT = SectionEffect({}, None, None)

_EFFECTS: dict[bytes, SectionEffect] = {}
_EFFECTS_SIZE = 4096


def _effect_of(buf: memoryview, start: int, end: int) -> SectionEffect:
    """The combined effect of the sections in ``buf[start:end]`` (whole sections, none of
    them properties or data), worked out once per distinct encoding."""
    key = bytes(buf[start:end])
    found = _EFFECTS.get(key)
    if found is not None:
        return found
    props: dict[str, Any] = {}
    routing_key: str | None = None
    headers: dict[Any, Any] | None = None
    pos = start
    while pos < end:
        section, pos = _section_code(buf, pos)
        (given, rk, heads), pos = section_effect(buf, section, pos)
        props.update(given)
        if rk is not None:
            routing_key = rk
        if heads is not None:
            headers = heads
    if pos != end:
        raise StreamProtocolError("AMQP 1.0 message: a section's size is wrong")
    if len(_EFFECTS) >= _EFFECTS_SIZE:
        _EFFECTS.clear()
    found = _EFFECTS[key] = SectionEffect(props, routing_key, headers)
    return found


def _section_code(buf: memoryview, pos: int) -> tuple[int, int]:
    """The section at ``pos`` (its descriptor) and where its value starts."""
    if buf[pos] != 0x00:
        raise StreamProtocolError(f"AMQP 1.0 message: no section at byte {pos}")
    if buf[pos + 1] == 0x53:
        return buf[pos + 2], pos + 3
    raise _Unusual


# Internal: caught in this module, which reads the message the slow way.
class _Unusual(Exception):
    """A message this module's fast path does not read (a descriptor not given as a
    smallulong): ``add`` reads it with ``amqp10.decode`` instead."""


def _sized_end(buf: memoryview, pos: int) -> int:
    """The end of the compound value (list or map) at ``pos``; -1 for another type."""
    code = buf[pos]
    if code == 0xC0 or code == 0xC1:
        return pos + 2 + buf[pos + 1]
    if code == 0xD0 or code == 0xD1:
        return pos + 5 + int(_U32.unpack_from(buf, pos + 1)[0])
    if code == 0x45:
        return pos + 1
    return -1


class MessageColumns:
    """The fields of messages added one by one, a column each (see the module docstring)."""

    __slots__ = ("bodies", "count", "effects", "headers", "layout", "learn_at", "slots")

    def __init__(self, layout: Layout | None = None) -> None:
        self.count = 0
        self.layout = layout
        """The layout of the last message read the long way: the next messages that have it
        are read by ``Layout.add``. Pass it on to the columns of the next batch."""
        self.learn_at = 0
        """The row from which a message read the long way gives its layout: messages without
        one (or each of its own) would pay for looking, so after a miss it waits a while."""
        self.bodies: list[memoryview | bytes] = []
        """Each message's body: a view of its record (or bytes, when it had several parts)."""
        self.effects: list[SectionEffect] = []
        """Each message's leading sections (header, annotations), shared between messages."""
        self.headers: dict[int, dict[Any, Any]] = {}
        """Application properties of the messages that have any that come after the
        properties section, by row (those before it are in ``effects``)."""
        self.slots: list[tuple[list[int], list[Any]]] = [([], []) for _ in PROPERTY_SLOTS]
        """Per properties-section field: the rows that have it and its values (text; the
        creation time as milliseconds)."""

    @staticmethod
    def layout_of(record: memoryview) -> Layout | None:
        """The layout of the message stored as ``record`` (None: none that ``Layout``
        describes), read the long way."""
        columns = MessageColumns()
        columns.add(record)
        return columns.layout

    def extend(self, records: list[memoryview]) -> None:
        """Append the messages stored as ``records``, in order."""
        at, count = 0, len(records)
        while at < count:
            if self.layout is not None:
                at += self.layout.add(self, records, at)
                if at >= count:
                    return
            self.add(records[at])
            at += 1

    def add(self, record: memoryview) -> None:
        """Append the message stored as ``record``, read the long way (``extend`` reads
        those with the layout of the one before by their layout)."""
        layout = self.layout
        try:
            self._add(record)
            if self.count > self.learn_at:
                self.layout = Layout.of(record, self.effects[-1])
                if self.layout is None or layout is not None:
                    # none, or the one before stopped fitting: look again only later
                    self.learn_at = self.count + _LEARN_AFTER
        except _Unusual:
            self._add_decoded(record)
        except (IndexError, struct.error) as exc:
            raise StreamProtocolError(f"AMQP 1.0 message cut short ({exc})") from None

    def _add(self, buf: memoryview) -> None:
        row = self.count
        end = len(buf)
        # the leading sections up to the properties or the body: one cached effect for all
        pos = 0
        while pos < end:
            if buf[pos] != 0x00 or buf[pos + 1] != 0x53:
                raise _Unusual
            section = buf[pos + 2]
            if section in _NOT_LEADING:
                break
            code = buf[pos + 3]
            if code == 0xC0 or code == 0xC1:
                pos += 5 + buf[pos + 4]
            elif code == 0xD0 or code == 0xD1:
                pos += 8 + _U32.unpack_from(buf, pos + 4)[0]
            elif code == 0x45:
                pos += 4
            else:  # a section not given as a list or map: rare, read whole
                raise _Unusual
        effect = (_EFFECTS.get(bytes(buf[:pos])) or _effect_of(buf, 0, pos)) if pos else NO_EFFECT
        body: memoryview | bytes | None = None
        while pos < end:
            if buf[pos] != 0x00 or buf[pos + 1] != 0x53:
                raise _Unusual
            section = buf[pos + 2]
            code = buf[pos + 3]
            if section == DATA:
                if code == 0xB0:
                    size = _U32.unpack_from(buf, pos + 4)[0]
                    part = buf[pos + 8 : pos + 8 + size]
                    pos += 8 + size
                elif code == 0xA0:
                    size = buf[pos + 4]
                    part = buf[pos + 5 : pos + 5 + size]
                    pos += 5 + size
                else:
                    raise StreamProtocolError(f"AMQP 1.0 data section: binary, not 0x{code:02x}")
                if len(part) != size:
                    raise IndexError("data section past the record")
                body = part if body is None else bytes(body) + bytes(part)
            elif section == PROPERTIES:
                pos = self._properties(buf, pos + 3, row)
            else:  # application properties (and anything else) after the properties section
                after = _sized_end(buf, pos + 3)
                if after < 0 or section == AMQP_VALUE:
                    raise _Unusual
                later = _effect_of(buf, pos, after)
                pos = after
                if later.properties or later.routing_key is not None:
                    raise _Unusual  # annotations after the properties: read the slow way
                if later.headers is not None:
                    self.headers[row] = later.headers
        self.effects.append(effect)
        self.bodies.append(b"" if body is None else body)
        self.count = row + 1

    def _properties(self, buf: memoryview, pos: int, row: int) -> int:
        count, pos = properties_list(buf, pos)
        slots = self.slots
        known = len(PROPERTY_SLOTS)
        for i in range(count):
            c = buf[pos]
            if c == 0x40:
                pos += 1
                continue
            if (c == 0xA1 or c == 0xA3) and i != _TIMESTAMP_SLOT:
                size = buf[pos + 1]
                value: Any = str(buf[pos + 2 : pos + 2 + size], "utf-8", "replace")
                pos += 2 + size
            elif c == 0x83 and i in _MILLISECOND_SLOTS:
                value = _I64.unpack_from(buf, pos + 1)[0]
                pos += 9
            else:  # another type in a field: as amqp10.decode reads it
                raise _Unusual
            if i < known and PROPERTY_SLOTS[i] is not None:
                rows, values = slots[i]
                rows.append(row)
                values.append(value)
        return int(pos)

    def _add_decoded(self, record: memoryview) -> None:
        """The slow path: the message through ``amqp10.decode``, then into the columns."""
        row = self.count
        for rows, values in self.slots:  # undo what the fast path appended for this row
            while rows and rows[-1] == row:
                rows.pop()
                values.pop()
        self.headers.pop(row, None)
        try:
            m = decode(record)
        except (IndexError, struct.error) as exc:
            raise StreamProtocolError(f"AMQP 1.0 message cut short ({exc})") from None
        props = dict(m.properties)
        slotted: dict[str, Any] = {}
        for name in PROPERTY_SLOTS:
            if name is not None and name in props:
                slotted[name] = props.pop(name)
        for i, name in enumerate(PROPERTY_SLOTS):
            value = slotted.get(name) if name is not None else None
            if value is None:
                continue
            if i == _TIMESTAMP_SLOT:
                value = _milliseconds(value)
                if value is None:
                    continue
            rows, values = self.slots[i]
            rows.append(row)
            values.append(value)
        self.effects.append(SectionEffect(props, m.routing_key, m.headers or None))
        self.bodies.append(m.body)
        self.count = row + 1


def _milliseconds(value: Any) -> int | None:
    import datetime as dt

    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    return None


@dataclass(slots=True, eq=False)
class Layout:
    """Where the fields of one message lie, for the messages laid out byte for byte like it
    but for their message id and such strings (of the same lengths), their creation time and
    their body (of any length, the last section). One publisher's messages mostly are: such a
    message is read by comparing a few slices and cutting out its fields, not section by
    section. Made by ``Layout.of`` from a message read the long way."""

    constants: list[tuple[int, int, bytes]]
    """(start, end, bytes): what must be the same, up to the body's size."""
    strings: list[tuple[int, int, int]]
    """(slot, start, end) of each string property kept."""
    stamp: int
    """Where the creation time's 8 bytes start; -1: none."""
    body: int
    """Where the body starts (its size is the 4 bytes before)."""
    effect: SectionEffect

    @classmethod
    def of(cls, buf: memoryview, effect: SectionEffect) -> Layout | None:
        """The layout of ``buf``, a message read already; None when it has none that this
        class describes (application properties, a body in parts, another property type)."""
        end = len(buf)
        pos = 0
        while pos + 3 < end and buf[pos + 2] not in _NOT_LEADING:
            pos = _sized_end(buf, pos + 3)
            if pos < 0:
                return None
        if pos + 3 >= end:
            return None
        variable: list[tuple[int, int]] = []
        strings: list[tuple[int, int, int]] = []
        stamp = -1
        if buf[pos + 2] == PROPERTIES:
            pos += 3
            if buf[pos] == 0xC0:
                count, pos = buf[pos + 2], pos + 3
            elif buf[pos] == 0xD0:  # as rabbitry's sink writes it
                count, pos = _U32.unpack_from(buf, pos + 5)[0], pos + 9
            else:
                return None
            for i in range(count):
                c = buf[pos]
                if c == 0x40:
                    pos += 1
                    continue
                name = PROPERTY_SLOTS[i] if i < len(PROPERTY_SLOTS) else None
                if c in (0xA1, 0xA3) and i != _TIMESTAMP_SLOT:
                    size = buf[pos + 1]
                    if name is not None:
                        strings.append((i, pos + 2, pos + 2 + size))
                        variable.append((pos + 2, pos + 2 + size))
                    pos += 2 + size
                elif c == 0x83 and i in _MILLISECOND_SLOTS:
                    if name is not None:
                        stamp = pos + 1
                        variable.append((pos + 1, pos + 9))
                    pos += 9
                else:
                    return None
        if buf[pos : pos + 4].tobytes() != b"\x00Su\xb0":
            return None
        body = pos + 8
        if _U32.unpack_from(buf, pos + 4)[0] != end - body:
            return None  # more sections after the body
        constants, at = [], 0
        for start, stop in [*variable, (pos + 4, body)]:
            if start > at:
                constants.append((at, start, bytes(buf[at:start])))
            at = stop
        return cls(constants, strings, stamp, body, effect)

    def add(self, columns: MessageColumns, records: list[memoryview], first: int) -> int:
        """Append ``records[first:]`` to ``columns`` while they have this layout; how many."""
        body = self.body
        constants = self.constants
        strings = self.strings
        stamp = self.stamp
        slots = columns.slots
        stamps_rows, stamps = slots[_TIMESTAMP_SLOT]
        kept = [(slots[slot][0], slots[slot][1], start, end) for slot, start, end in strings]
        effects, bodies = columns.effects, columns.bodies
        unpack = _U32.unpack_from
        unpack_stamp = _I64.unpack_from
        row = columns.count
        at = first
        for buf in itertools.islice(records, first, None):
            size = len(buf)
            if size < body or unpack(buf, body - 4)[0] != size - body:
                break
            for start, end, same in constants:
                if buf[start:end] != same:
                    break
            else:
                for rows, values, start, end in kept:
                    rows.append(row)
                    values.append(str(buf[start:end], "utf-8", "replace"))
                if stamp >= 0:
                    stamps_rows.append(row)
                    stamps.append(unpack_stamp(buf, stamp)[0])
                effects.append(self.effect)
                bodies.append(buf[body:])
                row += 1
                at += 1
                continue
            break
        columns.count = row
        return at - first
