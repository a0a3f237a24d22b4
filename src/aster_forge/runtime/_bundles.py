"""Bundles: adapting a ``fn(registry)`` into a bundle, and the shutdown-resource bundle."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from ._descriptors import RuntimeComponentKind
from ._phases import check_name, check_shutdown_phase, once_phase
from .errors import RuntimeComponentRegistrationError
from .protocols import RuntimeComponentBundle

if TYPE_CHECKING:
    from ._component import RuntimeComponentRegistry

__all__ = ["runtime_component", "shutdown_resource_component_after"]

R = TypeVar("R")


class _FnBundle:
    __slots__ = ("_fn",)

    def __init__(self, fn: Callable[[RuntimeComponentRegistry], object]) -> None:
        self._fn = fn

    def register(self, registry: RuntimeComponentRegistry) -> None:
        self._fn(registry)


def runtime_component(
    bundle: RuntimeComponentBundle | Callable[[RuntimeComponentRegistry], object],
) -> RuntimeComponentBundle:
    """Return ``bundle`` itself, or a bundle whose ``register`` calls ``fn(registry)``.

    Example:
        >>> def core_component() -> RuntimeComponentBundle:
        ...     def register(registry: RuntimeComponentRegistry) -> None:
        ...         registry.component("core", RuntimeComponentKind.CORE)
        ...     return runtime_component(register)
    """
    if isinstance(bundle, RuntimeComponentBundle):
        return bundle
    if callable(bundle):
        return _FnBundle(bundle)
    raise RuntimeComponentRegistrationError(
        f"runtime_component() needs a bundle or a callable, got {type(bundle).__name__}"
    )


def shutdown_resource_component_after(
    name: str,
    kind: RuntimeComponentKind,
    phase: str,
    depends_on: Sequence[str],
    resource: R,
    fn: Callable[[R], Awaitable[None]],
    *,
    timeout: timedelta | None = None,
) -> RuntimeComponentBundle:
    """A component owning a shutdown-only resource that one phase ``fn`` consumes once,
    after the ``depends_on`` components shut down."""
    check_name(name, "component name")
    check_shutdown_phase(phase, timeout)
    depends = tuple(depends_on)
    # One wrapper for every registration: a bundle registered twice still hands the
    # resource to one phase only (the duplicate reports it as already consumed).
    consume = once_phase(resource, fn)

    def register(registry: RuntimeComponentRegistry) -> None:
        registry.component_shutdown(name, kind, phase, depends, consume, timeout=timeout)

    return runtime_component(register)
