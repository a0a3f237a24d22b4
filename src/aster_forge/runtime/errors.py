"""Exceptions raised by :mod:`aster_forge.runtime`."""

from __future__ import annotations

from .._errors import AsterForgeError

__all__ = ["AsterForgeRuntimeError"]


class AsterForgeRuntimeError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.runtime` error."""
