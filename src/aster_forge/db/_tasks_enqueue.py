"""Enqueue for :class:`~aster_forge.db.BackgroundTaskDbStore`: insert-or-get on the dedupe key."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks._records import BackgroundTaskRecord, EnqueueResult, NewTask, TaskStatus
from ._tasks_sql import _SATURATING_DELTA, TaskSql
from ._tasks_table import CORE_COLUMNS, record_from_row
from ._time import UtcDateTime
from .errors import DatabaseIntegrityError

__all__ = ["DEFAULT_TASK_NOTIFY_CHANNEL", "TaskEnqueueMixin"]

DEFAULT_TASK_NOTIFY_CHANNEL = "aster_forge_tasks"
"""The PostgreSQL ``NOTIFY`` channel enqueue signals on (payload: the lane)."""

_KEY_CHUNK = 500
_DEDUPE_RACE_ATTEMPTS = 8
_PENDING = TaskStatus.PENDING.value


class TaskEnqueueMixin:
    """The enqueue half of :class:`~aster_forge.db.BackgroundTaskDbStore`.

    Dedupe: existing keys are read first; a unique violation from a racing process
    rolls the transaction back and the whole batch is retried, so the re-read returns
    the winner's row (``created=False``) on every backend.
    """

    _table: sa.Table
    _sql: TaskSql
    _cols: list[sa.Column[Any]]
    _notify: bool
    _channel: str

    # -- enqueue ----------------------------------------------------------------------

    async def enqueue(self, task: NewTask) -> EnqueueResult:
        """Insert ``task`` or return the row already holding its dedupe key."""
        return (await self.enqueue_many([task]))[0]

    async def enqueue_many(self, tasks: Sequence[NewTask]) -> list[EnqueueResult]:
        """Enqueue all in one transaction; dedupe hits return existing rows (input order)."""
        for task in tasks:
            if not isinstance(task, NewTask):
                raise TypeError(f"enqueue expects NewTask, got {type(task).__name__}")
            unknown = set(task.extra) - set(self._table.c.keys())
            if unknown or set(task.extra) & set(CORE_COLUMNS):
                raise ValueError(
                    f"NewTask.extra names unknown or core columns: {sorted(task.extra)}"
                )
        if not tasks:
            return []
        has_keys = any(task.dedupe_key is not None for task in tasks)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._sql.run("enqueue tasks", lambda c: self._enqueue(c, tasks))
            except DatabaseIntegrityError:
                # Another process inserted one of our keys after our read: re-read.
                if not has_keys or attempt >= _DEDUPE_RACE_ATTEMPTS:
                    raise

    async def _enqueue(
        self, conn: AsyncConnection, tasks: Sequence[NewTask]
    ) -> list[EnqueueResult]:
        t = self._table
        keys: dict[str, int] = {}
        for index, task in enumerate(tasks):
            key = task.dedupe_key_text
            if key is not None:
                keys.setdefault(key, index)
        existing: dict[str, BackgroundTaskRecord] = {}
        key_list = list(keys)
        for start in range(0, len(key_list), _KEY_CHUNK):
            chunk = key_list[start : start + _KEY_CHUNK]
            rows = await conn.execute(sa.select(*self._cols).where(t.c.dedupe_key.in_(chunk)))
            for row in rows:
                record = record_from_row(row)
                existing[record.dedupe_key or ""] = record
        inserts = [
            index
            for index, task in enumerate(tasks)
            if task.dedupe_key_text is None
            or (task.dedupe_key_text not in existing and keys[task.dedupe_key_text] == index)
        ]
        created: dict[int, BackgroundTaskRecord] = {}
        if inserts:
            now = await self._sql.now(conn)
            stmt, params = self._insert(now, [tasks[i] for i in inserts])
            inserted = (await conn.execute(stmt, params)).all()
            if self._sql.backend.value == "sqlite":
                # Inserted in VALUES order by the single writer: ids ascend with the
                # input. Checked below; SQLAlchemy's ordered RETURNING would fall back
                # to one statement per row on SQLite.
                inserted = sorted(inserted, key=lambda row: int(row._mapping["id"]))
            for index, row in zip(inserts, inserted, strict=True):
                record = record_from_row(row)
                task = tasks[index]
                if (record.payload_json, record.dedupe_key) != (
                    task.payload_json,
                    task.dedupe_key_text,
                ):
                    raise RuntimeError("inserted rows came back out of input order")
                created[index] = record
            if self._notify:
                for lane in sorted({tasks[i].lane for i in inserts}):
                    await conn.execute(sa.select(sa.func.pg_notify(self._channel, lane)))
        by_key = {r.dedupe_key: r for r in created.values() if r.dedupe_key is not None}
        by_key.update(existing)
        results: list[EnqueueResult] = []
        for index, task in enumerate(tasks):
            if index in created:
                results.append(EnqueueResult(created[index], created=True))
            else:
                results.append(EnqueueResult(by_key[task.dedupe_key_text or ""], created=False))
        return results

    def _insert(
        self, now: tuple[Any, datetime | None], tasks: Sequence[NewTask]
    ) -> tuple[Any, list[dict[str, Any]]]:
        t = self._table
        now_expr, now_value = now
        params: list[dict[str, Any]] = []
        extra_names = sorted({name for task in tasks for name in task.extra})
        for task in tasks:
            run_at = task.run_at
            if run_at is None and (now_value is not None or task.delay >= _SATURATING_DELTA):
                run_at = self._sql.plus(now, task.delay).value
            row: dict[str, Any] = {
                "kind": task.kind,
                "lane": task.lane,
                "status": _PENDING,
                "payload_json": task.payload_json,
                "steps_json": task.steps_json,
                "attempt": 0,
                "max_attempts": task.max_attempts,
                "p_run_at": run_at,
                "p_delay": task.delay,
                "priority": task.priority,
                "dedupe_key": task.dedupe_key_text,
                "manual_retry_allowed": True,
                "cancel_requested": False,
                "rescued": False,
            }
            for name in extra_names:
                row[name] = task.extra.get(name, None)
            params.append(row)
        if self._sql.is_postgres:
            run_at_expr: Any = sa.func.coalesce(
                sa.bindparam("p_run_at", type_=UtcDateTime()),
                now_expr + sa.bindparam("p_delay", type_=sa.Interval()),
            )
        else:
            run_at_expr = sa.bindparam("p_run_at", type_=UtcDateTime())
            for row in params:
                del row["p_delay"]
        stmt = (
            sa.insert(t)
            .values(run_at=run_at_expr, created_at=now_expr, updated_at=now_expr)
            .returning(*self._cols, sort_by_parameter_order=self._sql.backend.value != "sqlite")
        )
        return stmt, params
