"""aster-forge: database-backed background tasks and runtime lifecycle for asyncio services.

The public API lives in the subpackages:

- :mod:`aster_forge.runtime`: health, components, startup/shutdown, leases, batch writer.
- :mod:`aster_forge.tasks`: typed task specs, registries, claiming, dispatch, workers.
- :mod:`aster_forge.db`: SQLAlchemy tables and stores for SQLite, PostgreSQL and MariaDB.
- :mod:`aster_forge.testing`: in-memory stores, conformance suites and a manual clock.
"""

from __future__ import annotations

from ._errors import AsterForgeError

__version__ = "0.1.0"

__all__ = ["AsterForgeError", "__version__"]
