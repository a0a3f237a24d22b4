"""Runtime-task metadata: wire values, display names, presentation codes, legacy names."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast, get_args

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from .errors import RuntimeTaskCatalogError

__all__ = [
    "RegisteredRuntimeTaskKind",
    "RuntimeTaskCatalog",
    "RuntimeTaskDefinition",
    "RuntimeTaskName",
]

K = TypeVar("K", bound=enum.Enum)
P = TypeVar("P")
RK = TypeVar("RK", bound="RegisteredRuntimeTaskKind")


@dataclass(frozen=True, slots=True)
class RuntimeTaskDefinition(Generic[K, P]):
    """The metadata of one runtime (system) task.

    Attributes:
        kind: The product's runtime-task enum member.
        wire: The stable value stored in payloads and rows (non-empty).
        display: The admin-facing display name.
        presentation: The product's presentation/i18n code.
    """

    kind: K
    wire: str
    display: str
    presentation: P


class RuntimeTaskCatalog(Generic[K, P]):
    """The lookups the seed's ``runtime_task_registry!`` generates, built from definitions.

    Construction never raises, so a test can build a broken catalog and see
    :meth:`check` report it; products call ``check()`` at import time (and in a test).

    Example:
        >>> class Kind(enum.Enum):
        ...     SYSTEM_HEALTH_CHECK = enum.auto()
        >>> catalog = RuntimeTaskCatalog(Kind, [
        ...     RuntimeTaskDefinition(Kind.SYSTEM_HEALTH_CHECK, "system-health-check",
        ...                           "System health check", "runtime_task.health"),
        ... ])
        >>> catalog.check()
        >>> catalog.from_wire_value("system-health-check")
        <Kind.SYSTEM_HEALTH_CHECK: 1>
    """

    def __init__(self, kind: type[K], definitions: Iterable[RuntimeTaskDefinition[K, P]]) -> None:
        """Index ``definitions`` for enum ``kind``."""
        self._kind_type = kind
        self._definitions = tuple(definitions)
        self._by_kind: dict[K, RuntimeTaskDefinition[K, P]] = {}
        self._by_wire: dict[str, RuntimeTaskDefinition[K, P]] = {}
        for definition in self._definitions:
            self._by_kind.setdefault(definition.kind, definition)
            self._by_wire.setdefault(definition.wire, definition)

    @property
    def kind_type(self) -> type[K]:
        """The runtime-task enum."""
        return self._kind_type

    def definitions(self) -> tuple[RuntimeTaskDefinition[K, P], ...]:
        """Every definition, in declaration order."""
        return self._definitions

    def definition(self, kind: K) -> RuntimeTaskDefinition[K, P]:
        """The definition of ``kind``.

        Raises:
            RuntimeTaskCatalogError: When ``kind`` has no definition.
        """
        try:
            return self._by_kind[kind]
        except KeyError:
            raise RuntimeTaskCatalogError(f"runtime task {kind!r} has no definition") from None

    def as_str(self, kind: K) -> str:
        """The wire value of ``kind``."""
        return self.definition(kind).wire

    def display_name(self, kind: K) -> str:
        """The display name of ``kind``."""
        return self.definition(kind).display

    def presentation(self, kind: K) -> P:
        """The presentation code of ``kind``."""
        return self.definition(kind).presentation

    def from_wire_value(self, value: str) -> K | None:
        """The kind whose wire value is exactly ``value``, ``None`` for unknown values."""
        definition = self._by_wire.get(value)
        return None if definition is None else definition.kind

    def problems(self) -> list[str]:
        """Every inconsistency :meth:`check` would report (empty when consistent)."""
        problems: list[str] = []
        seen_kinds: set[Any] = set()
        seen_wires: dict[str, Any] = {}
        for definition in self._definitions:
            kind = definition.kind
            if not isinstance(kind, self._kind_type):
                problems.append(f"{kind!r} is not a {self._kind_type.__name__}")
            if kind in seen_kinds:
                problems.append(f"runtime task {kind!r} is defined more than once")
            seen_kinds.add(kind)
            wire = definition.wire
            if not wire or wire.strip() != wire:
                problems.append(f"runtime task {kind!r} has an empty or untrimmed wire value")
            elif wire in seen_wires:
                problems.append(f"wire value {wire!r} is used by {seen_wires[wire]!r} and {kind!r}")
            else:
                seen_wires[wire] = kind
            if not definition.display.strip():
                problems.append(f"runtime task {kind!r} has an empty display name")
        problems.extend(
            f"runtime task {member!r} has no definition"
            for member in self._kind_type
            if member not in seen_kinds
        )
        if not problems:
            for member in self._kind_type:
                wire = self.as_str(member)
                if self.from_wire_value(wire) is not member:
                    problems.append(f"wire value {wire!r} does not parse back to {member!r}")
        return problems

    def check(self) -> None:
        """Verify the catalog: unique non-empty wire values, every member defined once,
        display names present, and ``from_wire_value(as_str(k)) is k`` for every member.

        Raises:
            RuntimeTaskCatalogError: Listing every inconsistency found.
        """
        problems = self.problems()
        if problems:
            raise RuntimeTaskCatalogError(
                "runtime task catalog is inconsistent: " + "; ".join(problems)
            )

    def __repr__(self) -> str:
        return f"RuntimeTaskCatalog({self._kind_type.__name__}, {len(self._definitions)} tasks)"


class RegisteredRuntimeTaskKind(Protocol):
    """A product runtime-task enum that knows its wire value and display name.

    Implement the three methods by delegating to a :class:`RuntimeTaskCatalog`; then
    :class:`RuntimeTaskName` can hold the enum or a legacy wire string.
    """

    def as_str(self) -> str:
        """The wire value."""
        ...

    def display_name(self) -> str:
        """The display name."""
        ...

    @classmethod
    def from_wire_value(cls, value: str) -> Any:
        """The member for ``value``, or ``None`` when unknown."""
        ...


def _legacy_display_name(wire: str) -> str:
    """The display name of a wire value no longer known: separators become spaces."""
    return wire.replace("-", " ").replace("_", " ")


class RuntimeTaskName(Generic[RK]):
    """A runtime task name: a known kind, or a legacy wire string kept unchanged.

    Serialises (pydantic) to the wire string; deserialising a value the kind enum no
    longer knows keeps it as a legacy name, so stored rows round-trip unchanged. Use it
    as a pydantic field type: ``name: RuntimeTaskName[SystemRuntimeTaskKind]``.
    """

    __slots__ = ("_known", "_wire")

    def __init__(self, known: RK | None, wire: str) -> None:
        """Prefer :meth:`of` and :meth:`parse`; this stores the two parts as given."""
        self._known = known
        self._wire = wire

    @classmethod
    def of(cls, kind: RK) -> RuntimeTaskName[RK]:
        """The name of a known kind."""
        return cls(kind, kind.as_str())

    @classmethod
    def parse(cls, kind_type: type[RK], value: str) -> RuntimeTaskName[RK]:
        """Parse a stored wire value: known when ``kind_type`` recognises it, else legacy."""
        known = cast("RK | None", kind_type.from_wire_value(value))
        return cls(known, value)

    def as_str(self) -> str:
        """The wire value (a legacy value exactly as stored)."""
        return self._wire

    def known(self) -> RK | None:
        """The kind, or ``None`` for a legacy name."""
        return self._known

    def display_name(self) -> str:
        """The kind's display name, or the legacy value with separators as spaces."""
        if self._known is not None:
            return self._known.display_name()
        return _legacy_display_name(self._wire)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RuntimeTaskName):
            return self._wire == other._wire
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._wire)

    def __str__(self) -> str:
        return self._wire

    def __repr__(self) -> str:
        state = "known" if self._known is not None else "legacy"
        return f"RuntimeTaskName({self._wire!r}, {state})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        args = get_args(source)
        if len(args) != 1 or not isinstance(args[0], type):
            raise RuntimeTaskCatalogError(
                "use RuntimeTaskName[YourKindEnum] as the field type so values can be parsed"
            )
        kind_type: type[Any] = args[0]

        def validate(value: Any) -> RuntimeTaskName[Any]:
            if isinstance(value, RuntimeTaskName):
                return value
            if isinstance(value, kind_type):
                return cls.of(value)
            if isinstance(value, str):
                return cls.parse(kind_type, value)
            raise ValueError(f"expected a {kind_type.__name__} wire value string")

        return core_schema.json_or_python_schema(
            json_schema=core_schema.no_info_after_validator_function(
                validate, core_schema.str_schema()
            ),
            python_schema=core_schema.no_info_plain_validator_function(validate),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda name: name.as_str(), when_used="always"
            ),
        )
