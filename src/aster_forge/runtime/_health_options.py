"""Health check options: scopes, requirement, timeout, and the registered descriptor."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._health import HealthStatus
from .errors import InvalidHealthCheckError

__all__ = [
    "DEFAULT_HEALTH_CHECK_TIMEOUT",
    "HealthCheckDescriptor",
    "HealthCheckOptions",
    "HealthCheckRequirement",
    "HealthCheckScope",
    "HealthCheckScopes",
    "check_health_timeout",
]


DEFAULT_HEALTH_CHECK_TIMEOUT = timedelta(seconds=5)

"""The registry's default per-check timeout when neither check nor registry sets one."""


class HealthCheckScope(enum.StrEnum):
    """Which view a health run serves.

    LIVENESS: is the process alive (usually no database/cache/external probes).
    READINESS: can this instance take traffic (e.g. a database ping).
    DIAGNOSTICS: the full operator view (database, cache, storage, mail, tasks).
    """

    LIVENESS = "liveness"
    """Process liveness: cheap, no external probes."""
    READINESS = "readiness"
    """Ability to serve traffic."""
    DIAGNOSTICS = "diagnostics"
    """Full operator diagnostics."""

    @classmethod
    def parse(cls, value: str) -> HealthCheckScope:
        """Parse a wire value strictly.

        Raises:
            InvalidHealthCheckError: ``value`` is not a known scope.
        """
        for member in cls:
            if member.value == value:
                return member
        raise InvalidHealthCheckError(
            f"unknown health check scope {value!r} (expected liveness, readiness or diagnostics)"
        )


_ORDER = tuple(HealthCheckScope)


@dataclass(frozen=True, slots=True)
class HealthCheckScopes:
    """A non-empty set of :class:`HealthCheckScope` a check runs in.

    Build with the named constructors (``HealthCheckScopes.readiness_and_diagnostics()``)
    or :meth:`of`; combine with ``|``.

    Attributes:
        scopes: The member scopes.
    """

    scopes: frozenset[HealthCheckScope]

    def __post_init__(self) -> None:
        scopes = frozenset(self.scopes)
        if not scopes:
            raise InvalidHealthCheckError("a health check needs at least one scope")
        bad = [s for s in scopes if not isinstance(s, HealthCheckScope)]
        if bad:
            raise InvalidHealthCheckError(f"not HealthCheckScope values: {bad!r}")
        object.__setattr__(self, "scopes", scopes)

    @classmethod
    def of(cls, *scopes: HealthCheckScope) -> HealthCheckScopes:
        """Return the set of the given scopes (at least one)."""
        return cls(frozenset(scopes))

    @classmethod
    def liveness(cls) -> HealthCheckScopes:
        """Return ``{LIVENESS}``."""
        return cls.of(HealthCheckScope.LIVENESS)

    @classmethod
    def readiness(cls) -> HealthCheckScopes:
        """Return ``{READINESS}``."""
        return cls.of(HealthCheckScope.READINESS)

    @classmethod
    def diagnostics(cls) -> HealthCheckScopes:
        """Return ``{DIAGNOSTICS}``."""
        return cls.of(HealthCheckScope.DIAGNOSTICS)

    @classmethod
    def liveness_and_readiness(cls) -> HealthCheckScopes:
        """Return ``{LIVENESS, READINESS}``."""
        return cls.of(HealthCheckScope.LIVENESS, HealthCheckScope.READINESS)

    @classmethod
    def liveness_and_diagnostics(cls) -> HealthCheckScopes:
        """Return ``{LIVENESS, DIAGNOSTICS}``."""
        return cls.of(HealthCheckScope.LIVENESS, HealthCheckScope.DIAGNOSTICS)

    @classmethod
    def readiness_and_diagnostics(cls) -> HealthCheckScopes:
        """Return ``{READINESS, DIAGNOSTICS}``."""
        return cls.of(HealthCheckScope.READINESS, HealthCheckScope.DIAGNOSTICS)

    @classmethod
    def all(cls) -> HealthCheckScopes:
        """Return every scope (the default for a registration)."""
        return cls(frozenset(HealthCheckScope))

    def contains(self, scope: HealthCheckScope) -> bool:
        """Return whether ``scope`` is a member."""
        return scope in self.scopes

    def __contains__(self, scope: object) -> bool:
        return scope in self.scopes

    def __iter__(self) -> Iterator[HealthCheckScope]:
        # Stable order (liveness, readiness, diagnostics) for display and JSON.
        return (s for s in _ORDER if s in self.scopes)

    def __or__(self, other: HealthCheckScopes) -> HealthCheckScopes:
        if not isinstance(other, HealthCheckScopes):
            return NotImplemented
        return HealthCheckScopes(self.scopes | other.scopes)


