"""Background tasks: typed specs, registries, claiming, leases, dispatch and workers.

Imports :mod:`aster_forge.runtime` only; stores are protocols implemented by
:mod:`aster_forge.db` or by the product.
"""

from __future__ import annotations

from .errors import AsterForgeTasksError

# --- tasks core (issue 6) ---

# --- dedupe / schedule types (issue 5) ---

__all__ = [
    "AsterForgeTasksError",
]
