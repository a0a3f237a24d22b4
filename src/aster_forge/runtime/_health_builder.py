"""HealthCheckRegistryBuilder: register checks that share a timeout and scopes."""

from __future__ import annotations

from datetime import timedelta
from typing import Self

from ._health_options import (
    HealthCheckOptions,
    HealthCheckRequirement,
    HealthCheckScopes,
    _check_grace,
    _check_timeout,
)
from ._health_registry import DEFAULT_CANCEL_GRACE, HealthCheck, HealthCheckRegistry
from .errors import DuplicateHealthCheckError, InvalidHealthCheckError

__all__ = ["HealthCheckRegistryBuilder"]


class HealthCheckRegistryBuilder:
    """Builds a :class:`HealthCheckRegistry` whose checks share a timeout and scopes.

    ``default_timeout`` and ``default_scopes`` apply (at :meth:`build`) to every check
    added with :meth:`register_required` / :meth:`register_optional`, whichever order
    the calls come in. Every method returns the builder for chaining.
    """

    __slots__ = ("_cancel_grace", "_default_scopes", "_default_timeout", "_items", "_names")

    def __init__(self) -> None:
        self._default_timeout: timedelta | None = None
        self._default_scopes = HealthCheckScopes.all()
        self._cancel_grace = DEFAULT_CANCEL_GRACE
        self._items: list[tuple[str, HealthCheckRequirement | HealthCheckOptions, HealthCheck]] = []
        self._names: set[str] = set()

    def default_timeout(self, timeout: timedelta | None) -> Self:
        """Set the shared timeout (``None``: the registry's 5 s default)."""
        self._default_timeout = _check_timeout(timeout)
        return self

    def default_scopes(self, scopes: HealthCheckScopes) -> Self:
        """Set the shared scopes (default: all scopes)."""
        if not isinstance(scopes, HealthCheckScopes):
            raise InvalidHealthCheckError(
                f"default scopes must be HealthCheckScopes, got {type(scopes).__name__}"
            )
        self._default_scopes = scopes
        return self

    def cancel_grace(self, grace: timedelta) -> Self:
        """Set the registry's cancel grace period."""
        _check_grace(grace)
        self._cancel_grace = grace
        return self

    def _add(
        self, name: str, how: HealthCheckRequirement | HealthCheckOptions, check: HealthCheck
    ) -> Self:
        if name in self._names:
            raise DuplicateHealthCheckError(f"a health check named {name!r} is already registered")
        if not isinstance(name, str) or not name:
            raise InvalidHealthCheckError(
                f"health check name must be a non-empty str, got {name!r}"
            )
        if not callable(check):
            raise InvalidHealthCheckError(f"health check {name!r} is not callable")
        self._names.add(name)
        self._items.append((name, how, check))
        return self

    def register_required(self, name: str, check: HealthCheck) -> Self:
        """Add a required check (failure -> UNHEALTHY) with the shared defaults."""
        return self._add(name, HealthCheckRequirement.REQUIRED, check)

    def register_optional(self, name: str, check: HealthCheck) -> Self:
        """Add an optional check (failure -> DEGRADED) with the shared defaults."""
        return self._add(name, HealthCheckRequirement.OPTIONAL, check)

    def register_with_options(
        self, name: str, options: HealthCheckOptions, check: HealthCheck
    ) -> Self:
        """Add a check with explicit options (the shared defaults do not apply)."""
        if not isinstance(options, HealthCheckOptions):
            raise InvalidHealthCheckError(
                f"options for health check {name!r} must be HealthCheckOptions"
            )
        return self._add(name, options, check)

    def build(self) -> HealthCheckRegistry:
        """Return a new registry with every added check, in the order added."""
        registry = HealthCheckRegistry(
            default_timeout=self._default_timeout, cancel_grace=self._cancel_grace
        )
        for name, how, check in self._items:
            if isinstance(how, HealthCheckOptions):
                options = how
            else:
                options = HealthCheckOptions(how, None, self._default_scopes)
            registry.register_with_options(name, options, check)
        return registry
