"""Redis Streams: a publish is done when XADD answered with the entry's id.

The body is the entry's field `body`, the signed headers fields beside it
(SPEC "Destinations"); `maxlen` trims the stream with `MAXLEN ~`. How
durable an answered XADD is, is the server's setting (appendonly,
appendfsync): docs/guide/destinations.md says what to set. A key that is
not a stream, or a command the user may not run, is permanent. A small
pool of connections per link, so that concurrent publishes are not queued
behind one round trip each.
"""

from __future__ import annotations

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
    def __init__(self, client: redis.asyncio.Redis) -> None:
        self._client = client

    async def publish(self, target: BrokerTarget, msg: BrokerMessage) -> None:
        fields: dict[Any, Any] = {"body": msg.body, **msg.headers}
        try:
            await self._client.xadd(target.stream, fields, maxlen=target.maxlen,
                                    approximate=True)  # fmt: skip
        except redis.exceptions.NoPermissionError:
            raise BrokerFailure("auth: not allowed to XADD there", permanent=True) from None
        except redis.exceptions.AuthenticationError:
            raise BrokerFailure(REFUSED_CREDENTIALS, permanent=True) from None
        except redis.exceptions.ResponseError as exc:
            if str(exc).startswith("WRONGTYPE"):
                raise BrokerFailure("unroutable: the key is not a stream", permanent=True) from None
            raise BrokerFailure(f"nack: {type(exc).__name__}", permanent=False) from None
        except redis.exceptions.TimeoutError:
            raise TimeoutError("redis timeout") from None
        except redis.exceptions.ConnectionError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, OSError):
                raise cause from None
            raise BrokerFailure(CONNECTION_LOST, permanent=False, drop=True) from None

    async def close(self) -> None:
        await self._client.aclose(close_connection_pool=True)


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
