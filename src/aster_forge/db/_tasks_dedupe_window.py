"""Dedupe windows in SQL: take a key from a holder whose window ended; replace a pending one.

A key lives in the unique ``dedupe_key`` column of the one row that holds it. An
enqueue whose key has a window (``TaskDedupeKey.held_while`` / ``held_for``) first sets
the column to ``NULL`` on the holder when the window says it no longer holds (its
status is not one of ``held_while``, or it was created ``held_for`` ago or more), in the
enqueue's own transaction and before its insert-or-get: the unique index then keeps
the race-free "one holder, every racer gets it back" of a plain key. The release
locks the old holder's row, so a racing enqueue of the same key waits for it, finds
the key gone from that row, and meets the new holder in its insert. A window only
ends (statuses a holder left it does not re-enter with the key, time moves forward),
so releasing early is never wrong: on PostgreSQL's driver path the release is a
statement of its own in autocommit, ahead of the one-statement insert-or-get.

A hit whose key asks ``replace`` writes the request's payload and run time
into the holder if it is still pending and of the same kind, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ..tasks import NewTask
from ..tasks._internal import BackgroundTaskRecord, EnqueueResult, TaskStatus
from ._tables import record_from_row
from ._tasks_sql import DbNow, TaskSql
from ._time import UtcDateTime

__all__ = [
    "has_windows",
    "release_ended_keys",
    "replace_pending_holders",
    "replaces",
    "window_groups",
]

_KEY_CHUNK = 500
_PENDING = TaskStatus.PENDING.value


def window_groups(tasks: Sequence[NewTask]) -> dict[tuple[Any, Any], list[str]]:
    """Each window's keys (a key's first task in the batch decides its window)."""
    seen: set[str] = set()
    groups: dict[tuple[Any, Any], list[str]] = {}
    for task in tasks:
        key = task.dedupe_key_text
        if key is None or key in seen:
            continue
        seen.add(key)
        window = task.windowed_dedupe_key
        if window is None or (window.held_while is None and window.held_for is None):
            continue  # holds whatever the holder's status and age
        held_while = window.held_while
        statuses = None if held_while is None else tuple(sorted(held_while))
        groups.setdefault((statuses, window.held_for), []).append(key)
    return groups


def replaces(tasks: Sequence[NewTask]) -> bool:
    """Whether a task of ``tasks`` has a key that replaces a pending holder."""
    return any(
        window is not None and window.replace
        for window in (task.windowed_dedupe_key for task in tasks if task.dedupe_key)
    )


def has_windows(tasks: Sequence[NewTask]) -> bool:
    """Whether a task of ``tasks`` has a key with a window (or that replaces)."""
    return any(task.windowed_dedupe_key is not None for task in tasks if task.dedupe_key)


async def release_ended_keys(
    conn: AsyncConnection, sql: TaskSql, tasks: Sequence[NewTask], now: DbNow
) -> None:
    """Set ``dedupe_key`` to ``NULL`` on each holder of a key of ``tasks`` whose window ended."""
    t = sql.table
    for (statuses, period), keys in window_groups(tasks).items():
        ended: list[Any] = []
        if statuses is not None:
            ended.append(t.c.status.not_in(statuses))
        if period is not None:
            ended.append(t.c.created_at <= _minus(now, period))
        for start in range(0, len(keys), _KEY_CHUNK):
            await conn.execute(
                sa.update(t)
                .where(t.c.dedupe_key.in_(keys[start : start + _KEY_CHUNK]), sa.or_(*ended))
                .values(dedupe_key=None)
            )


def _minus(now: DbNow, period: timedelta) -> Any:
    if now.value is None:
        return now.expr - sa.literal(period, sa.Interval())
    return sa.literal(now.value - period, UtcDateTime())


async def replace_pending_holders(
    conn: AsyncConnection,
    sql: TaskSql,
    cols: Sequence[sa.Column[Any]],
    tasks: Sequence[NewTask],
    results: list[EnqueueResult],
    now: DbNow,
    *,
    notify_channel: str | None,
) -> list[EnqueueResult]:
    """``results`` with each pending holder a ``replace`` key hit rewritten.

    Only a holder from before this batch is rewritten (a key repeated in the batch
    returns the batch's own row as it was inserted), by the key's first task.
    """
    fresh = {result.record.id for result in results if result.created}
    done: set[str] = set()
    replaced: dict[int, BackgroundTaskRecord] = {}
    lanes: set[str] = set()
    t = sql.table
    for task, result in zip(tasks, results, strict=True):
        key = task.dedupe_key_text
        if key is None or key in done:
            continue
        done.add(key)
        holder = result.record
        window = task.windowed_dedupe_key
        if (
            window is None
            or not window.replace
            or result.created
            or holder.id in fresh
            or holder.status is not TaskStatus.PENDING
            or holder.kind != task.kind
        ):
            continue
        run_at: Any = (
            sa.literal(task.run_at, UtcDateTime())
            if task.run_at is not None
            else sql.plus(now, task.delay)
        )
        values: dict[str, Any] = {
            "payload_json": task.payload_json,
            "run_at": run_at,
            "updated_at": now.expr,
        }
        # Not yet due: out of the due index until staged (see background_tasks_table).
        values.update(sql.backend_sql.waiting(run_at > now.expr))
        # Still pending and still this key's: a claim in between leaves the row as read.
        where = (t.c.id == holder.id, t.c.status == _PENDING, t.c.dedupe_key == key)
        update = sa.update(t).where(*where).values(**values)
        row = await sql.backend_sql.update_one(conn, update, cols, t.c.id == holder.id)
        if row is None:
            continue
        replaced[holder.id] = record_from_row(row)
        lanes.add(holder.lane)
    if notify_channel is not None:
        for lane in sorted(lanes):
            await conn.execute(sa.select(sa.func.pg_notify(notify_channel, lane)))
    if not replaced:
        return results
    # Every entry of a rewritten key gets the rewritten row.
    return [
        EnqueueResult(replaced[result.record.id], created=False)
        if result.record.id in replaced
        else result
        for result in results
    ]
