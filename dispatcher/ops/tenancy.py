"""Applications (tenants) and their credentials: API tokens, one-time portal
codes and portal sessions.

Every credential is 256 bits from `secrets`, shown once, and stored only as
its SHA-256 digest: a stolen table signs nobody in, and a slow hash would buy
nothing for a random string that long. A lookup finds the row by its digest
(an index probe) and the digests are then compared with
`hmac.compare_digest`, so no answer's timing depends on how much of a guess
was right. The CLI, the admin API and web.security's checks call these;
SQL stays in db.applications.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from dispatcher.core.errors import BadInput, Forbidden, NotFound
from dispatcher.db import Conn, applications, catalog
from dispatcher.ops.inputs import check_number

TOKEN_PREFIX = "dtk_"
DEFAULT_APP = catalog.DEFAULT_APP
APP_ID = re.compile(r"[a-z0-9_-]{1,64}")
MAX_TTL_S = 10 * 365 * 86_400.0
# SPEC "Limits": a portal code works for an hour unless asked otherwise,
# never longer than Svix's own cap of 7 days (and never past the token
# that minted it).
DEFAULT_PORTAL_TTL_S = 3600.0
MAX_PORTAL_TTL_S = 7 * 86_400.0
PORTAL_SESSION_TTL_S = 12 * 3600.0


def digest(credential: str) -> bytes:
    return hashlib.sha256(credential.encode("utf-8", "surrogateescape")).digest()


def _matches(offered: bytes, stored: bytes) -> bool:
    return hmac.compare_digest(offered, stored)


def check_app(value: Any, name: str = "app") -> str:
    if not isinstance(value, str) or not APP_ID.fullmatch(value):
        raise BadInput(f"{name} must be 1-64 characters of a-z, 0-9, _ and -")
    return value


def _ttl(value: Any, name: str = "ttl_s") -> float:
    return check_number(value, name, 1, MAX_TTL_S)


# ---------------------------------------------------------------- applications


def check_name(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= 200:
        raise BadInput("name must be 1-200 characters")
    return value.strip()


async def add_application(conn: Conn, app: Any, name: Any = None) -> dict[str, Any]:
    """`name` defaults to the id. An existing id: Conflict."""
    app = check_app(app, "application id")
    row = await applications.add_application(conn, app, check_name(app if name is None else name))
    return {"id": row["id"], "name": row["name"]}


# The operator's quotas (SPEC "Limits"), enforced on the HTTP API only.
MAX_ENDPOINTS_RANGE = (0, 1_000_000)
MAX_EVENTS_PER_S_RANGE = (0.001, 1_000_000.0)
APPLICATION_FIELDS = ("name", "max_endpoints", "max_events_per_s")
_CLEAR = " (none, or null in JSON: no quota)"


def check_quota(name: str, value: Any) -> int | float | None:
    """A quota as given (None clears it), checked against its range."""
    if value is None:
        return None
    if name == "max_endpoints":
        low, high = MAX_ENDPOINTS_RANGE
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise BadInput(f"max_endpoints must be an integer from {low} to {high}{_CLEAR}")
        return value
    low_f, high_f = MAX_EVENTS_PER_S_RANGE
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not low_f <= value <= high_f:
        raise BadInput(f"max_events_per_s must be a number from {low_f:g} to {high_f:.0f}{_CLEAR}")
    return float(value)


async def update_application(conn: Conn, app: Any, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Renames an application and sets or clears its quotas: the fields in
    `patch` change (a quota None: no quota), the others stay. Answers the
    application document; an unknown application: NotFound."""
    app = check_app(app)
    unknown = sorted(set(patch) - set(APPLICATION_FIELDS))
    if unknown:
        raise BadInput(f"unknown field: {unknown[0]}")
    name = check_name(patch["name"]) if "name" in patch else None
    quotas = {k: check_quota(k, v) for k, v in patch.items() if k != "name"}
    return await applications.update_application(conn, app, name, quotas)


async def list_applications(conn: Conn, app: str | None = None) -> list[dict[str, Any]]:
    """Each application with its live endpoints and queued deliveries."""
    return await applications.list_applications(conn, app)


# ---------------------------------------------------------------- API tokens


