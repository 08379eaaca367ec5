"""What the admin server's handler modules share: the application state,
by key (the pool, the settings, the metrics, when percentiles were last
recomputed), a pooled connection for a request, and reading a request's
JSON object."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import aiohttp
import aiohttp.http_exceptions
import asyncpg
import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput
from dispatcher.metrics import Metrics
from dispatcher.settings import Settings
from dispatcher.web import security

POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)

PERCENTILE_REFRESH_S = 5.0


@dataclass(slots=True)
class PercentileRefresh:
    """When this server last had the latency percentiles recomputed.

    A dashboard polls three routes every 2 s and Prometheus scrapes /metrics;
    each recomputing the window (0.44 s of database time per million samples)
    would put the cost on every read, so a server asks for it at most every
    `every_s`. `serve` runs no maintenance task, so this is also what keeps
    its figures fresh.
    """

    every_s: float = PERCENTILE_REFRESH_S
    last: float = float("-inf")

    def claim(self, now: float) -> bool:
        """Whether a refresh is due at `now`; if so it counts as done from
        `now`, so that of the reads in one interval only the first refreshes."""
        if now - self.last < self.every_s:
            return False
        self.last = now
        return True


METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
REFRESH: web.AppKey[PercentileRefresh] = web.AppKey("percentile_refresh", PercentileRefresh)


def refresh_due(request: web.Request) -> bool:
    """Recompute percentiles on this read? (PercentileRefresh)"""
    return request.app[REFRESH].claim(time.monotonic())


def acquire(request: web.Request) -> contextlib.AbstractAsyncContextManager[db.Conn]:
    """A connection from the server's pool, for the time of one handler's block."""
    return db.acquire(request.app[POOL])


async def read_raw(request: web.Request) -> bytes:
    """The request's body, or BadInput for one that cannot be read."""
    try:
        return await request.read()
    except web.HTTPException:
        raise
    except (aiohttp.ClientPayloadError, aiohttp.http_exceptions.HttpProcessingError,
            web.RequestPayloadError, ValueError):  # fmt: skip
        # A body that does not match its Content-Encoding, or is cut short:
        # the connection is in no state to carry another request.
        request[security.BODY_BROKEN] = True
        raise BadInput("request body cannot be decoded (check Content-Encoding)") from None


async def read_object(
    request: web.Request, allowed: Collection[str] | None = None
) -> dict[str, Any]:
    """The JSON object a request carries; with `allowed`, no other field."""
    raw = await read_raw(request)
    if not raw:
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadInput("request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise BadInput("request body must be a JSON object")
    if allowed is not None:
        unknown = sorted(set(doc) - set(allowed))
        if unknown:
            raise BadInput(f"unknown field: {unknown[0]}")
    return doc
