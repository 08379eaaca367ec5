"""Redis Streams: a publish is done when XADD answered with the entry's id.

The body is the entry's field `body`, the signed headers fields beside it
(SPEC "Destinations"); `maxlen` trims the stream with `MAXLEN ~`. How
durable an answered XADD is, is the server's setting (appendonly,
appendfsync): docs/guide/destinations.md says what to set. A key that is
not a stream, or a command the user may not run, is permanent. A small
pool of connections per link, and the publishes of one turn of the loop
pipelined on one of them, so that concurrent publishes are not queued
behind one round trip each.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.asyncio.connection import BlockingConnectionPool, SSLConnection

from dispatcher.core.destinations import BrokerTarget
from dispatcher.worker.brokers.link import BrokerFailure, BrokerMessage, lost

CONNECT_TIMEOUT_S = 10.0
POOL_SIZE = 16
REFUSED_CREDENTIALS = "auth: the server refused the credentials"


class _TlsConnection(SSLConnection):
    """TLS with the sender's verifying context (system store plus
    DISPATCHER_CA_FILE), set per pool (redis-py takes only file names)."""

    context: ssl.SSLContext | None = None

    def _connection_arguments(self) -> Mapping[str, Any]:
        kwargs = dict(super()._connection_arguments())
        if self.context is not None:
            kwargs["ssl"] = self.context
            kwargs["server_hostname"] = self.host
        return kwargs


_Queued = tuple[str, dict[Any, Any], int | None, "asyncio.Future[None]"]


class RedisLink:
    """Publishes queued in one turn of the loop go out as one pipeline (no
    MULTI: each XADD is answered on its own, and fails on its own): one
    round trip and one pooled connection for the batch instead of one per
    message; each publish still returns only once its own XADD answered.
    A batch whose publishers have all given up (their deadlines) is
    cancelled, which closes its connection, as a cancelled XADD did: a
    stalled server holds no connection past the deadlines of its batch."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._queued: list[_Queued] = []
        self._sending: dict[asyncio.Task[None], list[_Queued]] = {}
        self._closed = False

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        if self._closed:
            raise lost()
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        fields: dict[Any, Any] = {"body": msg.body, **msg.headers}
        self._queued.append((target.stream, fields, target.maxlen, answered))
        if len(self._queued) == 1:
            loop.call_soon(self._send)
        await answered

    def _send(self) -> None:
        batch = [q for q in self._queued if not q[3].done()]
        self._queued = []
        if not batch or self._closed:
            _fail(batch, lost())
            return
        task = asyncio.create_task(self._pipelined(batch))
        self._sending[task] = batch
        task.add_done_callback(self._sent)
        waiting = [len(batch)]

        def given_up(_: asyncio.Future[None]) -> None:
            waiting[0] -= 1
            if waiting[0] == 0 and not task.done():
                task.cancel()

        for *_, answered in batch:
            answered.add_done_callback(given_up)

    def _sent(self, task: asyncio.Task[None]) -> None:
        batch = self._sending.pop(task, [])
        # A task cancelled before it ran never reached its own handler.
        _fail(batch, lost())

    async def _pipelined(self, batch: list[_Queued]) -> None:
        try:
            pipe = self._client.pipeline(transaction=False)
            for stream, fields, maxlen, _ in batch:
                pipe.xadd(stream, fields, maxlen=maxlen, approximate=True)
            answers = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the batch's connection failed: each publish says so
            _fail(batch, _failure(exc))
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, answered), answer in zip(batch, answers, strict=True):
            if answered.done():  # the publisher gave up (its timeout)
                continue
            if isinstance(answer, Exception):
                answered.set_exception(_failure(answer))
            else:
                answered.set_result(None)

    async def close(self) -> None:
        self._closed = True
        _fail(self._queued, lost())
        self._queued = []
        tasks = list(self._sending)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._client.aclose(close_connection_pool=True)


def _fail(batch: list[_Queued], failure: BaseException) -> None:
    for *_, answered in batch:
        if not answered.done():
            answered.set_exception(failure)


def _failure(exc: BaseException) -> BaseException:
    """A redis-py error in the sender's terms (link.py): BrokerFailure, or
    the OSError / TimeoutError the sender words itself."""
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return BrokerFailure("auth: not allowed to XADD there", permanent=True)
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return BrokerFailure(REFUSED_CREDENTIALS, permanent=True)
    if isinstance(exc, redis.exceptions.ResponseError):
        if str(exc).startswith("WRONGTYPE"):
            return BrokerFailure("unroutable: the key is not a stream", permanent=True)
        return BrokerFailure(f"nack: {type(exc).__name__}", permanent=False)
    if isinstance(exc, redis.exceptions.TimeoutError):
        return TimeoutError("redis timeout")
    if isinstance(exc, redis.exceptions.ConnectionError):
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, OSError):
            return cause
        return lost()
    if isinstance(exc, asyncio.CancelledError):
        return lost()
    return exc


async def connect(target: BrokerTarget, host: str, context: ssl.SSLContext | None) -> RedisLink:
    options: dict[str, Any] = {}
    if context is not None:
        tls = type("TlsConnection", (_TlsConnection,), {"context": context})
        options = {"connection_class": tls, "ssl_check_hostname": True}
    pool = BlockingConnectionPool(
        host=host if context is None else target.host,
        port=target.port,
        db=target.db,
        username=target.username,
        password=target.password,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        max_connections=POOL_SIZE,
        timeout=None,
        **options,
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    link = RedisLink(client)
    try:
        await client.ping()  # connected and authenticated, or say why now
    except redis.exceptions.AuthenticationError:
        await link.close()
        raise BrokerFailure(REFUSED_CREDENTIALS, permanent=True) from None
    except redis.exceptions.ConnectionError as exc:
        await link.close()
        cause = exc.__cause__ or exc.__context__
        raise (cause if isinstance(cause, OSError) else ConnectionError("redis")) from None
    return link
