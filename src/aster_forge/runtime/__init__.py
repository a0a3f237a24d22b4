"""Runtime machinery: health, components, lifecycle, leases, batch writer, temp dirs.

Nothing here imports :mod:`aster_forge.tasks` or :mod:`aster_forge.db`.
"""

from __future__ import annotations

# --- core (foundation) ---
from ._cancellation import CancellationToken
from ._clock import Clock, SystemClock, sleep_or_cancelled, utc_now
from .errors import AsterForgeRuntimeError

# --- health (issue 2) ---

# --- lifecycle (issue 3) ---

# --- buffered (issue 4) ---

# --- lease (issue 5) ---

__all__ = [
    "AsterForgeRuntimeError",
    "CancellationToken",
    "Clock",
    "SystemClock",
    "sleep_or_cancelled",
    "utc_now",
]
