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
from dispatcher.worker.brokers.link import CONNECTION_LOST, BrokerFailure, BrokerMessage

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


class RedisLink:
    """Publishes queued in one turn of the loop go out as one pipeline (no
    MULTI: each XADD is answered on its own, and fails on its own): one
    round trip and one pooled connection for the batch instead of one per
    message; each publish still returns only once its own XADD answered."""

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client
        self._queued: list[tuple[str, dict[Any, Any], int | None, asyncio.Future[None]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        loop = asyncio.get_running_loop()
        answered: asyncio.Future[None] = loop.create_future()
        fields: dict[Any, Any] = {"body": msg.body, **msg.headers}
        self._queued.append((target.stream, fields, target.maxlen, answered))
        if len(self._queued) == 1:
            loop.call_soon(self._send)
        await answered

    def _send(self) -> None:
        batch, self._queued = self._queued, []
        task = asyncio.create_task(self._pipelined(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _pipelined(
        self, batch: list[tuple[str, dict[Any, Any], int | None, asyncio.Future[None]]]
    ) -> None:
        pipe = self._client.pipeline(transaction=False)
        for stream, fields, maxlen, _ in batch:
            pipe.xadd(stream, fields, maxlen=maxlen, approximate=True)
        try:
            answers = await pipe.execute(raise_on_error=False)
        except BaseException as exc:  # the batch's connection failed: each publish says so
            failure = _failure(exc)
            for *_, answered in batch:
                if not answered.done():
                    answered.set_exception(failure)
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
        for task in list(self._sending):
            task.cancel()
        await self._client.aclose(close_connection_pool=True)


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
        return BrokerFailure(CONNECTION_LOST, permanent=False, drop=True)
    if isinstance(exc, asyncio.CancelledError):
        return BrokerFailure(CONNECTION_LOST, permanent=False, drop=True)
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
