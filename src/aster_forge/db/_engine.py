"""The async engine aster-forge opens for a URL, with each backend's connection defaults."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolResetState

from ._url import normalize_database_url

__all__ = ["create_database_engine", "stale_reason"]

SQLITE_BUSY_TIMEOUT_MS = 10_000
"""How long a SQLite connection waits for another process's write lock."""

MAX_IDLE = 300.0
"""Seconds a pooled PostgreSQL connection may go without a checkout before it is replaced.

asyncpg's own pool closes connections inactive this long; NAT gateways and load
balancers commonly drop idle connections after 4 to 6 minutes without a word, and the
next statement on one would fail.
"""

LAST_CHECKOUT = "aster_forge.last_checkout"
"""The key of a pooled connection's ``info`` holding its last checkout (monotonic seconds)."""


def create_database_engine(url: str, **options: Any) -> AsyncEngine:
    """Create the async engine for ``url`` with the connection defaults each backend needs.

    - SQLite: WAL journal (a web process's enqueues and the workers' writes run side by
      side) and a 10 s wait for another process's write lock. A connection goes back to
      the pool rolled back only when a transaction is open on it: SQLAlchemy's
      rollback-on-return would send every returned connection to aiosqlite's thread
      (about as much client time as a statement), also after a commit.
    - PostgreSQL (asyncpg): a pooled connection the server closed (a restart, a failover,
      ``pg_terminate_backend``, ``idle_session_timeout``) is replaced when it is checked
      out, without a round trip: asyncpg saw its socket close while it sat in the pool.
      So is one not checked out for 5 minutes (:data:`MAX_IDLE`): a NAT or a load
      balancer may have dropped it silently. SQLAlchemy's ``pool_pre_ping`` would cost
      three round trips on every checkout (``BEGIN``, a ping, ``ROLLBACK``), more than
      an enqueue's own statement.
    - MariaDB/MySQL: ``pool_pre_ping`` (one ``COM_PING`` per checkout): the driver does
      not notice a closed socket until it reads from it.

    Args:
        url: A database URL (goes through :func:`normalize_database_url`).
        **options: Passed to :func:`~sqlalchemy.ext.asyncio.create_async_engine`; they
            override the defaults above (``pool_pre_ping=True`` pings on PostgreSQL too).

    Raises:
        InvalidDatabaseUrlError: The URL cannot be parsed or names a synchronous driver.
        UnsupportedDatabaseBackendError: The URL's backend is not supported.
        DatabaseDriverMissingError: The backend's async driver is not installed.
    """
    url = normalize_database_url(url)
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        options.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        options.setdefault("pool_reset_on_return", None)  # _sqlite_reset does it
    elif backend == "mysql":
        options.setdefault("pool_pre_ping", True)
    engine = create_async_engine(url, **options)
    if backend == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        if options["pool_reset_on_return"] is None:
            event.listen(engine.sync_engine, "reset", _sqlite_reset)
    elif backend == "postgresql":
        event.listen(engine.sync_engine, "checkout", _replace_closed)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _sqlite_reset(dbapi_connection: Any, _record: Any, state: PoolResetState) -> None:
    """Roll back a connection going back to the pool when a transaction is open on it.

    What SQLAlchemy's rollback-on-return does, minus the round trip to aiosqlite's
    thread for a connection whose transaction was committed or never begun (SQLite
    itself says whether one is open: ``in_transaction``, no I/O).
    """
    if state.transaction_was_reset or not state.asyncio_safe:
        return  # as SQLAlchemy's own reset: already rolled back, or no I/O allowed here
    if dbapi_connection.driver_connection.in_transaction:
        dbapi_connection.rollback()


def stale_reason(driver_connection: Any, idle_seconds: float) -> str | None:
    """Why a pooled connection must not be used again, or ``None`` when it may be.

    The one rule for a connection taken from the pool and for one a store keeps: its
    socket closed (asyncpg saw it, no round trip), or :data:`MAX_IDLE` seconds unused.
    """
    is_closed = getattr(driver_connection, "is_closed", None)
    if is_closed is not None and is_closed():
        return "the pooled connection was closed by the server"
    if idle_seconds > MAX_IDLE:
        return "the pooled connection sat unused too long"
    return None


def _replace_closed(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    """Refuse a stale pooled connection: the pool discards it and connects anew (this
    runs again for the new one)."""
    now = time.monotonic()
    last = record.info.get(LAST_CHECKOUT, now)
    record.info[LAST_CHECKOUT] = now
    why = stale_reason(dbapi_connection.driver_connection, now - last)
    if why is not None:
        raise DisconnectionError(why)
