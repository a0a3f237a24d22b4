"""Read-only views of runtime leases for the admin API.

Every :class:`~aster_forge.runtime.RuntimeLeaseStore` lists its leases with
``list_runtime_leases()``, so any store (:class:`~aster_forge.db.RuntimeLeaseDbStore`,
:class:`~aster_forge.testing.InMemoryRuntimeLeaseStore` or a product's own) is a
:class:`RuntimeLeaseSource`. :class:`RuntimeLeaseTableReader` is the read-only
variant for code that has an engine but no lease store.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import RuntimeLeaseDbStore
from ..runtime._internal import Clock, RuntimeLeases, RuntimeLeaseView

__all__ = ["RuntimeLeaseSource", "RuntimeLeaseTableReader", "RuntimeLeaseView", "RuntimeLeases"]


@runtime_checkable
class RuntimeLeaseSource(Protocol):
    """Lists runtime leases for diagnostics (read-only).

    Every :class:`~aster_forge.runtime.RuntimeLeaseStore` satisfies it.
    """

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every lease row, expired ones included, ordered by ``lease_id``."""
        ...


class RuntimeLeaseTableReader:
    """A read-only :class:`RuntimeLeaseSource` on the ``runtime_leases`` table of an engine.

    A thin wrapper over :meth:`aster_forge.db.RuntimeLeaseDbStore.list_runtime_leases`
    that exposes no write operation; it judges expiry with the same "now" as the
    store: the server clock on PostgreSQL/MariaDB, ``clock`` on SQLite.

    Args:
        engine: The engine the lease store writes to.
        clock: Time source for SQLite.

    Raises:
        UnsupportedDatabaseBackendError: The engine is not SQLite, PostgreSQL or MariaDB.
    """

    __slots__ = ("_store",)

    def __init__(self, engine: AsyncEngine, *, clock: Clock | None = None) -> None:
        self._store = RuntimeLeaseDbStore(engine, clock=clock)

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every lease row (one read-only transaction).

        Raises:
            DatabaseOperationError: (or a subclass) when the query fails.
        """
        return await self._store.list_runtime_leases()

    def __repr__(self) -> str:
        return f"<RuntimeLeaseTableReader backend={self._store.backend.value}>"


def leases_json(leases: RuntimeLeases) -> dict[str, Any]:
    """Return ``{"now": ..., "items": [...]}`` for the admin API."""
    return {
        "now": leases.now.isoformat(),
        "items": [lease.to_json_dict() for lease in leases.leases],
    }
