"""A TCP proxy in front of PostgreSQL that a test can cut: every connection
through it dropped at once, and new ones refused while it is "down" — what a
database restart or failover looks like from the worker's side."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit


class PgProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._url = parts
        self._target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.down = False
        self.port = 0

    @property
    def url(self) -> str:
        """The database URL, through the proxy."""
        netloc = self._url.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(
            self._url._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host)
        )

    async def start(self) -> PgProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._links |= {writer, up_writer}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.transport.abort()
        self._links.discard(dst)

    def cut(self) -> None:
        """Drops every connection now (both sides, as a crash would)."""
        for w in list(self._links):
            w.transport.abort()
        self._links.clear()

    async def outage(self, seconds: float) -> None:
        self.down = True
        self.cut()
        await asyncio.sleep(seconds)
        self.down = False

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._pipes):
            t.cancel()
