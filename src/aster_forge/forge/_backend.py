"""The stores a forge runs on: database-backed for a URL, in memory for ``memory://``."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..db import (
    BackgroundTaskDbStore,
    RuntimeLeaseDbStore,
    ScheduledTaskDbStore,
    background_tasks_table,
    create_database_engine,
    ensure_tables,
    runtime_leases_table,
    scheduled_tasks_table,
    task_deps_table,
    task_lanes_table,
)
from ..db._internal import normalize_database_url, partition_rates_table
from ..runtime import RuntimeLeaseStore
from ..tasks import BackgroundTaskStore, ScheduledTaskStore
from ..tasks._internal import BackgroundTaskRecord
from ..testing import InMemoryRuntimeLeaseStore, InMemoryScheduledTaskStore, InMemoryTaskStore
from ._results import ResultListener, polled, pushed
from ._sync_bridge import SyncBridge, awaited
from .errors import ForgeStateError

__all__ = ["MEMORY_URL", "ForgeBackend"]

T = TypeVar("T")

MEMORY_URL = "memory://"
"""The URL of an in-memory forge (stores from :mod:`aster_forge.testing`)."""

ENQUEUE_CONNECTION_LINGER = timedelta(seconds=1)
"""How long a forge's task store keeps its last connection for the next enqueue (while
the pool has others to lend): a service enqueueing on most requests skips the pool's
checkout each time, as a peer holding a connection of its own does."""


class ForgeBackend:
    """The task, scheduled-catalog and runtime-lease stores of one forge, and its tables.

    Args:
        url: ``memory://``, or a database URL (normalised by
            :func:`~aster_forge.db.normalize_database_url`).
        metadata: Where the tables are defined (the product's own ``MetaData`` works).
        tasks_table: The task table's name.
        create_tables: Create the missing tables on first use (default: on for SQLite
            and memory, off for servers, where a migration creates them).

    Raises:
        UnsupportedDatabaseBackendError: The URL's backend is not supported.
    """

    def __init__(
        self,
        url: str,
        metadata: sa.MetaData,
        *,
        tasks_table: str,
        create_tables: bool | None = None,
    ) -> None:
        self.metadata = metadata
        self.tasks_table = background_tasks_table(metadata, tasks_table)
        # The tables the stores use (the product's own may share the metadata).
        self.tables = (
            self.tasks_table,
            task_deps_table(self.tasks_table),
            task_lanes_table(self.tasks_table),
            partition_rates_table(self.tasks_table),
            runtime_leases_table(metadata),
            scheduled_tasks_table(metadata),
        )
        self.engine: AsyncEngine | None = None
        self.task_store: BackgroundTaskStore
        self.builtin_task_store: BackgroundTaskDbStore | InMemoryTaskStore
        """The same store as its class, for what only aster-forge's own stores report
        (``lease_expiry_counts()``)."""
        self.scheduled_store: ScheduledTaskStore
        self.lease_store: RuntimeLeaseStore
        self._bridge: SyncBridge | None = None
        # One creation at a time per event loop (the forge may be used from several: the
        # synchronous callers' thread runs its own).
        self._creating: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        # One results LISTEN per event loop that awaited a result (PostgreSQL).
        self._listeners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ResultListener] = (
            weakref.WeakKeyDictionary()
        )
        if url.startswith(MEMORY_URL):
            self.url: str | None = None
            self.builtin_task_store = InMemoryTaskStore()
            self.task_store = self.builtin_task_store
            self.scheduled_store = InMemoryScheduledTaskStore()
            self.lease_store = InMemoryRuntimeLeaseStore()
            self.creates_tables = create_tables if create_tables is not None else True
            self.tables_ready = True
            return
        self.url = normalize_database_url(url)
        self.engine = create_database_engine(self.url)
        self._db_store = BackgroundTaskDbStore(
            self.engine, table=self.tasks_table, connection_linger=ENQUEUE_CONNECTION_LINGER
        )
        self.builtin_task_store = self._db_store
        self.task_store = self._db_store
        self.scheduled_store = ScheduledTaskDbStore(self.engine)
        self.lease_store = RuntimeLeaseDbStore(self.engine)
        self._bridge = SyncBridge(self._open_sync_store, on_close=self._close_listener)
        self.creates_tables = (
            create_tables if create_tables is not None else self.engine.dialect.name == "sqlite"
        )
        # Read before every use of the stores; once true it never turns false.
        self.tables_ready = not self.creates_tables

    @property
    def is_memory(self) -> bool:
        """Whether the stores live in this process's memory."""
        return self.engine is None

    @property
    def is_sqlite(self) -> bool:
        """Whether the database is a SQLite file (embedded: tables are created at startup)."""
        return self.engine is not None and self.engine.dialect.name == "sqlite"

    @property
    def is_postgres(self) -> bool:
        """Whether the database is PostgreSQL (enqueues NOTIFY; workers LISTEN)."""
        return self.engine is not None and self.engine.dialect.name == "postgresql"

    def database_task_store(self, what: str) -> BackgroundTaskDbStore:
        """The database task store (enqueues in the product's transaction use it).

        Raises:
            ForgeStateError: The forge keeps its tasks in memory (``what`` is named).
        """
        if self.engine is None:
            raise ForgeStateError(f"{what} needs a database forge; this one is in memory")
        return self._db_store

    def run_sync(self, call: Callable[[BackgroundTaskStore], Awaitable[T]]) -> T:
        """Run ``call(store)`` for synchronous code (a thread with no running loop).

        On a database, on the forge's :class:`SyncBridge` (one loop in a daemon thread,
        its own pooled engine), after creating the missing tables with that engine on
        first use; in memory, on a fresh event loop with the shared store.
        """
        if self._bridge is None:
            return asyncio.run(awaited(call(self.task_store)))
        if self.tables_ready:
            return self._bridge.run(call)
        return self._bridge.run(call, prepare=self.create_tables_once)

    async def finished(self, task_id: int) -> BackgroundTaskRecord:
        """The task's row once it has ended: woken by its ending's ``NOTIFY`` on
        PostgreSQL, polled elsewhere (see ``_results``).

        Raises:
            TaskNotFoundError: No task has that id.
        """
        if self.is_postgres:
            return await pushed(self._db_store, self._listener(), task_id)
        return await polled(self.task_store, task_id)

    def finished_sync(self, task_id: int, timeout: float | None) -> BackgroundTaskRecord:
        """:meth:`finished` for synchronous code, on the synchronous callers' loop.

        Raises:
            TimeoutError: The task had not ended within ``timeout`` seconds.
            TaskNotFoundError: No task has that id.
        """
        if self._bridge is None or not self.is_postgres:

            async def poll(store: BackgroundTaskStore) -> BackgroundTaskRecord:
                async with asyncio.timeout(timeout):
                    return await polled(store, task_id)

            return self.run_sync(poll)

        async def push(store: BackgroundTaskDbStore) -> BackgroundTaskRecord:
            async with asyncio.timeout(timeout):
                return await pushed(store, self._listener(), task_id)

        prepare = None if self.tables_ready else self.create_tables_once
        return self._bridge.run(push, prepare=prepare)

    def _listener(self) -> ResultListener:
        assert self.url is not None  # only a database has one
        loop = asyncio.get_running_loop()
        listener = self._listeners.get(loop)
        if listener is None:
            listener = self._listeners[loop] = ResultListener(self.url)
        return listener

    async def _close_listener(self) -> None:
        """Stop the results LISTEN of the running loop, if it has one."""
        listener = self._listeners.pop(asyncio.get_running_loop(), None)
        if listener is not None:
            await listener.aclose()

    def _open_sync_store(self) -> tuple[AsyncEngine, BackgroundTaskDbStore]:
        assert self.url is not None  # a bridge exists only for a database
        engine = create_database_engine(self.url)
        return engine, BackgroundTaskDbStore(engine, table=self.tasks_table)

    async def create_tables_once(self, engine: AsyncEngine | None = None) -> None:
        """Create the missing tables before the first use of the stores, once.

        Concurrent first uses on one event loop wait for one creation; after it,
        :attr:`tables_ready` is true and callers skip this call altogether.

        Args:
            engine: The engine to create them with (default: the forge's; the
                synchronous callers' thread passes its own).

        Raises:
            DatabaseOperationError: (or a subclass) the tables could not be created.
        """
        if self.tables_ready or self.engine is None:
            return
        loop = asyncio.get_running_loop()
        lock = self._creating.setdefault(loop, asyncio.Lock())
        async with lock:
            if not self.tables_ready:
                await ensure_tables(engine or self.engine, self.metadata, create=True)
                self.tables_ready = True

    async def create_tables(self) -> None:
        """Create every missing table and index of :attr:`metadata` (idempotent).

        Raises:
            DatabaseOperationError: (or a subclass) the tables could not be created.
        """
        if self.engine is None:
            return
        await ensure_tables(self.engine, self.metadata, create=True)
        self.tables_ready = True

    async def check_tables(self) -> None:
        """Check that every table the stores use exists (nothing is created).

        Raises:
            TablesMissingError: A table is missing (every missing one is named).
            DatabaseOperationError: (or a subclass) the database could not be asked.
        """
        if self.engine is None:
            return
        await ensure_tables(self.engine, self.metadata, tables=self.tables)

    async def dispose(self) -> None:
        """Close the pooled connections and the synchronous enqueues' thread (both reopen
        on their next use)."""
        await self._close_listener()
        if self._bridge is not None:
            await self._bridge.aclose()
        if self.engine is not None:
            # Quiet enqueues' NOTIFY goes out before the pool closes: a worker wakes now.
            await self._db_store.flush_notifications()
            await self.engine.dispose()
