"""Checking that aster-forge's tables exist, or creating the missing ones, on any backend."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .._errors import AsterForgeError
from ._translate import translate_db_error
from .errors import TablesMissingError

__all__ = ["ensure_tables"]

# A process creating the same tables at the same moment (a web process's first enqueue
# beside a starting worker) makes one CREATE fail; the next attempt finds its tables.
_CREATE_ATTEMPTS = 3


def _missing(sync: sa.Connection, tables: Sequence[sa.Table]) -> list[sa.Table]:
    inspector = sa.inspect(sync)
    return [table for table in tables if not inspector.has_table(table.name, schema=table.schema)]


def _create(sync: sa.Connection, metadata: sa.MetaData, tables: Sequence[sa.Table]) -> None:
    missing = _missing(sync, tables)
    if missing:
        metadata.create_all(sync, tables=missing, checkfirst=True)


async def ensure_tables(
    engine: AsyncEngine,
    metadata: sa.MetaData,
    *,
    tables: Sequence[sa.Table] | None = None,
    create: bool = False,
) -> None:
    """Make sure the tables exist: create the missing ones, or name them in an error.

    What a worker checks before its loops start (``create=False``), and what an
    embedded forge runs on first use (``create=True``). Creating is idempotent
    (``CREATE`` only for what is missing, with its indexes) and survives another
    process creating the same tables at the same moment.

    Args:
        engine: The database.
        metadata: Where the tables are defined.
        tables: The tables to check or create (default: every table of ``metadata``).
        create: Create the missing tables instead of raising.

    Raises:
        TablesMissingError: ``create`` is false and a table is missing (all of the
            missing ones are named).
        DatabaseOperationError: (or a subclass) the database refused or could not be
            reached.
    """
    wanted = list(tables) if tables is not None else list(metadata.sorted_tables)
    operation = "create tables" if create else "check tables"
    for attempt in range(1, _CREATE_ATTEMPTS + 1):
        try:
            if not create:
                async with engine.connect() as conn:
                    missing = await conn.run_sync(_missing, wanted)
                if missing:
                    raise TablesMissingError(
                        sorted(table.name for table in missing), operation=operation
                    )
                return
            async with engine.begin() as conn:
                await conn.run_sync(_create, metadata, wanted)
            return
        except AsterForgeError:
            raise
        except sa.exc.DBAPIError as exc:
            if create and attempt < _CREATE_ATTEMPTS and not exc.connection_invalidated:
                continue
            raise translate_db_error(exc, operation) from exc
        except (sa.exc.SQLAlchemyError, OSError, TimeoutError) as exc:
            raise translate_db_error(exc, operation) from exc
    raise AssertionError("unreachable")  # pragma: no cover
