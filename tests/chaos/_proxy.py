"""A toxiproxy-like TCP proxy on loopback for database fault injection.

``ChaosProxy`` listens on ``127.0.0.1:<random port>`` and forwards every connection to
one upstream address (the local PostgreSQL). Faults, all reversible at run time:

* ``latency``: each forwarded chunk is delayed by this many seconds;
* ``cut()``: close every open connection at once (both directions);
* ``outage(True)``: cut, and close each new connection as soon as it is accepted,
  until ``outage(False)`` (an outage as clients see it, without touching the server).

Only loopback addresses are accepted, so no test can point it anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress

__all__ = ["ChaosProxy"]

_CHUNK = 65536


class ChaosProxy:
    """Forward ``127.0.0.1:port`` to ``upstream_host:upstream_port`` with injectable faults."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        if not ipaddress.ip_address(upstream_host).is_loopback:
            raise ValueError(f"the chaos proxy only forwards to loopback, not {upstream_host}")
        self._upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.latency = 0.0
        self._down = False
        self.connections = 0
        self.cuts = 0
        self.refused = 0

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Start listening on a free loopback port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def close(self) -> None:
        """Stop listening, cut every connection and join the forwarding tasks."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.cut()
        if self._pipes:
            await asyncio.gather(*self._pipes, return_exceptions=True)

    def cut(self) -> None:
        """Close every open proxied connection (the clients see a dropped socket)."""
        if self._writers:
            self.cuts += 1
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def outage(self, down: bool) -> None:
        """Start (cut everything, refuse new connections) or end an outage."""
        self._down = down
        if down:
            self.cut()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.refused += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._writers.update((writer, up_writer))
        for source, sink, name in (
            (reader, up_writer, "up"),
            (up_reader, writer, "down"),
        ):
            task = asyncio.create_task(self._pipe(source, sink), name=f"chaos-proxy:{name}")
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await source.read(_CHUNK)
                if not data:
                    break
                if self.latency:
                    await asyncio.sleep(self.latency)
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(sink)
            with contextlib.suppress(Exception):
                sink.transport.abort()
