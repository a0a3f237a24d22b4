"""Exceptions raised by :mod:`aster_forge.db`; driver errors are translated here."""

from __future__ import annotations

from .._errors import AsterForgeError


class AsterForgeDbError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.db` error."""
