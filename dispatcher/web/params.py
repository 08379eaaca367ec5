"""What a /v1/ handler reads from a request besides its JSON body: the
application the call acts in (`scope`), whether an application's own
credential made it (`own`), and integers, numbers and flags from the path
or the query string. Shared by the /v1/ handler modules (v1, browse,
postbacks), so that each reads them the same way.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dispatcher.core.errors import BadInput, Forbidden
from dispatcher.web import security

FLAGS = {"true": True, "1": True, "false": False, "0": False}


def scope(request: web.Request, named: Any = None) -> str | None:
    """The application a call acts in, from `named` (a body's "app") or
    `?app=`. An application's credential: its own (naming another, in a
    body or the query, is 403). The admin: the one named, None for all (or,
    where something is created, the default)."""
    query = request.query.get("app")
    if named is not None and not isinstance(named, str):
        raise BadInput("app must be an application id")
    own: str | None = request.get(security.APP)
    if own is not None:
        if any(n is not None and n != own for n in (named, query)):
            raise Forbidden("this credential acts only inside its own application")
        return own
    if named is not None and query is not None and named != query:
        raise BadInput("app is given twice, differently")
    return named if named is not None else query


def own(request: web.Request) -> bool:
    """The call is an application's own credential's: what it provokes
    (ops deliveries, replays) is taken from that application's quotas."""
    return request.get(security.APP) is not None


def integer(value: str, name: str) -> int:
    # ASCII digits only: int() also reads other scripts' digits ("٣" is 3).
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise BadInput(f"{name} must be a positive integer")
    n = int(value)
    if not 0 < n < 2**63:
        raise BadInput(f"{name} is out of range")
    return n


def path_id(request: web.Request) -> int:
    """The path's `{id}`."""
    return integer(request.match_info["id"], "id")


def query_int(request: web.Request, name: str) -> int | None:
    value = request.query.get(name)
    return None if value is None else integer(value, name)


def query_number(request: web.Request, name: str) -> float | None:
    value = request.query.get(name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise BadInput(f"{name} must be a number") from None


def flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in FLAGS:
        raise BadInput(f"{name} must be true or false")
    return FLAGS[value]


def trace_context(request: web.Request) -> tuple[str | None, str | None]:
    """The W3C trace context a producer sent (`traceparent`, `tracestate`
    headers), checked where it is stored (an invalid one is ignored)."""
    return request.headers.get("traceparent"), request.headers.get("tracestate")
