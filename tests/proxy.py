"""A small forward HTTP proxy on 127.0.0.1 for the egress tests: CONNECT
tunnels (https) and absolute-form requests (http), each one recorded."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@dataclass
class Proxy:
    seen: list[str] = field(default_factory=list)  # request lines, as received
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError):
            writer.close()
        finally:
            self._tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        line, _, rest = head.partition("\r\n")
        self.seen.append(line)
        method, target, version = line.split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            up_r, up_w = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            # http://host:port/path?query -> origin-form to the host itself.
            hostport, _, path = target.removeprefix("http://").partition("/")
            host, _, port = hostport.rpartition(":")
            up_r, up_w = await asyncio.open_connection(host.strip("[]"), int(port or 80))
            up_w.write(f"{method} /{path} {version}\r\n{rest}".encode("latin-1"))
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