async def issue_token(conn: Conn, app: Any, ttl_s: Any = None) -> dict[str, Any]:
    """A new token of `app`, shown only in this answer; without a ttl it
    lives until revoked."""
    app = check_app(app)
    ttl = None if ttl_s is None else _ttl(ttl_s)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires = await applications.add_token(conn, app, digest(token), ttl)
    return {"app": app, "token": token, "expires_at": expires}


async def revoke_token(conn: Conn, token: Any) -> dict[str, Any]:
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
        raise BadInput(f"a token starts with {TOKEN_PREFIX}")
    app = await applications.revoke_token(conn, digest(token))
    if app is None:
        raise NotFound("no such token")
    return {"app": app, "revoked": True}


Found = TypeVar("Found", bound=tuple[Any, ...])


async def _looked_up(
    find: Callable[[Conn, bytes], Awaitable[Found | None]], conn: Conn, credential: str
) -> Found | None:
    """A stored credential's row, found by the offered one's digest (the
    row's second field), the digests then compared in constant time."""
    offered = digest(credential)
    found = await find(conn, offered)
    return found if found is not None and _matches(offered, found[1]) else None


async def token_application(conn: Conn, token: str) -> tuple[str, bool] | None:
    """(application, live) of an offered token; None when unknown."""
    found = await _looked_up(applications.token_application, conn, token)
    return None if found is None else (found[0], found[2])


# ---------------------------------------------------------------- the portal


def _base_url(value: Any) -> str:
    if not isinstance(value, str):
        raise BadInput("base_url must be an http(s) URL")
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise BadInput(
            "base_url must be an http(s) URL without a query, like https://hooks.example.com"
        )
    return value.strip().rstrip("/")


async def portal_link(
    conn: Conn,
    app: Any,
    base_url: Any,
    ttl_s: Any = None,
    *,
    minted_by: str | None = None,
    ttl_name: str = "ttl_s",
) -> dict[str, Any]:
    """A sign-in link for `app`'s portal whose code works once, until it
    expires: after `ttl_s` (1 s to 7 days, default 1 h; `ttl_name` is how
    the caller's field is called). `minted_by`: the application token that
    asks; the code then expires no later than it and stops working when it
    is revoked or expires, and so does the session it opens."""
    app = check_app(app)
    base = _base_url(base_url)
    ttl = (
        DEFAULT_PORTAL_TTL_S
        if ttl_s is None
        else check_number(ttl_s, ttl_name, 1, MAX_PORTAL_TTL_S)
    )
    code = secrets.token_urlsafe(32)
    by = None if minted_by is None else digest(minted_by)
    expires = await applications.add_portal_code(conn, app, digest(code), ttl, by)
    if expires is None:  # the token was revoked or expired since the guard let it in
        raise Forbidden("this application token is no longer live")
    return {"url": f"{base}/portal/login?code={code}", "code": code, "expires_at": expires}


async def redeem_code(conn: Conn, code: str) -> tuple[str, int | None] | None:
    """(the code's application, the token that minted it or None), marking
    the code used; None if it is unknown, used, expired, or its token is."""
    found = await _looked_up(applications.use_portal_code, conn, code)
    return None if found is None else (found[0], found[2])


async def open_session(conn: Conn, app: str, token_id: int | None = None) -> str:
    """A new portal session id (the cookie's value); opened with a code a
    token minted (`token_id`), it ends with that token."""
    sid = secrets.token_urlsafe(32)
    await applications.add_portal_session(conn, app, digest(sid), PORTAL_SESSION_TTL_S, token_id)
    await applications.prune_portal(conn)
    return sid


async def revoke_portal(conn: Conn, app: Any) -> dict[str, Any]:
    """Ends every portal code and session of `app` at once:
    `{"app", "codes", "sessions"}`, the numbers of those still live."""
    app = check_app(app)
    codes, sessions = await applications.revoke_portal(conn, app)
    return {"app": app, "codes": codes, "sessions": sessions}


async def session_application(conn: Conn, sid: str) -> str | None:
    found = await _looked_up(applications.portal_session_application, conn, sid)
    return None if found is None else found[0]


async def close_session(conn: Conn, sid: str) -> None:
    await applications.end_portal_session(conn, digest(sid))


def csrf_for(sid: str) -> str:
    """The CSRF token of a portal session, derived from its id: a page of
    another origin can neither read the HttpOnly cookie nor compute this."""
    mac = hashlib.sha256(b"dispatcher-portal-csrf:" + sid.encode("utf-8", "surrogateescape"))
    return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")
