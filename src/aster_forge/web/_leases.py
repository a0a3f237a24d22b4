"""Read-only views of runtime leases for the admin API.

:class:`~aster_forge.runtime.RuntimeLeaseStore` only exposes owner-conditional
operations, so listing every lease is a separate, read-only concern: a
:class:`RuntimeLeaseSource`. :class:`RuntimeLeaseTableReader` implements it with one
``SELECT`` on the ``runtime_leases`` table of :mod:`aster_forge.db`; products with
another coordination backend implement the protocol themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..db import DatabaseBackend, runtime_leases_table
from ..db._time import database_now
from ..db._translate import run_transaction
from ..runtime import Clock, SystemClock
from ..runtime._lease_types import NEVER_EXPIRES

__all__ = ["RuntimeLeaseSource", "RuntimeLeaseTableReader", "RuntimeLeaseView", "RuntimeLeases"]


@dataclass(frozen=True, slots=True)
class RuntimeLeaseView:
    """One runtime lease row as the admin API shows it.

    Attributes:
        lease_id: The lease (a singleton worker group).
        owner_id: The process that holds (or last held) it.
        expires_at: When it expires unless renewed.
        expired: Whether ``expires_at`` is past at :attr:`RuntimeLeases.now`; an
            expired row is free for any instance to take.
        acquired_at: When the current owner acquired it, if known.
        updated_at: When it was last renewed, if known.
    """

    lease_id: str
    owner_id: str
    expires_at: datetime
    expired: bool
    acquired_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def never_expires(self) -> bool:
        """Whether the TTL saturated (the lease only ends by release)."""
        return self.expires_at >= NEVER_EXPIRES

    def to_json_dict(self) -> dict[str, Any]:
        """Return the admin API's JSON object for this lease."""
        return {
            "lease_id": self.lease_id,
            "owner_id": self.owner_id,
            "expires_at": self.expires_at.isoformat(),
            "expired": self.expired,
            "never_expires": self.never_expires,
            "acquired_at": None if self.acquired_at is None else self.acquired_at.isoformat(),
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class RuntimeLeases:
    """A consistent read of every lease, with the clock value expiry was judged at.

    Attributes:
        now: The store's "now" (the database server's clock where it has one).
        leases: The leases, ordered by ``lease_id``.
    """

    now: datetime
    leases: tuple[RuntimeLeaseView, ...]


@runtime_checkable
class RuntimeLeaseSource(Protocol):
    """Lists runtime leases for diagnostics (read-only)."""

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every lease row, expired ones included, ordered by ``lease_id``."""
        ...


class RuntimeLeaseTableReader:
    """A :class:`RuntimeLeaseSource` reading the ``runtime_leases`` table of an engine.

    Uses the same notion of "now" as :class:`~aster_forge.db.RuntimeLeaseDbStore`:
    the server clock on PostgreSQL/MariaDB, ``clock`` on SQLite.

    Args:
        engine: The engine the lease store writes to.
        clock: Time source for SQLite.

    Raises:
        UnsupportedDatabaseBackendError: The engine is not SQLite, PostgreSQL or MariaDB.
    """

    __slots__ = ("_backend", "_clock", "_engine", "_table")

    def __init__(self, engine: AsyncEngine, *, clock: Clock | None = None) -> None:
        self._engine = engine
        self._backend = DatabaseBackend.of(engine)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._table = runtime_leases_table(sa.MetaData())

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every lease row (one read-only transaction).

        Raises:
            DatabaseOperationError: (or a subclass) when the query fails.
        """
        t = self._table
        query = sa.select(t).order_by(t.c.lease_id)

        async def body(conn: AsyncConnection) -> RuntimeLeases:
            now = await database_now(conn, self._clock)
            rows = (await conn.execute(query)).all()
            return RuntimeLeases(
                now=now,
                leases=tuple(
                    RuntimeLeaseView(
                        lease_id=row.lease_id,
                        owner_id=row.owner_id,
                        expires_at=row.expires_at,
                        expired=row.expires_at <= now,
                        acquired_at=row.acquired_at,
                        updated_at=row.updated_at,
                    )
                    for row in rows
                ),
            )

        return await run_transaction(self._engine, "list runtime leases", body)

    def __repr__(self) -> str:
        return f"<RuntimeLeaseTableReader backend={self._backend.value}>"


def leases_json(leases: RuntimeLeases) -> dict[str, Any]:
    """Return ``{"now": ..., "items": [...]}`` for the admin API."""
    return {
        "now": leases.now.isoformat(),
        "items": [lease.to_json_dict() for lease in leases.leases],
    }
