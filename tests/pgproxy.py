"""A TCP proxy in front of PostgreSQL that a test can cut: every connection
through it dropped at once, and new ones refused while it is "down" — what a
database restart or failover looks like from the worker's side.

It forwards to the server the URL names and to no other: a host (TCP), or a
socket folder (`?host=/path`, or a host starting with `/`: the embedded
server's URLs). A URL that names neither is refused rather than guessed."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from dispatcher.db import hosts


def _upstream(url: str) -> tuple[str, int] | str:
    """(host, port) for TCP, or the Unix socket's path, as libpq reads the URL."""
    if len(hosts.hosts(url)) > 1:
        raise ValueError(
            "PgProxy stands in front of one server: give the tests a DATABASE_URL "
            f"with one host, not {hosts.hosts(url)}"
        )
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    netloc_host = unquote(parts.netloc.rpartition("@")[2])  # as written: not lower-cased
    if netloc_host.startswith("/"):  # a percent-encoded socket folder
        netloc_host = netloc_host.rpartition(":")[0] if ":" in netloc_host else netloc_host
    else:
        netloc_host = parts.hostname or ""
    host = query.get("host") or netloc_host
    port = int(query.get("port") or parts.port or 5432)
    if not host:
        raise ValueError(f"PgProxy: {url!r} names no server (no host, no socket folder)")
    if host.startswith("/"):
        return f"{host.rstrip('/')}/.s.PGSQL.{port}"
    return host, port


class PgProxy:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        # The URL through the proxy keeps every parameter but where to connect.
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")]
        self._url = parts._replace(query=urlencode(query))
        self._target = _upstream(url)
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.down = False
        self.silent = False  # a black hole: bytes dropped both ways
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
            if isinstance(self._target, str):
                up_reader, up_writer = await asyncio.open_unix_connection(self._target)
            else:
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
                if self.silent:
                    continue
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

    async def hole(self, seconds: float) -> None:
        """A black hole for `seconds`: what is sent meanwhile is lost (the
        connections it was on are out of step for good, as after a long
        loss of packets); after it, new connections work."""
        self.silent = True
        try:
            await asyncio.sleep(seconds)
        finally:
            self.silent = False

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._pipes):
            t.cancel()
