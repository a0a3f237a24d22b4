""":class:`RuntimeLeaseDbStore`: runtime leases on the ``runtime_leases`` table."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..runtime import RuntimeLease
from ..runtime._internal import (
    RuntimeLeases,
    RuntimeLeaseView,
    saturating_expiry,
    validate_lease_identifier,
    validate_lease_ttl,
)
from ._engine_store import EngineBackedStore
from ._tables import runtime_leases_table
from ._translate import run_transaction

__all__ = ["RuntimeLeaseDbStore"]


class RuntimeLeaseDbStore(EngineBackedStore):
    """A :class:`~aster_forge.runtime.RuntimeLeaseStore` on the ``runtime_leases`` table.

    Each operation is one short transaction. PostgreSQL and SQLite use an atomic
    ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (the lease changes hands only when
    free, expired or already ours); MariaDB uses ``INSERT ... ON DUPLICATE KEY UPDATE``
    with ordered conditional assignments, then reads the row it locked. "Now" is the
    server's clock on PostgreSQL/MariaDB and ``clock`` on SQLite.

    Args:
        engine: The async engine (the table must exist; see :func:`create_runtime_leases_table`).
        clock: Time source for SQLite (ignored where the server has a clock).

    Raises:
        UnsupportedDatabaseBackendError: When the engine is not SQLite, PostgreSQL or MariaDB.
    """

    def _define_table(self, metadata: sa.MetaData) -> sa.Table:
        return runtime_leases_table(metadata)

    async def try_acquire(
        self, lease_id: str, owner_id: str, ttl: timedelta
    ) -> RuntimeLease | None:
        """Take the lease if free, expired, or already ours (see the protocol)."""
        _validate(lease_id, owner_id, ttl)

        async def body(conn: AsyncConnection) -> RuntimeLease | None:
            now = await self._backend_sql.now_value(conn, self._clock)
            wanted = RuntimeLease(lease_id, owner_id, saturating_expiry(now, ttl))
            return await self._backend_sql.acquire_runtime_lease(conn, self._table, wanted, now)

        return await run_transaction(self._engine, "acquire runtime lease", body)

    async def renew(self, lease_id: str, owner_id: str, ttl: timedelta) -> RuntimeLease | None:
        """Extend our unexpired lease (see the protocol)."""
        _validate(lease_id, owner_id, ttl)
        t = self._table

        async def body(conn: AsyncConnection) -> RuntimeLease | None:
            now = await self._backend_sql.now_value(conn, self._clock)
            expires_at = saturating_expiry(now, ttl)
            result = await conn.execute(
                sa.update(t)
                .where(
                    t.c.lease_id == lease_id,
                    t.c.owner_id == owner_id,
                    t.c.expires_at > now,
                )
                .values(expires_at=expires_at, updated_at=now)
            )
            if result.rowcount != 1:
                return None
            return RuntimeLease(lease_id, owner_id, expires_at)

        return await run_transaction(self._engine, "renew runtime lease", body)

    async def release(self, lease_id: str, owner_id: str) -> bool:
        """Delete our lease row so the lease is immediately acquirable (see the protocol)."""
        validate_lease_identifier("lease_id", lease_id)
        validate_lease_identifier("owner_id", owner_id)
        t = self._table

        async def body(conn: AsyncConnection) -> bool:
            result = await conn.execute(
                sa.delete(t).where(t.c.lease_id == lease_id, t.c.owner_id == owner_id)
            )
            return result.rowcount == 1

        return await run_transaction(self._engine, "release runtime lease", body)

    async def current_lease(self, lease_id: str) -> RuntimeLease | None:
        """Return the unexpired lease on ``lease_id`` (any owner), or ``None``; for diagnostics."""
        validate_lease_identifier("lease_id", lease_id)
        t = self._table

        async def body(conn: AsyncConnection) -> RuntimeLease | None:
            now = await self._backend_sql.now_value(conn, self._clock)
            row = (
                await conn.execute(
                    sa.select(t.c.owner_id, t.c.expires_at).where(
                        t.c.lease_id == lease_id, t.c.expires_at > now
                    )
                )
            ).first()
            return None if row is None else RuntimeLease(lease_id, row.owner_id, row.expires_at)

        return await run_transaction(self._engine, "read runtime lease", body)

    async def list_runtime_leases(self) -> RuntimeLeases:
        """Return every lease row, expired ones included (one read-only transaction).

        Rows are ordered by ``lease_id`` in code-point order on every backend.

        Raises:
            DatabaseOperationError: (or a subclass) when the query fails.
        """
        t = self._table
        query = sa.select(t).order_by(self._backend_sql.code_point_order(t.c.lease_id))

        async def body(conn: AsyncConnection) -> RuntimeLeases:
            now = await self._backend_sql.now_value(conn, self._clock)
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
        return f"<RuntimeLeaseDbStore backend={self._backend.value}>"


def _validate(lease_id: str, owner_id: str, ttl: timedelta) -> None:
    validate_lease_identifier("lease_id", lease_id)
    validate_lease_identifier("owner_id", owner_id)
    validate_lease_ttl("ttl", ttl)
