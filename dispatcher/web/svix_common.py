"""The plumbing every Svix-compatible route group (web.svix_*) shares: who
the caller is and which application a path names (`caller`, `scope`,
`application`), the body read once (`read_body`), Svix's lists (`page_limit`,
`?iterator=`, `page_of`) and its signing keys.

Errors are not made here: BadInput, Forbidden and the rest come out as
Svix's `{"code", "detail"}` through security.error_response.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from aiohttp import web

from dispatcher import db
from dispatcher.core.errors import BadInput, Forbidden
from dispatcher.ops import svix as ops
from dispatcher.ops.inputs import parse_time
from dispatcher.web import security
from dispatcher.web.keys import read_object
from dispatcher.web.params import own

DEFAULT_LIMIT = 50
MAX_LIMIT = 250  # Svix's own cap
ALL_TYPES = ["*"]

BODY: web.RequestKey[dict[str, Any]] = web.RequestKey("svix_body", dict)


def caller(request: web.Request) -> str | None:
    """The caller's application; None: the admin."""
    return request.get(security.APP)


def scope(request: web.Request) -> str | None:
    """The caller's application (None: the admin); naming another one
    anyway (`?app=`, a body's "app", as on /v1/) is 403."""
    app = caller(request)
    named = (request.query.get("app"), request.get(BODY, {}).get("app"))
    if app is not None and any(n is not None and n != app for n in named):
        raise Forbidden("this credential acts only inside its own application")
    return app


async def read_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, kept for `scope` to check its "app"."""
    request[BODY] = doc = await read_object(request)
    return doc


def no_content() -> web.Response:
    return web.Response(status=204)


def wants_content(request: web.Request) -> bool:
    return request.query.get("with_content", "true").lower() != "false"


# ---------------------------------------------------------------- applications


async def application(request: web.Request, conn: db.Conn) -> dict[str, Any]:
    """The path's application. An application's credential that names
    another one anyway (`?app=`, a body's "app", as on /v1/): 403."""
    return await ops.application(conn, request.match_info["app_id"], scope(request))


async def application_or_new(request: web.Request, conn: db.Conn) -> dict[str, Any]:
    """`application`, or for the admin, when the body carries an
    `application` (Svix: sending a message or a portal link may create
    it), that one made with the path as its uid."""
    given = request.get(BODY, {}).get("application")
    key = request.match_info["app_id"]
    if given is None or own(request) or await ops.application_exists(conn, key):
        return await application(request, conn)
    if not isinstance(given, dict):
        raise BadInput("application must be an object")
    row, _ = await ops.create_application(conn, {**given, "uid": key}, get_if_exists=True)
    return row


# ---------------------------------------------------------------- lists


def page_limit(request: web.Request) -> int:
    value = request.query.get("limit")
    if value is None:
        return DEFAULT_LIMIT
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= 10_000:
        raise BadInput("limit must be a positive integer")
    return min(int(value), MAX_LIMIT)


def page_after(request: web.Request, size: int = 1) -> list[str] | None:
    """An iterator we handed out: the `size` parts of the last item's sort
    key. Anything else (another list's, cut short, edited) is one 422."""
    value = request.query.get("iterator")
    if not value:
        return None
    try:
        parts = orjson.loads(base64.urlsafe_b64decode(value.encode() + b"==="))
    except ValueError:  # binascii.Error, orjson.JSONDecodeError, UnicodeEncodeError
        raise BadInput("iterator is not one this server handed out") from None
    if (
        not isinstance(parts, list)
        or len(parts) != size
        or not all(isinstance(p, str) and p for p in parts)
    ):
        raise BadInput("iterator is not one this server handed out")
    return parts


def parse_when(value: str) -> datetime:
    """A time from an iterator."""
    at = parse_time(value, "iterator")
    if at is None:
        raise BadInput("iterator is not one this server handed out")
    return at


def parse_number(value: str) -> int:
    """A number from an iterator (or an operational webhook's path id)."""
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise BadInput("iterator is not one this server handed out")
    return int(value)


def iterator_of(*parts: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(parts))).decode().rstrip("=")


def page_of(data: Sequence[Any], limit: int, last_key: tuple[str, ...] | None) -> dict[str, Any]:
    """`data` was fetched with one more than `limit`: whether it is done."""
    done = len(data) <= limit
    return {
        "data": list(data[:limit]),
        "iterator": None if last_key is None else iterator_of(*last_key),
        "prevIterator": None,
        "done": done,
    }


# ---------------------------------------------------------------- signing keys


def signing_key(value: Any) -> str | None:
    """Svix takes a key with or without `whsec_`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput("secret must be a string")
    return value if value.startswith(("whsec_", "whsk_")) else f"whsec_{value}"
