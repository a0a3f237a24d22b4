"""PostgreSQL ``LISTEN`` for enqueue notifications: a hint that wakes idle dispatchers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from ..runtime import CancellationToken
from ._tasks import DEFAULT_TASK_NOTIFY_CHANNEL
from ._url import normalize_database_url
from .errors import UnsupportedDatabaseBackendError

__all__ = ["BackgroundTaskNotificationListener", "listen_for_task_notifications"]

logger = logging.getLogger("aster_forge.db")


def _asyncpg_dsn(url_or_engine: str | AsyncEngine) -> str:
    if isinstance(url_or_engine, AsyncEngine):
        url = url_or_engine.url
    else:
        url = make_url(normalize_database_url(url_or_engine))
    if url.get_backend_name() != "postgresql":
        raise UnsupportedDatabaseBackendError(
            f"task notifications need PostgreSQL, not {url.get_backend_name()!r}"
        )
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class BackgroundTaskNotificationListener:
    """Listens on a PostgreSQL channel with a raw asyncpg connection; reconnects when broken.

    ``on_notify(payload)`` is called (synchronously, on the event loop) for each
    notification; the payload is the lane of the enqueued task. NOTIFY is only a
    hint: a dispatcher must keep polling, because notifications sent while the
    listener reconnects are lost. ``on_notify`` is also called with ``None`` after
    every (re)connect, so the caller can poll once for anything it missed.

    Args:
        url_or_engine: A PostgreSQL URL (``postgresql://``, ``postgres://`` or
            ``postgresql+asyncpg://``; see :func:`~aster_forge.db.normalize_database_url`)
            or async engine.
        channel: The channel (:data:`~aster_forge.db.DEFAULT_TASK_NOTIFY_CHANNEL`).
        on_notify: The callback; exceptions from it are logged, never propagated.
        reconnect_delay: The first delay before reconnecting (doubles up to 30 s).

    Raises:
        UnsupportedDatabaseBackendError: When the URL is not PostgreSQL.
        InvalidDatabaseUrlError: When the URL cannot be parsed or names a sync driver.
    """

    def __init__(
        self,
        url_or_engine: str | AsyncEngine,
        channel: str = DEFAULT_TASK_NOTIFY_CHANNEL,
        on_notify: Callable[[str | None], object] | None = None,
        *,
        reconnect_delay: timedelta = timedelta(milliseconds=200),
    ) -> None:
        self._dsn = _asyncpg_dsn(url_or_engine)
        self._channel = channel
        self._on_notify = on_notify or (lambda _payload: None)
        self._reconnect_delay = reconnect_delay.total_seconds()
        self.connects = 0
        """How many times a connection was established (1 + reconnects)."""
        self._connected = asyncio.Event()

    async def wait_connected(self) -> None:
        """Wait until the listener is connected and ``LISTEN`` is active."""
        await self._connected.wait()

    def _deliver(self, payload: str | None) -> None:
        try:
            self._on_notify(payload)
        except Exception:
            logger.exception("task notification callback failed")

    async def run(self, token: CancellationToken) -> None:
        """Listen until ``token`` is cancelled, reconnecting after failures."""
        import asyncpg  # optional dependency, imported only where LISTEN is used

        delay = self._reconnect_delay
        while not token.cancelled:
            conn: Any = None
            try:
                conn = await asyncpg.connect(self._dsn)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, event=lost: event.set())
                await conn.add_listener(
                    self._channel, lambda _c, _pid, _ch, payload: self._deliver(payload)
                )
                self.connects += 1
                self._connected.set()
                delay = self._reconnect_delay
                self._deliver(None)
                ticks = 0
                while not token.cancelled and not lost.is_set():
                    # Short ticks notice a termination callback quickly; a periodic probe
                    # catches a silently dead TCP peer that fires no callback.
                    if await token.sleep(0.25):
                        break
                    ticks += 1
                    if ticks % 20 == 0:
                        await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=5.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "task notification listener disconnected (%s); reconnecting",
                    type(exc).__name__,
                )
            finally:
                self._connected.clear()
                if conn is not None:
                    await _close_quietly(conn)
            if not token.cancelled and await token.sleep(delay):
                break
            delay = min(delay * 2, 30.0)


async def _close_quietly(conn: Any) -> None:
    try:
        await asyncio.shield(conn.close(timeout=2))
    except asyncio.CancelledError:
        conn.terminate()
        raise
    except Exception:
        conn.terminate()


async def listen_for_task_notifications(
    url_or_engine: str | AsyncEngine,
    channel: str,
    on_notify: Callable[[str | None], object],
    token: CancellationToken,
) -> None:
    """Run a :class:`BackgroundTaskNotificationListener` until ``token`` is cancelled.

    Args:
        url_or_engine: A PostgreSQL URL or async engine.
        channel: The channel name.
        on_notify: Called with each payload (the lane), and with ``None`` after each connect.
        token: Stops the listener.
    """
    await BackgroundTaskNotificationListener(url_or_engine, channel, on_notify).run(token)