class HealthCheckRequirement(enum.StrEnum):
    """How a framework-level failure (timeout, exception) of a check is reported.

    REQUIRED maps it to UNHEALTHY, OPTIONAL to DEGRADED.
    """

    REQUIRED = "required"
    """A key component: a failure makes the instance unhealthy."""
    OPTIONAL = "optional"
    """An optional component: a failure only degrades the instance."""

    def failure_status(self) -> HealthStatus:
        """Return the status a timeout or exception maps to."""
        if self is HealthCheckRequirement.REQUIRED:
            return HealthStatus.UNHEALTHY
        return HealthStatus.DEGRADED


def check_health_timeout(timeout: timedelta | None) -> timedelta | None:
    """Return ``timeout`` if it is ``None`` or a positive ``timedelta``, else raise."""
    if timeout is None:
        return None
    if not isinstance(timeout, timedelta):
        raise InvalidHealthCheckError(
            f"health check timeout must be a timedelta or None, got {type(timeout).__name__}"
        )
    if timeout <= timedelta(0):
        raise InvalidHealthCheckError(f"health check timeout must be positive, got {timeout}")
    return timeout


@dataclass(frozen=True, slots=True)
class HealthCheckOptions:
    """How a check is registered: requirement, timeout and scopes.

    Attributes:
        requirement: REQUIRED or OPTIONAL.
        timeout: Per-check timeout; ``None`` uses the registry default.
        scopes: Scopes the check runs in (default: all of them).
    """

    requirement: HealthCheckRequirement
    timeout: timedelta | None = None
    scopes: HealthCheckScopes = dataclasses.field(default_factory=HealthCheckScopes.all)

    def __post_init__(self) -> None:
        if not isinstance(self.requirement, HealthCheckRequirement):
            raise InvalidHealthCheckError(
                f"requirement must be a HealthCheckRequirement, got {self.requirement!r}"
            )
        check_health_timeout(self.timeout)
        if not isinstance(self.scopes, HealthCheckScopes):
            raise InvalidHealthCheckError(
                f"scopes must be HealthCheckScopes, got {type(self.scopes).__name__}"
            )

    @classmethod
    def required(cls, timeout: timedelta | None = None) -> HealthCheckOptions:
        """Return options for a key component (failure -> UNHEALTHY)."""
        return cls(HealthCheckRequirement.REQUIRED, timeout)

    @classmethod
    def optional(cls, timeout: timedelta | None = None) -> HealthCheckOptions:
        """Return options for an optional component (failure -> DEGRADED)."""
        return cls(HealthCheckRequirement.OPTIONAL, timeout)

    def with_scopes(
        self, scopes: HealthCheckScopes | HealthCheckScope | Iterable[HealthCheckScope]
    ) -> HealthCheckOptions:
        """Return a copy that runs only in ``scopes``."""
        if isinstance(scopes, HealthCheckScope):
            scopes = HealthCheckScopes.of(scopes)
        elif not isinstance(scopes, HealthCheckScopes):
            scopes = HealthCheckScopes(frozenset(scopes))
        return dataclasses.replace(self, scopes=scopes)

    def with_timeout(self, timeout: timedelta | None) -> HealthCheckOptions:
        """Return a copy with another timeout (``None``: registry default)."""
        return dataclasses.replace(self, timeout=timeout)


@dataclass(frozen=True, slots=True)
class HealthCheckDescriptor:
    """What is registered under one name, for admin UIs, diagnostics APIs and catalogs.

    Attributes:
        name: The registration name.
        requirement: REQUIRED or OPTIONAL.
        timeout: The effective timeout (the check's own or the registry default).
        scopes: The scopes the check runs in.
    """

    name: str
    requirement: HealthCheckRequirement
    timeout: timedelta
    scopes: HealthCheckScopes

    def runs_in(self, scope: HealthCheckScope) -> bool:
        """Return whether the check runs for ``scope``."""
        return scope in self.scopes

    def to_json_dict(self) -> dict[str, Any]:
        """Return ``{"name", "requirement", "timeout_seconds", "scopes"}``."""
        return {
            "name": self.name,
            "requirement": self.requirement.value,
            "timeout_seconds": self.timeout.total_seconds(),
            "scopes": [scope.value for scope in self.scopes],
        }
