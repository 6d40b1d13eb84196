"""What every kind of broker object tells the generic code about itself (pure): the base each
kind's module (``rabbitry.topology.kinds.<kind>``) fills in.

The generic code keeps the algorithms: ``provisioner.state`` reads a vhost section by section,
``provisioner.field_diff`` compares fields, ``provisioner.writes`` sends the requests,
``provisioner.broker_documents`` builds definitions imports, ``topology.document`` writes the
spec document. Each asks the kind of the object in hand for its part: how it is read from the
broker's definitions-shaped answers, the management API requests that put and delete it, its
entry in a definitions import, what of it is compared, how it is exported and described.
Nothing here talks to a broker: a write is a ``Write``, data the provisioner sends.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypedDict, TypeVar, Unpack

from rabbitry.topology.primitives import GLOBAL, JSON, Primitive, ResourceKey, Vhost
from rabbitry.uri import path_segment

if TYPE_CHECKING:
    from rabbitry.topology.patterns.draft import VhostDraft

JSONDict = dict[str, Any]
Document = dict[str, Any]
EntryReader = Callable[[Any], JSONDict]


segment = path_segment
"""One percent-encoded path segment of the management API (``/`` too: the default vhost)."""


def limits_of(value: Any) -> dict[str, int]:
    """Limits as the API and definitions files write them: an object, a list of objects, or
    [] for none; anything else is no limit."""
    out: dict[str, int] = {}
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, Mapping):
            out.update({str(k): int(v) for k, v in item.items() if isinstance(v, int | float)})
    return out


def tags_of(value: Any) -> tuple[str, ...]:
    """Tags as a list, or as one comma-separated string (older brokers)."""
    if isinstance(value, str):
        return tuple(t for t in value.split(",") if t)
    return tuple(str(t) for t in value or ())


def enum_or_none(enum_type: Any, value: Any) -> Any:
    """The member of ``enum_type`` whose value is ``value`` (or which is ``value``), or None;
    a dictionary lookup rather than the enum's call, once per object of a large vhost."""
    try:
        return enum_type._value2member_map_.get(value)
    except TypeError:  # a value that cannot be hashed is no member's
        return None


def entry_reader(primitive: type[Primitive], names: tuple[str, ...]) -> EntryReader:
    """What reads the fields ``names`` of a ``primitive`` as the management API spells and
    writes them (``apply-to`` is the field ``apply_to``; an enum as its value). Made once per
    kind: a definitions import of 50,000 objects reads them all."""
    attrs = [name.replace("-", "_") for name in names]
    get = attrgetter(*attrs, attrs[0])  # a tuple always, one field too: zip drops the extra
    fields = primitive.model_fields
    enums = [n for n, a in zip(names, attrs, strict=True) if _holds_enum(fields[a].annotation)]
    if not enums:
        return lambda resource: dict(zip(names, get(resource), strict=False))

    def read(resource: Primitive) -> JSONDict:
        entry = dict(zip(names, get(resource), strict=False))
        for name in enums:
            value = entry[name]
            if isinstance(value, enum.Enum):
                entry[name] = value._value_
        return entry

    return read


