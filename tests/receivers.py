"""Real HTTP receivers on 127.0.0.1 for the tests: they record what arrives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    method: str = "POST"
    query: str = ""  # the raw query string, as sent
    raw: str = ""  # the request target (path and query) exactly as sent


Behaviour = Callable[["Receiver", web.Request, bytes], Awaitable[web.StreamResponse]]


async def ok(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
    return web.Response(status=200, text="ok")


def status(code: int, headers: dict[str, str] | None = None) -> Behaviour:
    async def answer(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        return web.Response(status=code, headers=headers)

    return answer


def sequence(*codes: int) -> Behaviour:
    """Answers with each code in turn, then 200 forever."""

    async def answer(r: Receiver, req: web.Request, _: bytes) -> web.StreamResponse:
        n = len(r.requests_to(req.path)) - 1
        return web.Response(status=codes[n] if n < len(codes) else 200)

    return answer


def bodies(*texts: str) -> Behaviour:
    """Answers 200 with each body in turn, then the last one forever."""

    async def answer(r: Receiver, req: web.Request, _: bytes) -> web.StreamResponse:
        n = len(r.requests_to(req.path)) - 1
        return web.Response(status=200, text=texts[min(n, len(texts) - 1)])

    return answer


def hang(max_s: float = 30.0) -> Behaviour:
    async def answer(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        await asyncio.sleep(max_s)
        return web.Response(status=200)

    return answer


def delay(seconds: float, code: int = 200) -> Behaviour:
    async def answer(_: Receiver, __: web.Request, ___: bytes) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(status=code)

    return answer


@dataclass
class Receiver:
    """One server; each path may behave differently."""

    routes: dict[str, Behaviour] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    port: int = 0
    _runner: web.AppRunner | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests_to(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(Received(request.path, dict(request.headers), body, time.time(),
                                      request.method, request.raw_path.partition("?")[2],
                                      request.raw_path))  # fmt: skip
        self.arrived.set()
        behaviour = self.routes.get(request.path, ok)
        return await behaviour(self, request, body)

    async def start(self) -> Receiver:
        return await self.start_on("127.0.0.1")

    async def start_on(self, host: str, port: int = 0) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=0.1
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
