"""Errors of the example product (``aster_forge._demo``)."""

from __future__ import annotations

from aster_forge import AsterForgeError

__all__ = ["DemoError", "DemoPortInUseError"]


class DemoError(AsterForgeError):
    """Base of the demo product's errors."""


class DemoPortInUseError(DemoError, OSError):
    """Raised when the demo's HTTP address is taken or cannot be bound."""