def _holds_enum(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return True
    return any(_holds_enum(arg) for arg in typing.get_args(annotation))


def limit_writes(path: str, limits: Mapping[str, int], known: tuple[str, ...]) -> list[Write]:
    """Set the limits given, lift the others (a limit left out of the spec is none)."""
    return [
        Write("PUT", f"{path}/{name}", {"value": limits[name]})
        if name in limits
        else Write("DELETE", f"{path}/{name}", allow=(404,))
        for name in known
    ]


@dataclass(frozen=True)
class Write:
    """One management API request of a write: what ``provisioner.writes`` sends."""

    method: str
    path: str
    body: JSON = None
    allow: tuple[int, ...] = ()
    """Answers that are not failures (a delete of what is gone: 404)."""


@dataclass
class Reading:
    """One vhost being read from the broker's answers, kind after kind (``provisioner.state``)."""

    vhost: str
    left_out: list[str] = field(default_factory=list)
    """What was read and left out (a plugin's objects), one line each."""
    gone: dict[str, set[str]] = field(default_factory=dict)
    """Kind -> names of objects left out, for the kinds read after it (bindings to them)."""

    def leave_out(self, kind: str, name: str, line: str) -> None:
        self.gone.setdefault(kind, set()).add(name)
        self.left_out.append(line)


class KindSettings(TypedDict, total=False):
    """What a kind's class statement may say of it: ``class QueueKind(Kind[Queue],
    name="queue", field="queues", imported=2)``."""

    name: str
    """Its ``name``."""
    field: str
    """Its ``vhost_field``, and its ``section`` unless that is given too."""
    section: str
    listing: str
    imported: int
    """A definitions import makes it, at this ``import_rank``."""


P = TypeVar("P", bound=Primitive)
Hashes = Mapping[str, tuple[str, str]]
"""User name -> (password hash, hashing algorithm), as the broker holds them."""


class Kind(Generic[P]):
    """One kind of broker object, whose primitive is ``P``. A module
    ``rabbitry.topology.kinds.<name>`` defines ``KIND``, an instance of a subclass of this;
    ``rabbitry.topology.kinds`` finds it by its name in ``primitives.ResourceKind``. A kind
    written through one management API path (``path``, ``body``) needs no ``puts`` nor
    ``deletion`` of its own."""

    name: ClassVar[str]
    """The kind's name: ``Primitive.kind``, the first part of its keys."""
    primitive: type[P]
    vhost_field: ClassVar[str | None] = None
    """The field of ``Vhost`` (and of the spec's vhost) that holds objects of this kind; None
    for what is not inside a vhost."""
    section: ClassVar[str | None] = None
    """The list of a vhost's definitions document it is read from and imported into."""
    listing: ClassVar[str | None] = None
    """The API path that lists a vhost's objects of this kind (``{vhost}`` in it, quoted),
    when they are read apart from the vhost's definitions (``management.vhost_objects``)."""
    imported: ClassVar[bool] = False
    """A definitions import creates it (``definitions_entry``)."""
    import_rank: ClassVar[int] = 2
    """Its place in a definitions import: what it refers to comes in an earlier chunk or the
    same one (``provisioner.import_plan``)."""
    entry_fields: ClassVar[tuple[str, ...]] = ()
    """The fields of its definitions entry, in the API's spelling and order."""
    _entry: ClassVar[EntryReader | None] = None
    compares_fields: ClassVar[bool] = True
    """False when its key is all of it: found is equal, nothing to compare."""
    fields_only: ClassVar[bool] = True
    """Nothing compared beside its fields (``compared`` and ``more_differences`` are the
    base's): the planner's comparison of 50,000 objects skips the calls."""

    def __init_subclass__(cls, **settings: Unpack[KindSettings]) -> None:
        """The kind's settings, given in its class statement (``KindSettings``)."""
        super().__init_subclass__()
        if "name" in settings:
            cls.name = settings["name"]
        if "field" in settings:
            cls.vhost_field = settings["field"]
            cls.section = settings.get("section", settings["field"])
        if "listing" in settings:
            cls.listing = settings["listing"]
        if "imported" in settings:
            cls.imported, cls.import_rank = True, settings["imported"]
        if cls.entry_fields and "primitive" in cls.__dict__:
            cls._entry = staticmethod(entry_reader(cls.primitive, cls.entry_fields))
        cls.fields_only = (
            cls.compared is Kind.compared and cls.more_differences is Kind.more_differences
        )

    # -- describing ---------------------------------------------------------------------------

    def describe(self, key: ResourceKey) -> str:
        """A short human name of ``key``: ``queue orders/work``."""
        where = f"{key.vhost}/" if key.vhost else ""
        return f"{self.name.replace('_', ' ')} {where}{'/'.join(key.identity)}"

    def needs(self, key: ResourceKey) -> list[ResourceKey]:
        """The keys of the objects this one cannot exist without, beside its vhost."""
        return []

    # -- expanding ----------------------------------------------------------------------------

    def declare(self, draft: VhostDraft) -> None:
        """Add the objects of this kind the vhost's spec declares (its ``vhost_field``) to the
        draft: the expansion step of the kind (``patterns.expand.VHOST_STEPS``)."""

    # -- reading ------------------------------------------------------------------------------

    def reads(self, item: JSONDict) -> bool:
        """Whether an answer of its ``section`` is of this kind (a section two kinds share)."""
        return True

    def observed(self, items: Iterable[JSONDict], reading: Reading) -> Iterator[P]:
        """The broker's answers of its ``section`` as primitives (those ``reads`` takes)."""
        raise NotImplementedError(f"{self.name} is not read from a vhost's definitions")

    # -- writing ------------------------------------------------------------------------------

    def path(self, resource: P, vhost: str) -> str:
        """The management API path of ``resource`` in ``vhost``."""
        raise NotImplementedError(f"{self.name} has no path of its own")

    def body(self, resource: P, vhost: str) -> JSON:
        """What a PUT to its ``path`` sends: by default its definitions entry, but its name
        (the path holds it)."""
        body = self.definitions_entry(resource)
        del body["name"]
        return body

    def puts(self, resource: P, vhost: str, observed: Primitive | None) -> list[Write]:
        """The requests that create or update ``resource`` (``observed``: what the broker has
        of it, if anything)."""
        return [Write("PUT", self.path(resource, vhost), self.body(resource, vhost))]

    def deletion(self, observed: P, vhost: str) -> Write:
        """The request that deletes ``observed``."""
        return Write("DELETE", self.path(observed, vhost), allow=(404,))

    def definitions_entry(self, resource: P) -> JSONDict:
        """Its entry in a definitions document (``section``): its ``entry_fields``."""
        reader = type(self)._entry
        if reader is None:
            raise NotImplementedError(f"cannot apply {type(resource).__name__}")
        return reader(resource)

    # -- comparing ----------------------------------------------------------------------------

    def compared(self, desired: P, observed: P) -> P:
        """``desired`` as it is compared with ``observed`` (a setting the broker does not keep
        is not asked for again)."""
        return desired

    def more_differences(self, desired: P, observed: P, hashes: Hashes) -> list[str]:
        """What differs beside its settings (a password, checked against the broker's hash)."""
        return []

    def comparable(self, observed: P, desired: P) -> P:
        """``observed`` as its recorded digest was made (a setting the broker does not keep
        counts as what was asked, not as drift)."""
        return observed

    # -- exporting ----------------------------------------------------------------------------

    def exported(self, resource: P, vhost: Vhost | None) -> Document:
        """Its entry in the spec document: its fields, those at their defaults left out."""
        kind = type(resource)
        dumped = resource.model_dump(mode="json")
        return {
            name: dumped[name]
            for name in kind.model_fields  # in their order (a trusted object's may differ)
            if not (
                (name in kind._defaults and dumped[name] == kind._defaults[name])
                or (name in kind._factories and dumped[name] == kind._factories[name]())
            )
        }


__all__ = [
    "GLOBAL",
    "Document",
    "Hashes",
    "JSONDict",
    "Kind",
    "Reading",
    "Write",
    "enum_or_none",
    "limit_writes",
    "limits_of",
    "segment",
    "tags_of",
]
