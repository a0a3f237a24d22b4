"""Health reports: statuses, typed details, component reports and the system report.

Aggregation rule: the system status is the worst component status (an empty report
is healthy). Reports have a stable JSON form (:meth:`SystemHealthReport.to_json_dict`)
that round-trips through :meth:`SystemHealthReport.from_json_dict`; a detail renders as
``{"key": "latency", "value": {"type": "duration_millis", "value": 42}}``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from .._json import load_json
from .errors import InvalidHealthDetailError, InvalidHealthReportError

if TYPE_CHECKING:
    from ._health_registry import HealthCheckScope
    from .protocols import HealthMetricsRecorder

__all__ = [
    "HealthComponentDetail",
    "HealthComponentDetailKind",
    "HealthComponentDetailValue",
    "HealthComponentReport",
    "HealthStatus",
    "SystemHealthReport",
]


I64_MIN: Final = -(2**63)

I64_MAX: Final = 2**63 - 1

U64_MAX: Final = 2**64 - 1


class HealthComponentDetailKind(enum.StrEnum):
    """The type tag of a :class:`HealthComponentDetailValue` (its JSON ``"type"``)."""

    TEXT = "text"
    """Free text: backend, driver, region, mode."""
    INTEGER = "integer"
    """A signed 64-bit count or offset (may be negative)."""
    UNSIGNED = "unsigned"
    """An unsigned 64-bit count: queue depth, pending count, retry count."""
    BOOLEAN = "boolean"
    """A flag: a switch, "fallback active"."""
    DURATION_MILLIS = "duration_millis"
    """A duration in whole milliseconds: latency, lag, age, timeout."""


def _check_int(kind: HealthComponentDetailKind, value: object, low: int, high: int) -> int:
    # bool is an int subclass in Python; refusing it keeps True from becoming 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidHealthDetailError(
            f"{kind.value} detail value must be an int, got {type(value).__name__}"
        )
    if not low <= value <= high:
        raise InvalidHealthDetailError(
            f"{kind.value} detail value {value} is outside the range [{low}, {high}]"
        )
    return value


@dataclass(frozen=True, slots=True)
class HealthComponentDetailValue:
    """A typed diagnostic value: text, integer, unsigned, boolean or duration (ms).

    Build values with the constructors (:meth:`text`, :meth:`integer`, :meth:`unsigned`,
    :meth:`boolean`, :meth:`duration_millis`, :meth:`duration`); they validate the
    range and Python type and raise :class:`InvalidHealthDetailError` on bad input.
    Render by type with ``match value.kind``; use :meth:`display_value` for text only.

    Attributes:
        kind: The type tag.
        value: The payload: ``str`` for TEXT, ``bool`` for BOOLEAN, ``int`` otherwise.
    """

    kind: HealthComponentDetailKind
    value: str | int | bool

    def __post_init__(self) -> None:
        kind = self.kind
        if not isinstance(kind, HealthComponentDetailKind):
            raise InvalidHealthDetailError(
                f"detail kind must be a HealthComponentDetailKind, got {kind!r}"
            )
        value = self.value
        if kind is HealthComponentDetailKind.TEXT:
            if not isinstance(value, str):
                raise InvalidHealthDetailError(
                    f"text detail value must be a str, got {type(value).__name__}"
                )
        elif kind is HealthComponentDetailKind.BOOLEAN:
            if not isinstance(value, bool):
                raise InvalidHealthDetailError(
                    f"boolean detail value must be a bool, got {type(value).__name__}"
                )
        elif kind is HealthComponentDetailKind.INTEGER:
            _check_int(kind, value, I64_MIN, I64_MAX)
        else:
            _check_int(kind, value, 0, U64_MAX)

    @classmethod
    def text(cls, value: str) -> HealthComponentDetailValue:
        """Return a TEXT value (backend, driver, region, mode ...)."""
        return cls(HealthComponentDetailKind.TEXT, value)

    @classmethod
    def integer(cls, value: int) -> HealthComponentDetailValue:
        """Return an INTEGER value; must fit a signed 64-bit integer."""
        return cls(HealthComponentDetailKind.INTEGER, value)

    @classmethod
    def unsigned(cls, value: int) -> HealthComponentDetailValue:
        """Return an UNSIGNED value; must be in ``[0, 2**64 - 1]``."""
        return cls(HealthComponentDetailKind.UNSIGNED, value)

    @classmethod
    def boolean(cls, value: bool) -> HealthComponentDetailValue:
        """Return a BOOLEAN value; only ``True``/``False`` are accepted."""
        return cls(HealthComponentDetailKind.BOOLEAN, value)

    @classmethod
    def duration_millis(cls, millis: int) -> HealthComponentDetailValue:
        """Return a DURATION_MILLIS value from whole milliseconds (``[0, 2**64 - 1]``)."""
        return cls(HealthComponentDetailKind.DURATION_MILLIS, millis)

    @classmethod
    def duration(cls, value: timedelta) -> HealthComponentDetailValue:
        """Return a DURATION_MILLIS value from a ``timedelta``.

        The schema's unit is the millisecond: a sub-millisecond remainder is dropped
        (``1.9 ms`` becomes ``1``). Negative durations raise.

        Raises:
            InvalidHealthDetailError: ``value`` is not a timedelta or is negative.
        """
        if not isinstance(value, timedelta):
            raise InvalidHealthDetailError(
                f"duration detail value must be a timedelta, got {type(value).__name__}"
            )
        if value < timedelta(0):
            raise InvalidHealthDetailError(f"duration detail value {value} is negative")
        return cls.duration_millis(value // timedelta(milliseconds=1))

    def display_value(self) -> str:
        """Return a human-readable rendering (``redis``, ``12``, ``true``, ``42ms``)."""
        kind = self.kind
        if kind is HealthComponentDetailKind.BOOLEAN:
            return "true" if self.value else "false"
        if kind is HealthComponentDetailKind.DURATION_MILLIS:
            return f"{self.value}ms"
        return str(self.value)

    def as_timedelta(self) -> timedelta | None:
        """Return a DURATION_MILLIS value as a ``timedelta``; ``None`` for other kinds."""
        if self.kind is HealthComponentDetailKind.DURATION_MILLIS:
            return timedelta(milliseconds=int(self.value))
        return None

    def to_json_dict(self) -> dict[str, Any]:
        """Return ``{"type": <kind>, "value": <value>}``."""
        return {"type": self.kind.value, "value": self.value}

    @classmethod
    def from_json_dict(cls, data: object) -> HealthComponentDetailValue:
        """Parse ``{"type": ..., "value": ...}`` strictly.

        Raises:
            InvalidHealthDetailError: ``data`` is not an object with exactly ``type`` and
                ``value``, the type tag is unknown, or the value is invalid for it.
        """
        if not isinstance(data, Mapping):
            raise InvalidHealthDetailError(
                f"detail value must be a JSON object, got {type(data).__name__}"
            )
        if set(data) != {"type", "value"}:
            raise InvalidHealthDetailError(
                f"detail value must have exactly the keys 'type' and 'value', got {sorted(data)}"
            )
        tag = data["type"]
        try:
            kind = HealthComponentDetailKind(tag)
        except ValueError:
            known = ", ".join(k.value for k in HealthComponentDetailKind)
            raise InvalidHealthDetailError(
                f"unknown detail value type {tag!r} (expected one of: {known})"
            ) from None
        return cls(kind, data["value"])


@dataclass(frozen=True, slots=True)
class HealthComponentDetail:
    """One keyed diagnostic value on a component report.

    Attributes:
        key: A short, stable key (``backend``, ``queue_depth``, ``latency``).
        value: The typed value.
    """

    key: str
    value: HealthComponentDetailValue

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise InvalidHealthDetailError(f"detail key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.value, HealthComponentDetailValue):
            raise InvalidHealthDetailError(
                f"detail {self.key!r} value must be a HealthComponentDetailValue, "
                f"got {type(self.value).__name__}"
            )

    def to_json_dict(self) -> dict[str, Any]:
        """Return ``{"key": ..., "value": {"type": ..., "value": ...}}``."""
        return {"key": self.key, "value": self.value.to_json_dict()}

    @classmethod
    def from_json_dict(cls, data: object) -> HealthComponentDetail:
        """Parse the JSON object produced by :meth:`to_json_dict`.

        Raises:
            InvalidHealthDetailError: The object is malformed or its value invalid.
        """
        if not isinstance(data, Mapping):
            raise InvalidHealthDetailError(
                f"detail must be a JSON object, got {type(data).__name__}"
            )
        if set(data) != {"key", "value"}:
            raise InvalidHealthDetailError(
                f"detail must have exactly the keys 'key' and 'value', got {sorted(data)}"
            )
        return cls(data["key"], HealthComponentDetailValue.from_json_dict(data["value"]))


_SEVERITY: dict[str, int] = {"healthy": 0, "degraded": 1, "unhealthy": 2}


@functools.total_ordering
class HealthStatus(enum.Enum):
    """A component or system health status, ordered so the worst compares greatest.

    ``HEALTHY < DEGRADED < UNHEALTHY``; ``max(statuses)`` is the aggregate status.
    """

    HEALTHY = "healthy"
    """Working normally."""
    DEGRADED = "degraded"
    """Working with reduced capability (an optional dependency is failing)."""
    UNHEALTHY = "unhealthy"
    """Not working; the instance should not take traffic."""

    def metric_value(self) -> int:
        """Return the metrics encoding: healthy=0, degraded=1, unhealthy=2."""
        return _SEVERITY[self.value]

    @classmethod
    def parse(cls, value: object) -> HealthStatus:
        """Parse a wire value strictly.

        Raises:
            InvalidHealthReportError: ``value`` is not one of the three wire values.
        """
        if isinstance(value, str):
            for member in cls:
                if member.value == value:
                    return member
        raise InvalidHealthReportError(
            f"unknown health status {value!r} (expected healthy, degraded or unhealthy)"
        )

    @classmethod
    def worst(cls, statuses: Iterable[HealthStatus]) -> HealthStatus:
        """Return the worst of ``statuses``; ``HEALTHY`` when there are none."""
        return max(statuses, default=cls.HEALTHY)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, HealthStatus):
            return NotImplemented
        return _SEVERITY[self.value] < _SEVERITY[other.value]


def _seconds(duration: timedelta | None) -> float:
    return 0.0 if duration is None else duration.total_seconds()


def _parse_duration(data: Mapping[str, Any], what: str) -> timedelta | None:
    raw = data.get("duration_seconds")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise InvalidHealthReportError(f"{what} duration_seconds must be a number or null")
    if not math.isfinite(raw) or raw < 0:
        raise InvalidHealthReportError(
            f"{what} duration_seconds {raw} is not a finite, >= 0 number"
        )
    try:
        return timedelta(seconds=raw)
    except OverflowError:
        raise InvalidHealthReportError(f"{what} duration_seconds {raw} is too large") from None


def _check_keys(data: object, required: set[str], optional: set[str], what: str) -> None:
    if not isinstance(data, Mapping):
        raise InvalidHealthReportError(f"{what} must be a JSON object, got {type(data).__name__}")
    keys = set(data)
    missing = required - keys
    unknown = keys - required - optional
    if missing or unknown:
        raise InvalidHealthReportError(
            f"{what} has missing keys {sorted(missing)} / unknown keys {sorted(unknown)}"
        )


@dataclass(frozen=True, slots=True)
class HealthComponentReport:
    """The health of one component, as returned by one health check.

    Build with :meth:`healthy`, :meth:`degraded` or :meth:`unhealthy`, then chain
    :meth:`with_duration` / :meth:`with_detail` (each returns a new report).

    Attributes:
        name: Component name (low-cardinality: it becomes a metrics label).
        status: The component status.
        message: A short operator-facing message.
        duration: How long the check took; ``None`` until measured (the registry
            fills it in when the check did not).
        details: Typed diagnostic values, in insertion order, keys unique.
    """

    name: str
    status: HealthStatus
    message: str
    duration: timedelta | None = None
    details: tuple[HealthComponentDetail, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidHealthReportError(
                f"component name must be a non-empty str, got {self.name!r}"
            )
        if not isinstance(self.status, HealthStatus):
            raise InvalidHealthReportError(
                f"component status must be a HealthStatus, got {self.status!r}"
            )
        if not isinstance(self.message, str):
            raise InvalidHealthReportError(
                f"component message must be a str, got {type(self.message).__name__}"
            )
        if self.duration is not None and (
            not isinstance(self.duration, timedelta) or self.duration < timedelta(0)
        ):
            raise InvalidHealthReportError(
                f"component duration must be a non-negative timedelta, got {self.duration!r}"
            )
        keys = [d.key for d in self.details]
        if len(keys) != len(set(keys)):
            raise InvalidHealthDetailError(f"component {self.name!r} has duplicate detail keys")

    @classmethod
    def healthy(cls, name: str, message: str) -> HealthComponentReport:
        """Return a HEALTHY report for ``name``."""
        return cls(name, HealthStatus.HEALTHY, message)

    @classmethod
    def degraded(cls, name: str, message: str) -> HealthComponentReport:
        """Return a DEGRADED report for ``name``."""
        return cls(name, HealthStatus.DEGRADED, message)

    @classmethod
    def unhealthy(cls, name: str, message: str) -> HealthComponentReport:
        """Return an UNHEALTHY report for ``name``."""
        return cls(name, HealthStatus.UNHEALTHY, message)

    def with_duration(self, duration: timedelta) -> HealthComponentReport:
        """Return a copy carrying a duration the product measured itself."""
        return dataclasses.replace(self, duration=duration)

    def with_detail(self, key: str, value: HealthComponentDetailValue) -> HealthComponentReport:
        """Return a copy with one more typed detail.

        Raises:
            InvalidHealthDetailError: ``value`` is not a :class:`HealthComponentDetailValue`
                or ``key`` is empty or already present.
        """
        detail = HealthComponentDetail(key, value)
        if any(d.key == key for d in self.details):
            raise InvalidHealthDetailError(
                f"component {self.name!r} already has a detail named {key!r}"
            )
        return dataclasses.replace(self, details=(*self.details, detail))

    def detail(self, key: str) -> HealthComponentDetailValue | None:
        """Return the typed value stored under ``key``, or ``None``."""
        for item in self.details:
            if item.key == key:
                return item.value
        return None

    def duration_seconds(self) -> float:
        """Return the duration in seconds (``0.0`` when unknown), for metrics."""
        return _seconds(self.duration)

    def has_issue(self) -> bool:
        """Return whether the status is DEGRADED or UNHEALTHY."""
        return self.status is not HealthStatus.HEALTHY

    def describe(self) -> str:
        """Return ``name status: message`` plus details (``[key=value, ...]``) if any."""
        text = f"{self.name} {self.status.value}: {self.message}"
        if self.details:
            rendered = ", ".join(f"{d.key}={d.value.display_value()}" for d in self.details)
            text = f"{text} [{rendered}]"
        return text

    def to_json_dict(self) -> dict[str, Any]:
        """Return the stable JSON object for this report."""
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message,
            "duration_seconds": None if self.duration is None else self.duration.total_seconds(),
            "details": [d.to_json_dict() for d in self.details],
        }

    @classmethod
    def from_json_dict(cls, data: object) -> HealthComponentReport:
        """Parse the object produced by :meth:`to_json_dict` strictly.

        Raises:
            InvalidHealthReportError: A field is missing, unknown or mistyped.
            InvalidHealthDetailError: A detail is invalid.
        """
        _check_keys(
            data, {"name", "status", "message"}, {"duration_seconds", "details"}, "component"
        )
        assert isinstance(data, Mapping)
        raw_details = data.get("details", [])
        if not isinstance(raw_details, list):
            raise InvalidHealthReportError("component details must be a JSON array")
        return cls(
            name=data["name"],
            status=HealthStatus.parse(data["status"]),
            message=data["message"],
            duration=_parse_duration(data, "component"),
            details=tuple(HealthComponentDetail.from_json_dict(d) for d in raw_details),
        )


def _with_measured_duration(report: HealthComponentReport, seconds: float) -> HealthComponentReport:
    """Return ``report`` with a registry-measured duration, skipping re-validation.

    The hot path of a health run: ``report`` is already valid and ``seconds`` is a
    non-negative ``perf_counter`` difference, so ``dataclasses.replace`` (which would
    re-run ``__post_init__``) is avoided.
    """
    copy = object.__new__(HealthComponentReport)
    for field in ("name", "status", "message", "details"):
        object.__setattr__(copy, field, getattr(report, field))
    object.__setattr__(copy, "duration", timedelta(seconds=max(seconds, 0.0)))
    return copy


@dataclass(frozen=True, slots=True)
class SystemHealthReport:
    """The aggregate of component reports from one health run, in registration order.

    Attributes:
        components: Component reports in registration order (stored as a tuple).
        duration: Wall time of the whole run; ``None`` when built by hand.
    """

    components: Sequence[HealthComponentReport] = ()
    duration: timedelta | None = None

    def __post_init__(self) -> None:
        # Accept any sequence (a list from product code) but store an immutable tuple.
        components = tuple(self.components)
        for item in components:
            if not isinstance(item, HealthComponentReport):
                raise InvalidHealthReportError(
                    f"components must be HealthComponentReport, got {type(item).__name__}"
                )
        object.__setattr__(self, "components", components)
        if self.duration is not None and (
            not isinstance(self.duration, timedelta) or self.duration < timedelta(0)
        ):
            raise InvalidHealthReportError(
                f"report duration must be a non-negative timedelta, got {self.duration!r}"
            )

    def status(self) -> HealthStatus:
        """Return the worst component status (HEALTHY when there are no components)."""
        return HealthStatus.worst(c.status for c in self.components)

    def has_issues(self) -> bool:
        """Return whether any component is DEGRADED or UNHEALTHY."""
        return any(c.status is not HealthStatus.HEALTHY for c in self.components)

    def duration_seconds(self) -> float:
        """Return the run's wall time in seconds (``0.0`` when unknown), for metrics."""
        return _seconds(self.duration)

    def issues(self) -> tuple[HealthComponentReport, ...]:
        """Return the DEGRADED and UNHEALTHY components, in order."""
        return tuple(c for c in self.components if c.status is not HealthStatus.HEALTHY)

    def summary(self) -> str:
        """Return ``name status, name status, ...`` (``no health checks`` when empty)."""
        if not self.components:
            return "no health checks"
        return ", ".join(f"{c.name} {c.status.value}" for c in self.components)

    def details(self) -> str:
        """Return every component's ``name status: message [details]``, joined by ``; ``."""
        if not self.components:
            return "no health checks"
        return "; ".join(c.describe() for c in self.components)

    def issue_summary(self) -> str:
        """Like :meth:`summary` but only for issues (``no issues`` when there are none)."""
        issues = self.issues()
        if not issues:
            return "no issues"
        return ", ".join(f"{c.name} {c.status.value}" for c in issues)

    def issue_details(self) -> str:
        """Like :meth:`details` but only for issues (``no issues`` when there are none)."""
        issues = self.issues()
        if not issues:
            return "no issues"
        return "; ".join(c.describe() for c in issues)

    def record_metrics(
        self, scope: HealthCheckScope | str, recorder: HealthMetricsRecorder
    ) -> None:
        """Hand this report to a metrics backend.

        Calls ``recorder.record_health_report`` once, then
        ``recorder.record_health_component`` for each component in order.

        Args:
            scope: The scope the report was run for (``"readiness"``, ``"diagnostics"`` ...).
            recorder: Any :class:`~aster_forge.runtime.HealthMetricsRecorder`.
        """
        label = scope if isinstance(scope, str) else scope.value
        recorder.record_health_report(label, self.status(), self.duration_seconds())
        for component in self.components:
            recorder.record_health_component(label, component, component.duration_seconds())

    def to_json_dict(self) -> dict[str, Any]:
        """Return the stable JSON object: status, duration_seconds and components."""
        return {
            "status": self.status().value,
            "duration_seconds": None if self.duration is None else self.duration.total_seconds(),
            "components": [c.to_json_dict() for c in self.components],
        }

    def to_json(self, *, indent: int | None = None) -> str:
        """Return :meth:`to_json_dict` serialised as a JSON string."""
        return json.dumps(self.to_json_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_json_dict(cls, data: object) -> SystemHealthReport:
        """Parse the object produced by :meth:`to_json_dict` strictly.

        The ``status`` field is derived data: it must agree with the components.

        Raises:
            InvalidHealthReportError: A field is missing, unknown, mistyped or inconsistent.
            InvalidHealthDetailError: A component detail is invalid.
        """
        _check_keys(data, {"components"}, {"status", "duration_seconds"}, "report")
        assert isinstance(data, Mapping)
        raw = data["components"]
        if not isinstance(raw, list):
            raise InvalidHealthReportError("report components must be a JSON array")
        report = cls(
            tuple(HealthComponentReport.from_json_dict(c) for c in raw),
            _parse_duration(data, "report"),
        )
        if "status" in data and HealthStatus.parse(data["status"]) is not report.status():
            raise InvalidHealthReportError(
                f"report status {data['status']!r} disagrees with its components "
                f"({report.status().value})"
            )
        return report

    @classmethod
    def from_json(cls, text: str | bytes) -> SystemHealthReport:
        """Parse a JSON string produced by :meth:`to_json`.

        Raises:
            InvalidHealthReportError: The text is not valid JSON or not a valid report.
        """
        data = load_json(text, what="health report", error=InvalidHealthReportError)
        return cls.from_json_dict(data)
