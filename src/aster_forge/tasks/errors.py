"""Exceptions raised by :mod:`aster_forge.tasks`."""

from __future__ import annotations

from .._errors import AsterForgeError


class AsterForgeTasksError(AsterForgeError):
    """Raised as the base class of every :mod:`aster_forge.tasks` error."""


# --- tasks core (issue 6) ---

# --- dedupe / schedule (issue 5) ---
