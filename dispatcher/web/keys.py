"""What the admin server's handler modules (admin, svix) share: the
application state, by key, and reading a request's JSON object."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import aiohttp
import aiohttp.http_exceptions
import asyncpg
import orjson
from aiohttp import web

from dispatcher.core.errors import BadInput
from dispatcher.settings import Settings
from dispatcher.web import security

POOL: web.AppKey[asyncpg.Pool] = web.AppKey("pool", asyncpg.Pool)
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)


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
